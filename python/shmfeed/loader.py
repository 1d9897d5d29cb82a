"""shmfeed.Loader: one rank's view of a job.

A Loader attaches to the arena of job SHMFEED_JOB on this node as local rank LOCAL_RANK,
checks that the arena's rank mapping agrees with RANK and WORLD_SIZE (as torchrun or
Slurm set them), and yields the rank's batches in order. Batches are views, built once
at attach for each place a batch can land (the K slots of the rank's ring on CPU, the two
device buffers on a GPU), so that next() costs one C call and no allocation of arrays.

A batch's arrays are valid until the next call on the Loader (next, state_dict,
load_state_dict, close): on CPU they are read-only, zero-copy views of shared memory
(NumPy marks them read-only; torch tensors cannot be, so do not write to them), on a GPU
they are the device buffer the batch was copied to, ordered on the current CUDA stream.
"""

import ctypes
import os

import numpy as np

from . import _native as N

try:
    import torch
except ImportError:  # NumPy arrays then
    torch = None


class Error(RuntimeError):
    """A shmfeed failure: `code` is the C error code, the message the library's detail."""

    def __init__(self, code, message):
        self.code = code
        self.name = N.ERROR_NAMES.get(code, f"errno {-code}" if code < 0 else str(code))
        super().__init__(f"{message} [{self.name}]")


class JobGone(Error):
    """The job's launcher died (a crash or SIGKILL): nothing will fill this rank's ring
    again. A waiting next() raises it within a second of the death, whatever its timeout.
    The next `shmfeed run` of the job reclaims the stale arena."""


def _error(code, message):
    """The exception for a C error code: JobGone for SF_E_JOB_GONE, else Error."""
    return (JobGone if code == N.SF_E_JOB_GONE else Error)(code, message)


class Batch:
    """One step of one rank: `tokens` [B, T+1], `x` = tokens[:, :-1], `y` = tokens[:, 1:],
    `step`, `first_sample` (global index of row 0), `digest` (XXH3-64 of the token bytes),
    `doc_starts` (a [B, D] uint32 NumPy array of document starts per row, padded with
    0xFFFFFFFF, or None when the job records no boundaries) and `wait_ns`."""

    __slots__ = ("tokens", "x", "y", "step", "first_sample", "digest", "doc_starts", "wait_ns")

    def __init__(self, tokens, x, y, step, first_sample, digest, doc_starts, wait_ns):
        self.tokens = tokens
        self.x = x
        self.y = y
        self.step = step
        self.first_sample = first_sample
        self.digest = digest
        self.doc_starts = doc_starts
        self.wait_ns = wait_ns

    def __repr__(self):
        return (f"Batch(step={self.step}, first_sample={self.first_sample}, "
                f"shape={tuple(self.tokens.shape)}, digest={self.digest:016x})")


def _env_int(name):
    v = os.environ.get(name)
    return int(v) if v not in (None, "") else None


def _host_array(addr, dtype, shape):
    count = int(np.prod(shape))
    raw = (ctypes.c_uint8 * (count * np.dtype(dtype).itemsize)).from_address(addr)
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


class _CudaBuffer:
    """Exposes a device pointer through __cuda_array_interface__ for torch.as_tensor."""

    def __init__(self, ptr, shape, typestr):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (ptr, False), "version": 2}


class Loader:
    """Batches of one rank of a shmfeed job.

    job: the job name (default $SHMFEED_JOB). rank, world_size: the global rank and world
    size (default $RANK and $WORLD_SIZE; checked against the arena). local_rank: the rank
    on this node (default $LOCAL_RANK, else rank - the arena's rank base when that is
    0). device: None picks cuda:LOCAL_RANK when torch sees a GPU, else the CPU; or "cpu",
    "cuda", "cuda:N", an int or a torch.device. timeout: seconds next() waits (None:
    forever). numpy: True to get NumPy arrays even when torch is importable.

    Tokens keep the arena's dtype: int32, or uint16 as NumPy uint16 (or torch.uint16 on
    torch >= 2.3). Older torch has no uint16, so such tokens are widened to int32: on CPU
    into a buffer per ring slot (one copy, no allocation), on a GPU by a kernel on the
    current stream.
    """

    def __init__(self, job=None, rank=None, world_size=None, device=None, local_rank=None,
                 timeout=None, numpy=False):
        self._h = None
        job = job if job is not None else os.environ.get("SHMFEED_JOB")
        if not job:
            raise ValueError("shmfeed.Loader: no job name (pass job= or set SHMFEED_JOB)")
        rank = rank if rank is not None else _env_int("RANK")
        world_size = world_size if world_size is not None else _env_int("WORLD_SIZE")
        local_rank = local_rank if local_rank is not None else _env_int("LOCAL_RANK")
        if local_rank is None:
            local_rank = rank if rank is not None else 0
        self._torch = None if numpy else torch
        self._lib = N.lib()
        dev_index = self._pick_device(device, local_rank)

        handle = ctypes.c_void_p()
        msg = ctypes.create_string_buffer(512)
        r = self._lib.sf_consumer_attach(job.encode(), local_rank, dev_index, 0,
                                         ctypes.byref(handle), msg, len(msg))
        if r < 0:
            raise _error(r, f"shmfeed: job '{job}' rank {local_rank}: {msg.value.decode()}")
        self._h = handle
        self.job = job
        info = N.Info()
        self._lib.sf_consumer_info(self._h, ctypes.byref(info))
        self._info = info
        try:
            self._check_ranks(rank, world_size, local_rank)
            self._build_views()
        except BaseException:
            self.close()
            raise
        self.rank = info.global_rank
        self.local_rank = info.local_rank
        self.world_size = info.world_size
        self.batch_size = info.batch
        self.seq_len = info.seq_tokens - 1
        self._timeout_ms = -1 if timeout is None else int(timeout * 1000)
        self._batch = N.Batch()
        self._batch_ref = ctypes.byref(self._batch)
        self._next = self._lib.sf_consumer_next
        self._stream = 0

    # Setup.

    def _pick_device(self, device, local_rank):
        t = self._torch
        if device is None:
            if t is not None and t.cuda.is_available():
                self.device = t.device("cuda", local_rank % t.cuda.device_count())
                return self.device.index
            self.device = t.device("cpu") if t is not None else "cpu"
            return N.SF_DEVICE_NONE
        if isinstance(device, int):
            device = f"cuda:{device}"
        if t is None:
            if str(device) != "cpu":
                raise ValueError("shmfeed.Loader: a GPU device needs torch")
            self.device = "cpu"
            return N.SF_DEVICE_NONE
        try:
            d = t.device(device)
        except RuntimeError as exc:
            raise ValueError(f"shmfeed.Loader: unsupported device {device!r}") from exc
        if d.type == "cpu":
            self.device = d
            return N.SF_DEVICE_NONE
        if d.type != "cuda":
            raise ValueError(f"shmfeed.Loader: unsupported device {device}")
        self.device = t.device("cuda", d.index if d.index is not None else local_rank)
        return self.device.index

    def _check_ranks(self, rank, world_size, local_rank):
        i = self._info
        where = f"job '{self.job}' (node ranks {i.rank_base}..{i.rank_base + i.ranks - 1} " \
                f"of world size {i.world_size})"
        if world_size is not None and world_size != i.world_size:
            raise Error(N.SF_E_GEOMETRY,
                        f"shmfeed: WORLD_SIZE={world_size} but {where} was started for "
                        f"world size {i.world_size}")
        if rank is not None and rank != i.global_rank:
            raise Error(N.SF_E_RANGE,
                        f"shmfeed: RANK={rank} with LOCAL_RANK={local_rank}, but in {where} "
                        f"local rank {local_rank} is global rank {i.global_rank}")

    def _build_views(self):
        i, t = self._info, self._torch
        B, S, D = i.batch, i.seq_tokens, i.doc_starts_per_seq
        dtype = np.uint16 if i.dtype == N.SF_DTYPE_U16 else np.int32
        self._gpu = i.gpu_buffers > 0
        self._tokens, self._x, self._y, self._docs = [], [], [], []
        self._widen = None
        if self._gpu:
            native_u16 = hasattr(t, "uint16")
            for k in range(2):
                typestr = "<u2" if dtype == np.uint16 and native_u16 else \
                    "<i2" if dtype == np.uint16 else "<i4"
                raw = t.as_tensor(_CudaBuffer(i.device_buffer[k], (B, S), typestr),
                                  device=self.device)
                if typestr == "<i2":
                    wide = t.empty((B, S), dtype=t.int32, device=self.device)
                    self._widen = self._widen or []
                    self._widen.append((raw, wide))
                    raw = wide
                self._tokens.append(raw)
                self._docs.append(_host_array(i.doc_starts_buffer[k], np.uint32, (B, D))
                                  if D else None)
        else:
            # Document starts begin at the first 64-byte boundary after the tokens
            # (sf__doc_starts_offset() in common/arena.h).
            doc_off = (B * S * np.dtype(dtype).itemsize + 63) // 64 * 64
            for k in range(i.slots_per_rank):
                addr = i.ring_base + k * i.payload_stride
                view = _host_array(addr, dtype, (B, S))
                if t is not None and dtype == np.uint16 and not hasattr(t, "uint16"):
                    wide = np.empty((B, S), dtype=np.int32)
                    self._widen = self._widen or []
                    self._widen.append((view, wide))
                    tok = t.from_numpy(wide)
                elif t is not None:
                    tok = t.from_numpy(view)  # writable mapping; see the module docstring
                else:
                    view.flags.writeable = False
                    tok = view
                self._tokens.append(tok)
                docs = _host_array(addr + doc_off, np.uint32, (B, D)) if D else None
                if docs is not None:
                    docs.flags.writeable = False
                self._docs.append(docs)
        self._x = [tok[:, :-1] for tok in self._tokens]
        self._y = [tok[:, 1:] for tok in self._tokens]

    # Iteration.

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return self.next()
        except Error as e:
            if e.code == N.SF_E_END:
                raise StopIteration from None
            raise

    def next(self, timeout=None):
        """The next batch; releases the previous one. Raises Error (SF_E_END at the end of
        the data, SF_E_TIMEOUT after `timeout` seconds, default: the Loader's), or JobGone
        when the job's launcher died."""
        if self._gpu:
            self._sync_stream()
        ms = self._timeout_ms if timeout is None else int(timeout * 1000)
        r = self._next(self._h, ms, self._batch_ref)
        if r:
            self._raise(r)
        b = self._batch
        k = b.buffer
        if self._widen is not None:
            src, dst = self._widen[k]
            if self._gpu:
                dst.copy_(src)
                dst.bitwise_and_(0xFFFF)
            else:
                np.copyto(dst, src)
        return Batch(self._tokens[k], self._x[k], self._y[k], b.step, b.first_sample,
                     b.digest, self._docs[k], b.wait_ns)

    def _sync_stream(self):
        s = self._torch.cuda.current_stream(self.device).cuda_stream
        if s != self._stream:
            r = self._lib.sf_consumer_set_stream(self._h, s)
            if r < 0:
                self._raise(r)
            self._stream = s

    def _raise(self, code):
        msg = self._lib.sf_consumer_errmsg(self._h).decode() if self._h else ""
        raise _error(code, f"shmfeed: job '{self.job}' rank {self.rank}: "
                    f"{msg or N.strerror(code)}")

    def release(self):
        """Release the batch held (its arrays become invalid)."""
        r = self._lib.sf_consumer_release(self._h)
        if r < 0:
            self._raise(r)

    # Resume.

    def state_dict(self):
        """The rank's resume state: a few integers. `samples` counts the global samples
        consumed before this rank's next step; `provenance` chains the digests of every
        batch this rank consumed (compare two runs with it)."""
        st = N.Resume()
        self._lib.sf_consumer_state(self._h, ctypes.byref(st))
        G = self.batch_size * self.world_size
        return {"samples": st.samples, "epoch": st.epoch, "config_digest": st.config_digest,
                "provenance": st.provenance, "step": st.samples // G, "rank": self.rank,
                "world_size": self.world_size}

    def load_state_dict(self, state):
        """Continue from `state` (from state_dict(), possibly of another world size with
        the same global batch): the next batch is the one that followed it."""
        st = N.Resume(int(state["samples"]), int(state.get("epoch", 0)),
                      int(state["config_digest"]), int(state["provenance"]))
        r = self._lib.sf_consumer_seek(self._h, ctypes.byref(st))
        if r < 0:
            self._raise(r)

    def stats(self):
        """Counters of this rank: batches, tokens, wait times (ns), provenance, next step."""
        st = N.Stats()
        self._lib.sf_consumer_stats(self._h, ctypes.byref(st))
        return {"batches": st.batches, "tokens": st.tokens, "wait_ns_total": st.wait_ns_total,
                "wait_ns_p50": st.wait_ns_p50, "wait_ns_p99": st.wait_ns_p99,
                "provenance": st.provenance, "next_step": st.next_step, "gpu": bool(st.gpu),
                "rank": self.rank}

    # Lifetime.

    def close(self):
        """Release the batch held and detach; the rank's position stays in the arena."""
        if self._h:
            self._lib.sf_consumer_detach(self._h)
            self._h = None
        self._tokens = self._x = self._y = self._docs = self._widen = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_h", None):
            self.close()
