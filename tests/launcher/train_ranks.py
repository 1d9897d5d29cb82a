"""A rank of a small DDP training loop over shmfeed, for the end-to-end test: a bigram
language model trained with gloo DDP on CPU for --steps steps from shmfeed.Loader();
each batch's (global rank, step, first sample, digest) goes to --out-dir/rRANK.txt, and
the loss must fall."""

import argparse
import os

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group (README, known limits)
import torch.nn.functional as F

import shmfeed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--vocab", type=int, default=257)  # bytes and <|endoftext|>
    a = ap.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Embedding(a.vocab, a.vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    losses = []
    with shmfeed.Loader(device="cpu") as loader, \
            open(os.path.join(a.out_dir, f"r{rank}.txt"), "w") as out:
        assert loader.rank == rank and loader.world_size == dist.get_world_size()
        for step, batch in zip(range(a.steps), loader):
            x, y = batch.x.long(), batch.y.long()
            loss = F.cross_entropy(model(x).view(-1, a.vocab), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            out.write(f"{rank} {batch.step} {batch.first_sample} {batch.digest:016x}\n")
    dist.barrier()
    dist.destroy_process_group()
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    print(f"rank {rank}: loss {first:.3f} -> {last:.3f} over {len(losses)} steps", flush=True)
    assert last < first, "the loss did not fall"


if __name__ == "__main__":
    main()
