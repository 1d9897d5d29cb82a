"""Ranks as separate processes, started the way torchrun starts them (Debian's torchrun
1.13 crashes on Python 3.11, so the processes are spawned here with its environment):
disjoint deterministic batches under torch.distributed, a rank killed and resumed, and
two nodes delivering the stream of one."""

import os
import signal
import time

import shmfeed

from conftest import Feed, finish, free_port, rank_env, spawn_worker

STEPS = 10


def expected_digests(feed, global_rank, steps):
    return [shmfeed.digest(feed.expected(global_rank, s).tobytes()) for s in steps]


def test_two_ranks_read_disjoint_deterministic_batches():
    with Feed("ddp", ranks=2) as feed:
        port = free_port()
        procs = [spawn_worker(rank_env(feed.job, r, r, 2, 2, port), "--steps", str(STEPS),
                              "--dist") for r in range(2)]
        results = [finish(p) for p in procs]
        # Every rank gathered the same table: rank r's digests at steps 0..STEPS-1 are
        # those of global samples s*G + r*B ... in the documented global order.
        want = [expected_digests(feed, r, range(STEPS)) for r in range(2)]
        for res in results:
            assert res["all"] == want
        # Disjoint: no batch digest appears twice across ranks and steps.
        flat = [d for row in want for d in row]
        assert len(set(flat)) == len(flat)
        assert [res["rank"] for res in results] == [0, 1]
        assert results[0]["state"]["samples"] == STEPS * 4 * 2


def test_rank_killed_with_sigkill_resumes_exactly(tmp_path):
    with Feed("kill", ranks=2) as feed:
        env = rank_env(feed.job, 1, 1, 2, 2)
        state_dir = str(tmp_path)
        # 0.2 s a step: the kill comes before step 16 even on a loaded machine.
        proc = spawn_worker(env, "--steps", "16", "--numpy", "--state-dir", state_dir,
                            "--pause", "0.2")
        deadline = time.time() + 30
        while len([f for f in os.listdir(state_dir) if f.startswith("step_")]) < 5:
            assert time.time() < deadline and proc.poll() is None
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        done_before = len([f for f in os.listdir(state_dir) if f.startswith("step_")])
        assert 5 <= done_before < 16
        res = finish(spawn_worker(env, "--steps", "16", "--numpy", "--state-dir", state_dir))
        # The restart continued right after the last saved step, and together the two
        # incarnations saw exactly the rank's stream, each step once.
        assert res["steps"][0] == done_before
        assert res["steps"][-1] == 15
        want = expected_digests(feed, 1, range(16))
        seen = {}
        for f in os.listdir(state_dir):
            if f.startswith("step_"):
                import json
                with open(os.path.join(state_dir, f)) as fh:
                    rec = json.load(fh)
                seen[rec["step"]] = rec["digest"]
        assert [seen[s] for s in range(16)] == want
        chain = 0
        for s, d in enumerate(want):
            chain = shmfeed.digest(s.to_bytes(8, "little") + d.to_bytes(8, "little"), chain)
        assert res["state"]["provenance"] == chain


def test_two_nodes_deliver_the_stream_of_one():
    # Node 0 serves global ranks 0-1, node 1 global ranks 2-3, of world size 4.
    with Feed("node0", ranks=2, world_size=4, rank_base=0) as n0, \
            Feed("node1", ranks=2, world_size=4, rank_base=2) as n1, \
            Feed("single", ranks=4) as one:
        assert n0.config_digest == n1.config_digest == one.config_digest
        procs = []
        for g in range(4):
            node = n0 if g < 2 else n1
            procs.append(spawn_worker(rank_env(node.job, g, g % 2, 4, 2), "--steps",
                                      str(STEPS), "--numpy"))
        for g in range(4):
            procs.append(spawn_worker(rank_env(one.job, g, g, 4, 4), "--steps", str(STEPS),
                                      "--numpy"))
        results = [finish(p) for p in procs]
        two_nodes = {r["rank"]: r["digests"] for r in results[:4]}
        one_node = {r["rank"]: r["digests"] for r in results[4:]}
        assert two_nodes == one_node
        assert two_nodes[3] == expected_digests(one, 3, range(STEPS))
        assert [r["local_rank"] for r in results[:4]] == [0, 1, 0, 1]
        assert {r["state"]["provenance"] for r in results[:4]} == \
            {r["state"]["provenance"] for r in results[4:]}
