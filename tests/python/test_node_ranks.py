"""The Loader on a job of `consumers.rank_base: auto` (served by the feed fixture): the
node's global ranks come from the first rank's torchrun environment, a rank of another
node is refused with a shmfeed.Error naming both, a world size that changed is refused
with what to do instead, and a state of another world size with the same global batch
resumes (the elastic-resume path)."""

import pytest

import shmfeed
from shmfeed import _native as N

from conftest import Feed


def torchrun_env(m, job, rank, local_rank, world_size=4, local_world_size=2):
    for k, v in {"SHMFEED_JOB": job, "RANK": rank, "LOCAL_RANK": local_rank,
                 "WORLD_SIZE": world_size, "LOCAL_WORLD_SIZE": local_world_size,
                 "GROUP_RANK": rank // local_world_size}.items():
        m.setenv(k, str(v))


def test_the_first_rank_sets_the_nodes_ranks_and_others_must_agree(monkeypatch):
    with Feed("auto", ranks=2, world_size=4, rank_base="auto") as feed:
        with monkeypatch.context() as m:
            torchrun_env(m, feed.job, 3, 1)
            L1 = shmfeed.Loader(numpy=True)
        with L1:
            assert (L1.rank, L1.local_rank, L1.world_size) == (3, 1, 4)
            assert (L1.next().tokens == feed.expected(3, 0)).all()
            with monkeypatch.context() as m:
                torchrun_env(m, feed.job, 0, 0)
                with pytest.raises(shmfeed.Error) as e:
                    shmfeed.Loader(numpy=True)
            assert e.value.code == N.SF_E_RANGE
            msg = str(e.value)
            assert "RANK=0 with LOCAL_RANK=0" in msg and "0..1" in msg and "2..3" in msg, msg
            with monkeypatch.context() as m:
                torchrun_env(m, feed.job, 2, 0)
                with shmfeed.Loader(numpy=True) as L0:
                    assert L0.rank == 2
                    assert (L0.next().tokens == feed.expected(2, 0)).all()


def test_a_world_size_that_changed_is_refused_with_what_to_do(monkeypatch):
    with Feed("ws", ranks=2, world_size=4, rank_base="auto") as feed:
        with monkeypatch.context() as m:
            torchrun_env(m, feed.job, 0, 0, world_size=2)
            with pytest.raises(shmfeed.Error) as e:
                shmfeed.Loader(numpy=True)
        assert e.value.code == N.SF_E_GEOMETRY
        assert "WORLD_SIZE=2" in str(e.value) and "world_size x batch.size" in str(e.value)


def test_a_state_of_another_world_size_resumes_only_with_the_same_global_batch():
    # World 4 x B 2 (two nodes of 2), then one node of world 2 x B 4: G = 8 both times.
    with Feed("w4", ranks=2, world_size=4, batch=2, rank_base=0) as feed:
        with shmfeed.Loader(job=feed.job, rank=0, world_size=4, local_rank=0,
                            numpy=True) as L:
            for _ in range(3):
                L.next()
            state = L.state_dict()
    with Feed("w2", ranks=2, world_size=2, batch=4) as feed:
        with shmfeed.Loader(job=feed.job, rank=1, world_size=2, local_rank=1,
                            numpy=True) as L:
            L.load_state_dict(state)
            b = L.next()
            assert b.step == 3 and b.first_sample == 3 * 8 + 1 * 4
            assert (b.tokens == feed.expected(1, 3)).all()
    # World 2 x B 2: G = 4, another stream: refused, saying why.
    with Feed("g4", ranks=2, world_size=2, batch=2) as feed:
        with shmfeed.Loader(job=feed.job, rank=0, world_size=2, local_rank=0,
                            numpy=True) as L:
            with pytest.raises(shmfeed.Error) as e:
                L.load_state_dict(state)
            assert e.value.code == N.SF_E_DIGEST
            msg = str(e.value)
            assert "world size 4 (global batch 8)" in msg and "2 x 2 = 4" in msg, msg
