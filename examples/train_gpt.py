#!/usr/bin/env python3
"""A tiny GPT trained on batches from shmfeed, runnable on a CPU in seconds and unchanged
under torchrun (one process per GPU, DDP over NCCL, or gloo on CPUs).

    shmfeed run job.yaml -- torchrun --nproc_per_node=8 examples/train_gpt.py --steps 1000
    SHMFEED_JOB=myjob python3 examples/train_gpt.py --steps 5        # one CPU rank

shmfeed.Loader reads the job, rank and world size from the environment (SHMFEED_JOB,
RANK, LOCAL_RANK, WORLD_SIZE) and hands each rank its own batches: nothing else here
knows about data. Batches come as int64 indices, ready for nn.Embedding and
F.cross_entropy. The loop fetches the next batch before it steps the optimizer, as
nanoGPT's train.py does; the checkpoint therefore holds the state of the batch fetched but
not yet trained on (`batch.state`), not the loader's own (one batch later), so a resumed
run sees exactly the batches it would have seen.
"""

import argparse
import math
import os

import torch
import torch.distributed.nn  # noqa: F401  before init_process_group: see the end of main()
import torch.nn as nn
import torch.nn.functional as F

import shmfeed


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, ctx, d=64, heads=4, layers=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        T = idx.shape[1]
        mask = torch.triu(torch.full((T, T), float("-inf"), device=idx.device), 1)
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x, mask)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--checkpoint", help="save model, optimizer and loader state here")
    args = ap.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    loader = shmfeed.Loader()  # device: cuda:LOCAL_RANK when there is a GPU, else CPU
    device = torch.device(loader.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL and torch's own allocations on this GPU
    if world > 1:
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
    torch.manual_seed(0)
    raw = GPT(args.vocab, loader.seq_len).to(device)
    ck = None
    if args.checkpoint and os.path.exists(args.checkpoint):
        ck = torch.load(args.checkpoint, map_location=device)
        # The bare model's weights, loaded before any DDP wrapping (whose own names
        # carry a "module." prefix): a checkpoint of any world size loads.
        raw.load_state_dict(ck["model"])
    model = raw
    if world > 1:
        model = nn.parallel.DistributedDataParallel(
            raw, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    if ck:
        opt.load_state_dict(ck["opt"])
        # Each rank its own state (its provenance chain), saved with this checkpoint
        # (same step); after a change of world size rank 0's, as the position is global.
        own = f"{args.checkpoint}.loader{loader.rank}"
        state = torch.load(own) if ck["world_size"] == world else None
        if state is None or state["step"] != ck["step"]:
            state = torch.load(f"{args.checkpoint}.loader0")
        assert state["step"] == ck["step"], "the loader states are not this checkpoint's"
        loader.load_state_dict(state)

    batch = next(loader)  # fetched before the loop; each step fetches the next one early
    for _ in range(args.steps):
        loss = model(batch.x, batch.y)
        # The next batch is fetched while this step's work runs (on a GPU its copy
        # overlaps the backward pass); this batch's arrays stay valid meanwhile.
        upcoming = next(loader)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if loader.rank == 0:
            print(f"step {batch.step} loss {loss.item():.4f} "
                  f"(ln vocab {math.log(args.vocab):.2f})", flush=True)
        batch = upcoming

    if args.checkpoint:
        # `batch` was fetched but not trained on: the resumed run starts with it. Every
        # rank saves its own loader state beside the checkpoint.
        torch.save(batch.state, f"{args.checkpoint}.loader{loader.rank}")
        if loader.rank == 0:
            torch.save({"model": raw.state_dict(), "opt": opt.state_dict(),
                        "step": batch.step, "world_size": world}, args.checkpoint)
    st = loader.counters()
    print(f"rank {loader.rank}: {args.steps} batches trained on, {st['batches']} fetched, "
          f"provenance {st['provenance']:016x}", flush=True)
    loader.close()
    if world > 1:
        # Every rank past its last collective before any tears its connections down.
        # destroy_process_group frees the group, and gloo's threads end here, only if
        # nothing else holds it: torch.distributed.nn.functional, which DDP's construction
        # imports (through torch._dynamo, torch 2.x), binds the default group into the
        # defaults of ten functions when it is imported after init_process_group. Hence
        # its import at the top: without it the group and its threads lived on into the
        # interpreter's teardown, the likely cause of a rank's rare abort at exit
        # ("terminate called without an active exception", twice in CI, never here).
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
