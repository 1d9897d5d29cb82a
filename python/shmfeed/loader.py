"""shmfeed.Loader: one rank's view of a job.

A Loader attaches to the arena of job SHMFEED_JOB on this node as local rank LOCAL_RANK,
checks that the arena's rank mapping agrees with RANK and WORLD_SIZE (as torchrun sets
them; srun sets SLURM_PROCID and SLURM_NTASKS instead, which the Loader does not read:
start the ranks with torchrun, or pass rank= and world_size=), and yields the rank's
batches in order. Batches are views, built once
at attach for each place a batch can land (the K slots of the rank's ring on CPU, the two
device buffers on a GPU), so that next() costs one C call and no allocation of arrays.

With dtype "native", a batch's arrays hold the batch until the next call on the Loader
(next, release, load_state_dict): on CPU they are zero-copy views of shared memory, not
to be written to. NumPy marks them read-only; torch tensors cannot be. A write into the
batch held changes only that batch (one a rank held when it died is verified, and
refilled for its successor); after the next call the slot is being refilled, and a
write lands in a later batch of the rank: SF_E_CHECKSUM with checksums, silently
without. Copy a batch (.long(), .clone()) before writing into it. On a GPU they are
the device buffer the batch was copied to, ordered on the current CUDA
stream. With "int64" and "int32", the tokens, document starts and sources are copies in
two buffers that alternate (device tensors on a GPU): a batch stays valid while the next
one is fetched, until the next() after that.

Threads: the Loader's calls are serialized, so threads may share it (one stream of
batches between them); a waiting next() waits in slices of 0.1 s, so that Ctrl-C
(KeyboardInterrupt) and a close() from another thread get through within one.

Lifetime: every view the Loader hands out (zero-copy arrays of shared memory, device
buffers) holds a reference to the rank's attachment (the C handle, its mapping of the
arena and, on a GPU, its device buffers). close() marks the Loader closed (every method
then raises Error with code SF_E_STATE); the handle is detached, which releases the
batch held and frees the rank for another Loader, when the last of those views is
gone. So a view read after close() still reads the batch it showed, never unmapped
memory. The copies of int64 and int32 batches on CPU are ordinary memory and hold
nothing.
"""

import atexit
import ctypes
import functools
import inspect
import math
import operator
import os
import re
import threading
import time
import warnings
import weakref

import numpy as np

from . import _native as N

try:
    import torch
except ImportError:  # NumPy arrays then
    torch = None


class Error(RuntimeError):
    """A shmfeed failure: `code` is the C error code, the message the library's detail.
    Made with SF_E_JOB_GONE (as a code, or a text whose last [NAME] says it), it is a
    JobGone, so that `except shmfeed.JobGone` catches it however it was made."""

    def __new__(cls, code=None, message=None):
        if cls is Error and _names_job_gone(code):
            cls = JobGone
        return super().__new__(cls, code, message)

    def __init__(self, code=None, message=None):
        if message is None and not isinstance(code, (str, bool)):
            try:  # Error(code), an int or numpy's: the library's text for a code of its
                code = operator.index(code)
                message = N.strerror(code) if -2**31 <= code < 0 else "shmfeed: unknown error"
            except TypeError:
                pass
        if message is None:
            # Error(text): how torch re-raises a DataLoader worker's exception in the main
            # process (the worker's message and traceback); the code is its last [NAME].
            text = str(code)
            code = _code_of_text(text)
            if code is None and issubclass(type(self), JobGone):
                code = N.SF_E_JOB_GONE
            self.code, self.message, self._args = code, text, (text,)
            self.name = N.ERROR_NAMES.get(code, "")
            super().__init__(text)
            return
        if not isinstance(code, (bool, str)):
            try:  # numpy's integers as ints, as without a message
                code = operator.index(code)
            except TypeError:
                pass
        self.code, self.message, self._args = code, message, (code, message)
        if isinstance(code, int) and not isinstance(code, bool):
            self.name = N.ERROR_NAMES.get(code, f"errno {-code}" if code < 0 else str(code))
        else:  # a code of the caller's own making, or none
            self.name = "" if code is None else str(code)
        super().__init__(f"{message} [{self.name}]" if self.name else str(message))

    def __reduce__(self):  # pickled (multiprocessing returns exceptions so): as made,
        return type(self), self._args, self.__dict__  # with its notes and attributes


class JobGone(Error):
    """The job's launcher died (a crash or SIGKILL): nothing will fill this rank's ring
    again. A waiting next() raises it within a second of the death, whatever its timeout.
    The next `shmfeed run` of the job reclaims the stale arena."""


def _code_of_text(text):
    """The code a message names by its last [SF_E_NAME], or None."""
    names = re.findall(r"\[(SF_E_[A-Z_]+)\]", text)
    return getattr(N, names[-1], None) if names else None


def _names_job_gone(code):
    """Whether Error(code, ...) is about a launcher that is gone: the code, or a text whose
    last [NAME] is SF_E_JOB_GONE."""
    if isinstance(code, str):
        return _code_of_text(code) == N.SF_E_JOB_GONE
    if isinstance(code, bool):
        return False
    try:
        return operator.index(code) == N.SF_E_JOB_GONE
    except TypeError:
        return False


def _state_before(meta, step, epoch, provenance):
    """The resume state of a rank just before its batch of `step` was delivered."""
    G, digest, rank, world_size = meta
    return {"samples": step * G, "epoch": epoch, "config_digest": digest,
            "provenance": provenance, "step": step, "rank": rank, "world_size": world_size}


class Batch:
    """One step of one rank: `tokens` [B, T+1], `x` = tokens[:, :-1] (a view of `tokens`),
    `y` = tokens[:, 1:] (in the int64 and int32 modes a contiguous copy, else a view),
    `step`, `first_sample` (global index of row 0), `digest` (XXH3-64 of the token bytes
    in the arena), `doc_starts` (a [B, D] uint32 NumPy array of document starts per row,
    padded with 0xFFFFFFFF; on a GPU an int32 tensor on the device, padded with -1; None
    when the job records no boundaries), `sources` (in a mixture's job, the source of each
    row as a [B] int32 NumPy array of indexes into the job's `sources` list; on a GPU an
    int32 tensor on the device; None without a mixture), `wait_ns`, and `state`: the
    resume state that
    starts a run at this batch (load_state_dict(batch.state) delivers it next), so a loop
    that fetches ahead checkpoints the batch it has not trained on yet."""

    __slots__ = ("tokens", "x", "y", "step", "first_sample", "digest", "doc_starts", "wait_ns",
                 "_provenance", "_epoch", "_meta", "sources")

    def __init__(self, tokens, x, y, step, first_sample, digest, doc_starts, wait_ns,
                 provenance=0, epoch=0, meta=None, sources=None):
        self.tokens = tokens
        self.x = x
        self.y = y
        self.step = step
        self.first_sample = first_sample
        self.digest = digest
        self.doc_starts = doc_starts
        self.wait_ns = wait_ns
        self._provenance = provenance
        self._epoch = epoch
        self._meta = meta
        self.sources = sources

    @property
    def state(self):
        """The state_dict() of the Loader just before this batch was delivered."""
        return _state_before(self._meta, self.step, self._epoch, self._provenance)

    def __repr__(self):
        return (f"Batch(step={self.step}, first_sample={self.first_sample}, "
                f"shape={tuple(self.tokens.shape)}, digest={self.digest:016x})")


# Ranges of what the Loader takes from outside: ranks and sizes are C int32 (ctypes
# would wrap larger Python ints silently), resume state fields are uint64, a timeout
# is an int32 of milliseconds.
_RANK_MAX = 2**31 - 1
_U64_MAX = 2**64 - 1
_TIMEOUT_MAX_S = (2**31 - 1) / 1000
_SLICE_MS = 100  # a waiting next() returns to Python this often
_NO_STEP = 2**64 - 1  # in Loader._batch.step: no batch taken from the library undelivered


def _checked_int(what, value, lo, hi):
    """`value` as an int in lo..hi, or ValueError naming it and the range. A bool, Python's
    or NumPy's (which numpy 1.x's operator.index takes as 0 or 1), is none."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"shmfeed: {what}={value!r} is not an integer in {lo}..{hi}")
    try:
        n = operator.index(value)
    except TypeError:
        raise ValueError(f"shmfeed: {what}={value!r} is not an integer in {lo}..{hi}") \
            from None
    if not lo <= n <= hi:
        raise ValueError(f"shmfeed: {what}={n} is out of range {lo}..{hi}")
    return n


def _env_int(name, lo, hi):
    """Environment variable `name` as an int in lo..hi; None when unset or empty. Only
    ASCII digits are accepted: no sign, spaces, underscores or other scripts' digits."""
    v = os.environ.get(name)
    if v is None or v == "":
        return None
    if not (v.isascii() and v.isdigit()):
        raise ValueError(f"shmfeed: {name}={v!r} is not an integer in {lo}..{hi}")
    return _checked_int(name, int(v), lo, hi)


def _process_gpu_rank(local_rank):
    """The rank on the node that names this process's GPU: the environment's LOCAL_RANK
    (torchrun's, whose process a model's GPU follows), else `local_rank`, the ring's. A
    rank=/local_rank= of another numbering (the data-parallel group's) names the ring,
    not the GPU."""
    try:
        env = _env_int("LOCAL_RANK", 0, _RANK_MAX)
    except ValueError:
        env = None
    return local_rank if env is None else env


def _env_rank_other_than(rank):
    """Whether the environment's RANK is set, and another rank than `rank` (one that is
    not a rank at all counts as another: the caller's rank= overrides it)."""
    try:
        env_rank = _env_int("RANK", 0, _RANK_MAX)
    except ValueError:
        return True
    return env_rank is not None and env_rank != rank


def _timeout_ms(timeout):
    """A timeout in seconds (None: forever) as the int32 milliseconds of the C API."""
    if timeout is None:
        return -1
    # A number of seconds (a 0-d array or tensor too): not "5", b"5", True or numpy's
    # True_, which float() would take as well.
    dtype = str(getattr(timeout, "dtype", ""))
    try:
        if isinstance(timeout, (str, bytes, bytearray, memoryview, bool)) or \
                dtype in ("bool", "torch.bool"):
            raise TypeError
        t = float(timeout)
    except (TypeError, ValueError):
        raise ValueError(f"shmfeed: timeout={timeout!r} is not a number of seconds: give "
                         f"0..{_TIMEOUT_MAX_S} (None waits forever)") from None
    except OverflowError:  # 10**400
        t = math.inf
    if not 0 <= t <= _TIMEOUT_MAX_S:  # also nan and Decimal("sNaN")
        raise ValueError(f"shmfeed: timeout={timeout!r} is out of range 0..{_TIMEOUT_MAX_S} "
                         "seconds (None waits forever)")
    return math.ceil(t * 1000)  # a timeout under 1 ms waits 1 ms, not none


def _then_close_deferred(method):
    """A Loader method after which a close() that a signal handler made during it takes
    effect (close() from inside a call of the same thread only marks the Loader)."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        finally:
            if self._closing:
                self._close_deferred()
    return call


class _Attachment:
    """The C handle of one attached rank. The Loader and every array it hands out hold a
    reference, so the handle (its mapping of the arena, its device buffers) is detached
    only when the Loader is closed and the last array is gone.

    `handle` is the ctypes box the library stores the handle in, and sets to NULL as it
    detaches (sf_consumer_detach_at(), one call): a KeyboardInterrupt landing between two
    steps of Python code never leaves a handle both detached and stored, nor dropped
    undetached. The box is also in _handles until it is detached, so that one whose
    attachment went without detaching it (its __del__ interrupted) is detached by the
    next attach in the process, or at exit (a review: the rank stayed taken until the
    process exited, and its held batch came again in the next process)."""

    __slots__ = ("handle", "key", "outputs", "lock", "loader", "deferred", "_detach_at",
                 "_release", "__weakref__")

    def __init__(self, lib, handle, key):
        self.handle = handle
        self.key = key
        self.outputs = None  # buffers the library widens batches into
        # While its Loader is open: a finalizer of this attachment that runs before the
        # Loader's (the cyclic collector's order is any) leaves the detach to the
        # Loader's, which first puts back a batch an interrupted next() kept.
        self.loader = False
        self.deferred = False
        # Held around the calls a finalizer makes on the handle (this detach, the
        # Loader's last seek), so that _detach_orphans() in another thread, which may
        # find the weak reference cleared before those finalizers have run (the cyclic
        # collector clears it first), leaves the handle to them.
        self.lock = threading.Lock()
        self._detach_at = lib.sf_consumer_detach_at
        self._release = lib.sf_consumer_release
        _handles[id(handle)] = (handle, weakref.ref(self), self.lock)

    def detach(self):
        with self.lock:
            self._detach_at(ctypes.byref(self.handle))
        _handles.pop(id(self.handle), None)

    def release(self):
        """Release the batch held, keeping the mapping (views of it may still be read)."""
        if self.handle:
            self._release(self.handle)

    def __del__(self):
        if self.loader:
            self.deferred = True
            return
        self.detach()


# The handle boxes not detached yet, by id: (box, weak reference to its _Attachment, the
# attachment's lock).
_handles = {}


def _detach_orphans():
    """Detach the handles whose _Attachment is gone without detaching them (not those
    whose finalizers are at work: they detach them)."""
    if not _handles:
        return  # nothing to detach, and no library to load (one refused raises again)
    lib = N.lib()
    for key, (box, owner, lock) in list(_handles.items()):
        if owner() is None and lock.acquire(blocking=False):
            try:
                lib.sf_consumer_detach_at(ctypes.byref(box))
            finally:
                lock.release()
            _handles.pop(key, None)


# The live attachments of this process by (job, local rank), so that a Loader refused a
# rank this process itself holds can say so.
_attached = weakref.WeakValueDictionary()
# The Loaders of this process, for _after_fork_in_child().
_loaders = weakref.WeakSet()


def _in_dataloader_worker(t):
    """Whether this process is a worker of a torch DataLoader."""
    try:
        return t.utils.data.get_worker_info() is not None
    except AttributeError:  # a torch without torch.utils.data (a stand-in)
        return False


def _after_fork_in_child():
    """A child of fork() holds none of its parent's ranks (the library refuses the
    parent's handles there, and says so), and none of the Loaders' locks: one that a
    thread of the parent held (waiting in next()) would never be let go, and every call,
    close() too, would hang."""
    _attached.clear()
    _handles.clear()
    for loader in list(_loaders):
        loader._lock = threading.RLock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _release_at_exit():
    """The ranks of this process are left where state_dict() says when the interpreter
    exits: torch 2.x frees no tensor left at exit, and a batch's views keep their
    attachment (and the Loader may be left too), so a script ending with its last batch
    alive kept the slot claimed and the next attach of the rank, finding its consumer
    dead, handed that batch out again. Each live Loader puts back a batch an interrupted
    next() took (as its collection would), then the batches still held are released. The
    mappings stay until the process ends."""
    for loader in list(_loaders):
        if loader._lock.acquire(blocking=False):  # not a daemon thread's, inside a call
            try:
                loader._put_back()
            except Exception:  # noqa: BLE001 (a job stopping: the library's position)
                pass
            finally:
                loader._lock.release()
    for owner in list(_attached.values()):
        owner.release()
    _detach_orphans()


atexit.register(_release_at_exit)


class _HostMemory:
    """Exposes host memory through __array_interface__; the array made from it keeps it,
    and so `owner`, alive."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, addr, typestr, shape, owner):
        self.__array_interface__ = {"shape": shape, "typestr": typestr,
                                    "data": (addr, False), "version": 3}
        self.owner = owner


def _host_array(addr, dtype, shape, owner):
    return np.asarray(_HostMemory(addr, np.dtype(dtype).str, shape, owner))


class _CudaBuffer:
    """Exposes a device pointer through __cuda_array_interface__ for torch.as_tensor,
    which keeps this object, and so `owner`, alive as long as the tensor."""

    def __init__(self, ptr, shape, typestr, owner):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (ptr, False), "version": 2}
        self.owner = owner


def _said(job, msg):
    """A message of job `job`: "shmfeed: job 'JOB' MSG", naming the job once where the
    library's message names it already ("job 'x' rank 0: no shmfeed job 'x'" before)."""
    return f"shmfeed: {msg}" if f"job '{job}'" in msg else f"shmfeed: job '{job}' {msg}"


class Loader:
    """Batches of one rank of a shmfeed job.

    job: the job name (default $SHMFEED_JOB). rank, world_size: the global rank and world
    size (default $RANK and $WORLD_SIZE; checked against the arena). local_rank: the rank
    on this node (default $LOCAL_RANK, else rank). With the environment's RANK,
    $LOCAL_WORLD_SIZE and $GROUP_RANK (torchrun sets both) are checked too. For a job of
    `consumers.rank_base: auto`, the first rank to attach sets this node's global ranks
    (RANK - LOCAL_RANK) and every other must agree: a rank that does not is refused with
    an Error (code SF_E_RANGE) naming both; after an elastic restart that gave the node
    other ranks the node re-bases (docs/multinode.md). device: None picks
    cuda:(LOCAL_RANK modulo the GPUs this process sees) when torch sees a GPU, else (and
    in a DataLoader worker, and with numpy=True) the CPU; the environment's LOCAL_RANK,
    the process's, even beside a rank= or local_rank= of another numbering (a
    data-parallel group's), and local_rank without it; "cuda" the same GPU; or "cpu",
    "cuda:N", an int or a torch.device. The job's consumers.device decides over it: `cpu` gives CPU batches,
    `cuda` refuses CPU ones. timeout: seconds next() waits (None: forever). numpy: True
    to get NumPy arrays even when torch is importable.

    dtype: what the token arrays hold.
    - "int64" (default): what nn.Embedding and F.cross_entropy take as they are. On CPU
      the library widens each batch into one of two buffers, which alternate, allocated
      once (two SIMD passes, the tokens then y contiguous, no allocation per step): a
      batch stays valid until the second next() after it; on a GPU a kernel widens it
      on the current stream after the copy, into one of two tensors that alternate the
      same way, with its document starts and sources, whatever the number of device
      buffers. y is a copy there, contiguous as a loss flattens it: writing into tokens
      does not change it.
    - "int32": the same at half the size (embeddings take int32; cross_entropy targets
      need int64); a copy into the two buffers even when the arena holds int32.
    - "native": the arena's own width, uint16 or int32: on CPU a zero-copy view of shared
      memory, no per-step work at all. torch before 2.3 has no uint16: it gets int32.
    """

    def __init__(self, job=None, rank=None, world_size=None, device=None, local_rank=None,
                 timeout=None, numpy=False, dtype="int64"):
        self._h = None
        self._owner = None
        # One C call on the handle at a time. Re-entrant: a signal handler that runs
        # inside next() (a SIGTERM handler saving a checkpoint) may call state_dict() or
        # close(), and a plain lock would wait for itself there for good.
        self._lock = threading.RLock()
        _loaders.add(self)
        self._closing = False
        # Delivery (see next()): a batch the library gave stays in self._batch (its step
        # not _NO_STEP) until it is wrapped; a wrapped one whose next() was interrupted
        # before it returned waits in _undelivered; one being returned is in _returning
        # for the few instructions after the lock's release, for a signal handler's
        # state_dict() or close() there, in the thread of that next() (_returning_in):
        # an exception can still land there and keep the batch. Another thread that
        # runs then (a thread switch there) counts it delivered, since next() returns it
        # with no further place for a signal: its close() put the rank back at it, and
        # the next Loader of the rank served it again (a review).
        self._undelivered = None
        self._returning = None
        self._returning_in = None
        if dtype not in ("int64", "int32", "native"):
            raise ValueError(f"shmfeed.Loader: dtype={dtype!r} is not one of 'int64', "
                             "'int32', 'native'")
        job = job if job is not None else os.environ.get("SHMFEED_JOB")
        if not job:
            raise ValueError("shmfeed.Loader: no job name (pass job= or set SHMFEED_JOB; "
                             "`shmfeed run JOB.yaml -- COMMAND` starts the job and sets "
                             "it for COMMAND)")
        if not isinstance(job, str) or "\0" in job:
            raise ValueError(f"shmfeed.Loader: job={job!r} is not a job name")
        # The node's size and index in the rendezvous count only with the environment's
        # RANK: a rank given by the caller is checked against the node's ranks alone.
        local_world_size = group_rank = None
        rank_given = rank is not None
        if rank is None:
            rank = _env_int("RANK", 0, _RANK_MAX)
            local_world_size = _env_int("LOCAL_WORLD_SIZE", 1, _RANK_MAX)
            group_rank = _env_int("GROUP_RANK", 0, _RANK_MAX)
        else:
            rank = _checked_int("rank", rank, 0, _RANK_MAX)
        if world_size is None:
            world_size = _env_int("WORLD_SIZE", 1, _RANK_MAX)
        else:
            world_size = _checked_int("world_size", world_size, 1, _RANK_MAX)
        if local_rank is None:
            local_rank = _env_int("LOCAL_RANK", 0, _RANK_MAX)
            # torchrun's LOCAL_RANK numbers torchrun's ranks: beside a rank= of another
            # numbering (the data-parallel rank under tensor parallelism) it is not this
            # rank's (a review: the README's Megatron recipe failed as written).
            if rank_given and local_rank is not None and _env_rank_other_than(rank):
                local_rank = None
        else:
            local_rank = _checked_int("local_rank", local_rank, 0, _RANK_MAX)
        local_from_rank = local_rank is None and rank is not None
        if local_rank is None:
            local_rank = rank if rank is not None else 0
        timeout_ms = _timeout_ms(timeout)
        self._torch = None if numpy else torch
        self._lib = N.lib()
        dev_index = self._pick_device(device, _process_gpu_rank(local_rank), numpy)

        handle = ctypes.c_void_p()
        msg = ctypes.create_string_buffer(512)
        # The library checks these against the job and, for `rank_base: auto`, agrees
        # on this node's global ranks with the node's other ranks (or re-bases it).
        env = N.RankEnv(*(-1 if v is None else v for v in
                          (rank, local_rank, world_size, local_world_size, group_rank)))
        # The handle is owned before it exists: an exception that lands as the attach
        # returns (Ctrl-C's, while a GPU attach took its time) detaches it, where it
        # left the rank taken until the process exited.
        _detach_orphans()
        owner = _Attachment(self._lib, handle, (job, local_rank))
        try:
            r = self._lib.sf_consumer_attach_ranks(job.encode(), ctypes.byref(env), dev_index,
                                                   0, ctypes.byref(handle), msg, len(msg))
            if r < 0:
                detail = msg.value.decode(errors="replace")
                if r == N.SF_E_BUSY and (job, local_rank) in _attached:
                    detail = (f"local rank {local_rank} is held in this process, by another "
                              "Loader or by arrays of batches of a closed one: close it and "
                              "delete them first")
                elif r == N.SF_E_CUDA and device is None and dev_index == N.SF_DEVICE_NONE:
                    # Nobody asked for CPU views by name: say what gave the CPU.
                    detail += f" ({self._cpu_why}), or set consumers.device: auto or cpu"
                elif r == N.SF_E_BUSY and torch is not None and _in_dataloader_worker(torch):
                    detail += (" (this is a DataLoader worker: a rank's batches go to one "
                               "consumer, so one worker of the rank reads them: "
                               "num_workers=1)")
                elif r == N.SF_E_RANGE and local_from_rank and "has local ranks" in detail:
                    # A node of several: its local ranks count from 0 (rank_base).
                    detail += (f" (the local rank defaulted to the rank {rank}: LOCAL_RANK "
                               "is unset, or it came with a RANK other than rank=; on a node "
                               "whose ranks start above 0 pass local_rank=)")
                raise Error(r, _said(job, f"rank {local_rank}: {detail}"))
            self._owner = owner
            _attached[owner.key] = owner
            owner.loader = True
            self._h = handle
            self.job = job
            info = N.Info()
            self._lib.sf_consumer_info(self._h, ctypes.byref(info))
            self._info = info
            if not info.gpu_buffers and getattr(self.device, "type", "cpu") == "cuda":
                # consumers.device: cpu: the job serves CPU views, whatever torch sees.
                self.device = self._torch.device("cpu")
            self._check_ranks(rank, world_size, local_rank)
            t = self._torch
            if info.gpu_buffers and t is not None and not t.cuda.is_available():
                # The job serves this rank GPU batches that this torch cannot use (its
                # first batch failed with torch's own error).
                raise Error(N.SF_E_CUDA, f"shmfeed: job '{job}' rank {local_rank}: "
                            f"device={device!r}, but this torch sees no CUDA device (torch "
                            f"{t.__version__}: a CPU-only build, or no GPU visible to it); "
                            "pass device='cpu' for CPU batches")
            self._build_views(dtype)
            if self._gpu and self.counters()["gpu_staged"]:
                # Said once per process: the library itself never prints. (Raised under
                # -W error: the rank is then let go as for any failure here.)
                warnings.warn(_said(job, f"rank {local_rank}: {self._errmsg()}"),
                              RuntimeWarning, stacklevel=2)
            if world_size is None and info.world_size > 1:
                # Started without torchrun (`shmfeed run JOB -- python train.py`): the other
                # ranks' batches were never read, and nothing said so.
                warnings.warn(f"shmfeed: job '{job}': WORLD_SIZE is not set, so this process "
                              f"reads rank {info.global_rank}'s batches alone, of the job's "
                              f"{info.world_size} ranks; start the ranks with torchrun (or set "
                              "RANK, LOCAL_RANK and WORLD_SIZE, or pass rank= and world_size=)",
                              RuntimeWarning, stacklevel=2)
        except BaseException:
            # No array was handed out: detach now, whatever the traceback still holds.
            if self._h is not None:
                self.close()
            owner.detach()
            raise
        self.rank = info.global_rank
        self.local_rank = info.local_rank
        self.world_size = info.world_size
        self.batch_size = info.batch
        self.seq_len = info.seq_tokens - 1
        self._timeout_ms = timeout_ms
        self._batch = N.Batch()
        self._batch.step = _NO_STEP
        self._batch_ref = ctypes.byref(self._batch)
        self._next = self._lib.sf_consumer_next
        self._stream = 0
        t = self._torch
        # The current stream's handle: torch's own getter where it has one (0.3 us
        # against 6.5 for current_stream() on an H200's host), else through its Stream.
        # Neither holds the Loader: a cycle kept a dropped Loader's rank attached until
        # the garbage collector ran.
        raw = getattr(getattr(t, "_C", None), "_cuda_getCurrentRawStream", None)
        dev = self.device
        self._raw_stream = (functools.partial(raw, dev.index) if raw and self._gpu
                            else lambda: t.cuda.current_stream(dev).cuda_stream)
        self._meta = (info.batch * info.world_size, info.config_digest, self.rank,
                      self.world_size)

    # Setup.

    def _pick_device(self, device, local_rank, numpy):
        """The device index to attach with (`local_rank`: the process's rank on the node,
        _process_gpu_rank()'s), and self.device; with device=None and the CPU chosen,
        self._cpu_why says why."""
        t = self._torch
        if device is None:
            # In a DataLoader worker, CPU batches: they go to the main process through
            # shared memory, and CUDA does not survive the fork of a parent that used it.
            if numpy:
                self._cpu_why = "numpy=True gives CPU arrays; leave it out"
            elif t is None:
                self._cpu_why = "device=None gave the CPU: torch is not installed"
            elif _in_dataloader_worker(t):
                self._cpu_why = ("device=None gives the CPU in a DataLoader worker; read "
                                 "the Loader in the main process")
            elif not t.cuda.is_available():
                self._cpu_why = ("device=None gave the CPU: no CUDA device is visible to "
                                 "this process's torch; run it where one is")
            else:
                self.device = t.device("cuda", local_rank % t.cuda.device_count())
                return self.device.index
            self.device = t.device("cpu") if t is not None else "cpu"
            return N.SF_DEVICE_NONE
        if isinstance(device, bool):
            raise ValueError(f"shmfeed.Loader: device={device!r} is a bool; give a device "
                             "('cuda', 'cuda:1', 'cpu', a GPU number) or leave it out")
        if isinstance(device, int):
            device = f"cuda:{device}"
        if t is None:
            if str(device) != "cpu" and not str(device).startswith("cpu:"):
                raise ValueError(f"shmfeed.Loader: device={device!r}: " + (
                    "numpy=True gives CPU arrays; pass device='cpu' or leave it out"
                    if torch is not None else "a GPU device needs torch"))
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
        # "cuda" without an index: the rank's GPU among those this process sees, as for
        # device=None (with one GPU visible per rank, CUDA_VISIBLE_DEVICES or Slurm's
        # --gpus-per-task, LOCAL_RANK itself is no device here).
        self.device = t.device("cuda", d.index if d.index is not None else
                               local_rank % max(t.cuda.device_count(), 1))
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

    def _build_views(self, out):
        """One set of arrays per place a batch can land. `out` is "int64", "int32" or
        "native" (the arena's own width, zero copy on CPU)."""
        i, t = self._info, self._torch
        B, S, D = i.batch, i.seq_tokens, i.doc_starts_per_seq
        dtype = np.uint16 if i.dtype == N.SF_DTYPE_U16 else np.int32
        if out == "native" and t is not None and dtype == np.uint16 and \
                not hasattr(t, "uint16"):
            out = "int32"  # torch before 2.3 has no uint16
        self._gpu = i.gpu_buffers > 0
        self._tokens, self._x, self._y, self._docs, self._sources = [], [], [], [], []
        self._slot_docs = self._slot_sources = None  # CPU copies: the slots' own views
        src_off = i.sources_offset
        self._gpu_raw = None  # GPU copies: the device buffers' own views
        self._widen = None  # and their CUDA graphs, by device buffer and output
        # Copies (not native): the batches go into self._tokens[0], [1], [0], ... in
        # turn, a seek or not, so that a batch stays valid until the second next() after
        # it; the library says which (batch.output) on the CPU, _out_next on a GPU.
        self._out_count = 0
        self._out_next = 0
        # CPU tensors: the NumPy arrays under self._tokens (and self._y where it is not a
        # view of the tokens) and their addresses, by index, to wrap again what torch
        # moved (_rewrap()).
        self._host = None
        if self._gpu:
            raw_tok, raw_docs, raw_src = [], [], []
            for k in range(i.gpu_buffers):
                tok_ptr, doc_ptr = ctypes.c_uint64(), ctypes.c_uint64()
                r = self._lib.sf_consumer_device_buffer(self._h, k, ctypes.byref(tok_ptr),
                                                        ctypes.byref(doc_ptr))
                if r < 0:
                    self._raise(r)
                # uint16 ids are read as int16 and masked after widening, which every
                # torch can do; int32 ids as they are.
                typestr = "<u2" if dtype == np.uint16 and out == "native" else \
                    "<i2" if dtype == np.uint16 else "<i4"
                raw_tok.append(t.as_tensor(_CudaBuffer(tok_ptr.value, (B, S), typestr,
                                                       self._owner), device=self.device))
                # The document starts come to the device with the tokens; int32, since
                # torch 1.13 has no uint32: the padding reads -1 there.
                raw_docs.append(t.as_tensor(_CudaBuffer(doc_ptr.value, (B, D), "<i4",
                                                        self._owner),
                                            device=self.device) if D else None)
                # A mixture's row sources come with them (sf__sources_offset()).
                raw_src.append(t.as_tensor(_CudaBuffer(tok_ptr.value + src_off, (B,), "<i4",
                                                       self._owner),
                                           device=self.device) if src_off else None)
            if out == "native":
                self._tokens, self._docs, self._sources = raw_tok, raw_docs, raw_src
            else:
                # As on the CPU, a batch stays valid until the second next() after it,
                # whatever the number of device buffers: each is widened (or copied)
                # into the next of two outputs on the caller's stream, with its document
                # starts and sources, before the buffer it came in can be refilled.
                self._gpu_raw = list(zip(raw_tok, raw_docs, raw_src))
                self._gpu_mask = typestr == "<i2"
                self._out_count = 2
                self._tokens = [t.empty((B, S), dtype=getattr(t, out), device=self.device)
                                for _ in range(2)]
                # y contiguous, as a loss flattens it (targets.view(-1)): copied on the
                # device from the tokens, after them.
                self._y = [t.empty((B, S - 1), dtype=getattr(t, out), device=self.device)
                           for _ in range(2)]
                self._docs = [t.empty((B, D), dtype=t.int32, device=self.device) if D
                              else None for _ in range(2)]
                self._sources = [t.empty((B,), dtype=t.int32, device=self.device)
                                 if src_off else None for _ in range(2)]
                self._widen = self._capture_widen()
        else:
            # Document starts begin at the first 64-byte boundary after the tokens
            # (sf__doc_starts_offset() in common/arena.h).
            doc_off = (B * S * np.dtype(dtype).itemsize + 63) // 64 * 64
            wide = None
            if out != "native":
                # The library widens each batch into these as next() returns it, in
                # turn: allocated once, warm in cache, and a batch stays valid
                # while the next one is fetched. Each holds the tokens [B, T+1], then the
                # targets [B, T] contiguous, as a loss flattens them (targets.view(-1)).
                wide = [np.empty(B * S + B * (S - 1), dtype=out) for _ in range(2)]
                ptrs = (ctypes.c_void_p * len(wide))(*[w.ctypes.data for w in wide])
                r = self._lib.sf_consumer_set_output(
                    self._h, (N.SF_DTYPE_I64 if out == "int64" else N.SF_DTYPE_I32) |
                    N.SF_OUTPUT_TARGETS, ptrs, len(wide))
                if r < 0:
                    self._raise(r)
                self._owner.outputs = wide  # the library writes them while it lives
            if wide is not None:
                self._out_count = len(wide)
                self._tokens = [w[:B * S].reshape(B, S) for w in wide]
                self._y = [w[B * S:].reshape(B, S - 1) for w in wide]
                if t is not None:
                    self._host = [(w, w.ctypes.data, y, y.ctypes.data)
                                  for w, y in zip(self._tokens, self._y)]
                    self._tokens = [t.from_numpy(w) for w in self._tokens]
                    self._y = [t.from_numpy(w) for w in self._y]
            for k in range(i.slots_per_rank):
                addr = i.ring_base + k * i.payload_stride
                if wide is None:
                    view = _host_array(addr, dtype, (B, S), self._owner)
                    if t is not None:
                        if self._host is None:
                            self._host = []
                        self._host.append((view, view.ctypes.data, None, None))
                        tok = t.from_numpy(view)  # writable mapping; see the docstring
                    else:
                        view.flags.writeable = False
                        tok = view
                    self._tokens.append(tok)
                docs = _host_array(addr + doc_off, np.uint32, (B, D), self._owner) \
                    if D else None
                if docs is not None:
                    docs.flags.writeable = False
                self._docs.append(docs)
                sources = _host_array(addr + src_off, np.int32, (B,), self._owner) \
                    if src_off else None
                if sources is not None:
                    sources.flags.writeable = False
                self._sources.append(sources)
            if wide is not None:
                # The document starts and sources of a batch live as long as its tokens:
                # copied beside them (a few integers a row), not views of its slot.
                self._slot_docs, self._slot_sources = self._docs, self._sources
                self._docs = [np.empty((B, D), np.uint32) if D else None for _ in wide]
                self._sources = [np.empty((B,), np.int32) if src_off else None
                                 for _ in wide]
        self.dtype = out
        self._x = [tok[:, :-1] for tok in self._tokens]
        if not self._y:  # native: views of the slot, no per-step work
            self._y = [tok[:, 1:] for tok in self._tokens]

    # Iteration.

    def __iter__(self):
        return self

    def next(self, timeout=None, _iterating=False):
        """The next batch; releases the previous one. Raises Error (SF_E_END at the end of
        the data, SF_E_TIMEOUT after `timeout` seconds, default: the Loader's), or JobGone
        when the job's launcher died. An exception a signal handler raises inside next()
        (Ctrl-C's KeyboardInterrupt) loses no batch: the next call returns the batch the
        interrupted one had taken, and state_dict() counts it as not delivered, from
        the handler too, and close() puts the rank back at it. (One that lands after
        next() returned, in the caller's code, is the caller's; `for batch in loader`
        leaves no such instant.) A handler may call state_dict() or close(); next(),
        load_state_dict() and release() inside another call are refused (SF_E_STATE)."""
        self._refuse_inside("next")
        ms = self._timeout_ms if timeout is None else _timeout_ms(timeout)
        left, deadline = 0, None  # the first call does not wait: most batches are ready
        while True:
            batch = None
            try:
                with self._lock:
                    if self._h is None or self._closing:
                        self._raise_closed("next")
                    if self._gpu:
                        # Also for a batch taken by a call that an exception ended, maybe
                        # on another stream (in a `with torch.cuda.stream(s)` the exception
                        # left): the current stream, set now, waits for all that was
                        # queued on that one, the batch's copy and any widening.
                        self._sync_stream()
                    if self._undelivered is not None:
                        batch, self._undelivered = self._undelivered, None
                        if self._batch.step == batch.step:  # kept before it was marked
                            self._batch.step = _NO_STEP
                    elif self._batch.step == _NO_STEP:
                        # An exception raised as this call returns (a signal handled then)
                        # leaves the batch it took in self._batch, wrapped by the next call.
                        r = self._next(self._h, left, self._batch_ref)
                        if r:
                            self._batch.step = _NO_STEP
                            if r == N.SF_E_END and _iterating:
                                raise StopIteration
                            if r not in (N.SF_E_AGAIN, N.SF_E_TIMEOUT):
                                self._raise(r)
                            # On a GPU the wait may be for the previous batch's copy,
                            # queued behind the caller's work: said so on a timeout.
                            behind = self._gpu and "has not completed" in self._errmsg()
                            if ms == 0:  # timeout=0: nothing ready now
                                self._raise_timeout(ms, behind)
                            # Not ready: wait in slices. Python runs signal handlers
                            # (Ctrl-C) only between C calls, and a close() from another
                            # thread takes the lock between them.
                            now = time.monotonic()
                            if deadline is None:
                                deadline = math.inf if ms < 0 else now + ms / 1000
                            elif now >= deadline:
                                self._raise_timeout(ms, behind)
                            left = _SLICE_MS if deadline == math.inf else \
                                max(1, min(_SLICE_MS, math.ceil((deadline - now) * 1000)))
                            continue
                    if batch is None:
                        batch = self._take(self._batch)
                        self._batch.step = _NO_STEP
                    # No call from the wrapping to here: a signal lands before or after.
                    self._returning_in = threading.get_ident()
                    self._returning = batch
                # The lock's release above is the last place an exception can land.
                self._returning = None
                return batch
            except BaseException:
                # Kept before any call: a second signal's exception can land at a call
                # (the check below), and one landing before the batch was kept lost it.
                if batch is not None and self._undelivered is None:
                    self._undelivered = batch
                    self._check_undelivered(batch)
                raise
            finally:
                if self._closing:
                    self._close_deferred()

    # `for batch in loader`: a C-level partial between the loop and next(), so that no
    # Python frame holds the batch after next() returned (a signal handled there would
    # drop it); the end of the data stops the iteration.
    __next__ = functools.partialmethod(next, None, True)

    def _check_undelivered(self, batch):
        """next() was interrupted after it wrapped `batch`, kept for the next call: not
        to be wrapped again, and dropped if the rank has moved on meanwhile (another
        thread's next() or a seek, which released it). Interrupted itself, it leaves the
        batch kept: the next call takes it, marked or not."""
        st = N.Resume()
        with self._lock:
            if self._returning is batch:
                self._returning = None
            if self._batch.step == batch.step:
                self._batch.step = _NO_STEP  # wrapped already: not to be wrapped again
            if self._undelivered is not batch:
                return
            if self._h is None or self._lib.sf_consumer_state(self._h, ctypes.byref(st)) \
                    or st.samples != (batch.step + 1) * self.batch_size * self.world_size:
                self._undelivered = None

    def _close_deferred(self):
        """Tear down for a close() that a signal handler made inside another call of this
        thread, once the outermost call has let the lock go."""
        if self._h is not None and not self._lock._is_owned():
            with self._lock:
                if self._h is not None:
                    self._teardown()

    def _rewrap(self, k):
        """Wrap output (or slot) k's NumPy arrays again, for torch moved its tensors:
        torch.multiprocessing sends a CPU tensor (from a DataLoader worker, through a
        queue) by moving its storage into shared memory in place (share_memory_()), and
        the moved tensor no longer shows what the library writes. The moved one keeps the
        batch it held; later batches get new tensors over the library's memory."""
        tok_np, _, y_np, _ = self._host[k]
        tok = self._torch.from_numpy(tok_np)
        self._tokens[k], self._x[k] = tok, tok[:, :-1]
        self._y[k] = tok[:, 1:] if y_np is None else self._torch.from_numpy(y_np)

    def _take(self, b):
        """The Batch for what next() just returned into `b` (under the lock)."""
        k = b.buffer
        if self._host is not None:  # CPU tensors: moved by torch since (_rewrap())?
            kh = b.output if self._out_count else k
            h = self._host[kh]
            if self._tokens[kh].data_ptr() != h[1] or \
                    (h[2] is not None and self._y[kh].data_ptr() != h[3]):
                self._rewrap(kh)
        if not self._out_count:  # native: the views of where the batch lies
            return Batch(self._tokens[k], self._x[k], self._y[k], b.step, b.first_sample,
                         b.digest, self._docs[k], b.wait_ns, b.provenance, b.epoch,
                         self._meta, self._sources[k])
        # Copies: in the output the library named (CPU) or the next one (GPU), the
        # document starts and sources with them.
        kt = self._out_next if self._gpu_raw is not None else b.output
        docs, sources = self._docs[kt], self._sources[kt]
        if self._gpu_raw is not None:
            if self._widen is not None:
                self._widen[k][kt].replay()
            else:
                self._widen_ops(k, kt)
            # Moved on once the batch is whole: a _take() made again (an exception landed
            # in this one) fills the same output, not the batch the caller holds.
            self._out_next = (kt + 1) % self._out_count
        else:  # the library widened the tokens in next()
            if docs is not None:
                np.copyto(docs, self._slot_docs[k])
            if sources is not None:
                np.copyto(sources, self._slot_sources[k])
        return Batch(self._tokens[kt], self._x[kt], self._y[kt], b.step, b.first_sample,
                     b.digest, docs, b.wait_ns, b.provenance, b.epoch, self._meta, sources)

    def _widen_ops(self, k, kt):
        """Device buffer k widened (or copied) into output kt, with its document starts and
        sources, on the current stream."""
        tok, raw_docs, raw_sources = self._gpu_raw[k]
        self._tokens[kt].copy_(tok)
        if self._gpu_mask:
            self._tokens[kt].bitwise_and_(0xFFFF)
        self._y[kt].copy_(self._tokens[kt][:, 1:])
        if raw_docs is not None:
            self._docs[kt].copy_(raw_docs)
        if raw_sources is not None:
            self._sources[kt].copy_(raw_sources)

    def _capture_widen(self):
        """_widen_ops() for every device buffer and output, each captured once as a CUDA
        graph: a replay is one launch, where the operations are three to five, each a
        kernel launch and torch's dispatch. None where torch cannot capture: then the
        operations run one by one, the same on the device. Only where captures can be
        local to this thread (capture_error_mode, torch 2.1 and later): a global capture
        makes another thread's CUDA call meanwhile (NCCL's watchdog) fail. A capture
        that fails is said in a warning: torch may then be left in an odd state."""
        t = self._torch
        graph = getattr(t.cuda, "CUDAGraph", None)
        try:
            local = graph is not None and "capture_error_mode" in \
                inspect.signature(graph.capture_begin).parameters
        except (TypeError, ValueError):  # a signature Python cannot read
            local = False
        if not local:
            return None
        side = t.cuda.Stream(self.device)
        side.wait_stream(t.cuda.current_stream(self.device))
        graphs = []
        try:
            with t.cuda.device(self.device), t.cuda.stream(side):
                for k in range(len(self._gpu_raw)):
                    graphs.append([])
                    for kt in range(self._out_count):
                        # Once outside the capture: whatever the kernels load on first
                        # use is loaded before it (writes outputs nobody holds yet).
                        self._widen_ops(k, kt)
                        g, begun = graph(), False
                        try:
                            g.capture_begin(capture_error_mode="thread_local")
                            begun = True
                            self._widen_ops(k, kt)
                        finally:
                            if begun:
                                g.capture_end()
                        graphs[-1].append(g)
        except Exception as e:
            warnings.warn(f"shmfeed: job '{self.job}': no CUDA graph for the widening "
                          f"({type(e).__name__}: {e}); widening op by op", RuntimeWarning,
                          stacklevel=4)
            graphs = None
        finally:
            # The warm-up's writes come before anything the caller's stream does next.
            t.cuda.current_stream(self.device).wait_stream(side)
            side.synchronize()
        return graphs

    def _sync_stream(self):
        s = self._raw_stream()
        if s != self._stream:
            r = self._lib.sf_consumer_set_stream(self._h, s)
            if r < 0:
                self._raise(r)
            self._stream = s
            if self._gpu_raw is not None:
                # The outputs were allocated on the stream current at attach; widened on
                # this one, torch's caching allocator must wait for its work before it
                # gives their memory out again, once the Loader and its batches are gone.
                cur = self._torch.cuda.current_stream(self.device)
                for outs in (self._tokens, self._y, self._docs, self._sources):
                    for x in outs:
                        if x is not None:
                            x.record_stream(cur)

    def _raise_timeout(self, ms, behind=False):
        why = (": the copy of the batch before has not completed on the device (the GPU "
               "is still at the work queued before it)") if behind else ""
        raise Error(N.SF_E_TIMEOUT, f"shmfeed: job '{self.job}' rank {self.rank}: no batch "
                     f"within {ms / 1000:g} s (step {self.counters()['next_step']}){why}")

    def _refuse_inside(self, what):
        """Refuse a call that moves the rank from inside another call of this thread (a
        signal handler): it would take or reset the batch that call is taking."""
        if self._lock._is_owned():
            raise Error(N.SF_E_STATE, f"shmfeed: job '{self.job}' rank {self.rank}: {what}() "
                        "inside another call of this Loader in the same thread (a signal "
                        "handler): refused; a handler may call state_dict() or close()")

    def _raise_closed(self, what):
        raise Error(N.SF_E_STATE, f"shmfeed: job '{getattr(self, 'job', '?')}' rank "
                    f"{getattr(self, 'rank', '?')}: {what}() on a closed Loader")

    def _errmsg(self):
        """The library's message of this thread's last failure on the handle (a text it
        cut at 512 bytes may end inside a character)."""
        return self._lib.sf_consumer_errmsg(self._h).decode(errors="replace")

    def _raise(self, code, msg=None):
        """Raise the Error of `code`, with the library's message (or `msg`, read under
        the lock before)."""
        if msg is None:
            msg = self._errmsg() if self._h else ""
        rank = getattr(self, "rank", self._info.global_rank)  # not set during attach
        if not msg.startswith(f"rank {rank}"):  # most of the library's messages name it
            msg = f"rank {rank}: {msg or N.strerror(code)}"
        if code == N.SF_E_CHECKSUM and not getattr(self, "_out_count", 1) and \
                not getattr(self, "_gpu", True):
            msg += (" (dtype='native' gives views of the slots: a write into a batch's "
                    "arrays after the next call lands in a slot being refilled, a later "
                    "batch; copy a batch before writing into it)")
        raise Error(code, _said(self.job, msg))

    @_then_close_deferred
    def release(self):
        """Release the batch held (its arrays may then show another batch)."""
        self._refuse_inside("release")
        with self._lock:
            if self._h is None:
                self._raise_closed("release")
            if self._undelivered is not None or self._batch.step != _NO_STEP:
                return  # the batch held was never delivered (see next()): keep it
            r = self._lib.sf_consumer_release(self._h)
            if r < 0:
                self._raise(r)

    # Resume.

    @_then_close_deferred
    def state_dict(self):
        """The rank's resume state: a few integers. `samples` counts the global samples
        consumed before this rank's next step; `provenance` chains the digests of every
        batch this rank consumed (compare two runs with it)."""
        st = N.Resume()
        with self._lock:
            if self._h is None:
                self._raise_closed("state_dict")
            r = self._lib.sf_consumer_state(self._h, ctypes.byref(st))
            if r < 0:  # a Loader of the parent of this process (before fork())
                self._raise(r)
            kept = self._kept_state()
            if kept is not None:
                return kept
        G = self.batch_size * self.world_size
        return {"samples": st.samples, "epoch": st.epoch, "config_digest": st.config_digest,
                "provenance": st.provenance, "step": st.samples // G, "rank": self.rank,
                "world_size": self.world_size}

    def _kept_state(self):
        """The state of a batch taken but not delivered (under the lock), or None."""
        if self._undelivered is not None:  # see next(): batches not delivered yet
            return self._undelivered.state
        if self._batch.step != _NO_STEP:
            b = self._batch
            return _state_before(self._meta, b.step, b.epoch, b.provenance)
        if self._returning is not None and self._returning_in == threading.get_ident():
            return self._returning.state  # next() is returning it (a handler in it)
        return None

    def _put_back(self):
        """Before the rank is let go (close(), the Loader's collection): a batch taken but
        not delivered (an interrupted next()) is where the next Loader of the rank starts,
        as state_dict() says, not the step after it, which the library holds."""
        if self._h is None or getattr(self, "_batch", None) is None:
            return
        kept = self._kept_state()
        if kept is not None:
            # Nothing to do on failure (a job stopping, a fork's child): the rank's
            # position is then the library's. The batch is forgotten only once the seek
            # is done, which may be made again: a second Ctrl-C in close() lost it (a
            # review: the next Loader started a step later). The attachment may have
            # been detached first (the cyclic collector finalizes the two in any order):
            # its handle, which the box holds, is then NULL, and there is nothing to do.
            with self._owner.lock:
                if self._h:
                    self._lib.sf_consumer_seek(self._h, ctypes.byref(N.Resume(
                        kept["samples"], kept["epoch"], kept["config_digest"],
                        kept["provenance"])))
        self._undelivered = self._returning = None
        self._batch.step = _NO_STEP

    def __del__(self):
        try:
            self._put_back()
        except Exception:  # noqa: BLE001 (at interpreter exit, modules may be gone)
            pass
        owner = getattr(self, "_owner", None)
        if owner is not None:
            owner.loader = False
            if owner.deferred:  # its finalizer ran first (a cycle): detach it now
                owner.detach()

    @_then_close_deferred
    def load_state_dict(self, state):
        """Continue from `state` (from state_dict(), possibly of another world size with
        the same global batch): the next batch is the one that followed it. Each field is
        an integer in 0..2^64-1 (ValueError otherwise); `samples` must be a multiple of
        the global batch and below the job's step limit times it (Error SF_E_RANGE, see
        docs/config.md)."""
        if self._h is None:
            self._raise_closed("load_state_dict")
        self._refuse_inside("load_state_dict")
        if not hasattr(state, "get") or not hasattr(state, "__getitem__"):
            raise TypeError(f"shmfeed: load_state_dict takes the dict state_dict() gave, "
                            f"not {type(state).__name__}")
        missing = [k for k in ("samples", "config_digest", "provenance") if k not in state]
        if missing:
            raise ValueError(f"shmfeed: load_state_dict: the state lacks "
                             f"{', '.join(missing)}: give it the dict state_dict() gave")
        fields = [_checked_int(f"load_state_dict: {name}", state[name], 0, _U64_MAX)
                  for name in ("samples", "config_digest", "provenance")]
        # Information, not position (samples is that), but integers when given.
        for name in ("rank", "world_size"):
            if state.get(name) is not None:
                _checked_int(f"load_state_dict: {name}", state[name], 0, 2**31 - 1)
        if state.get("rank") not in (None, self.rank) and \
                state.get("world_size") in (None, self.world_size):
            warnings.warn(f"shmfeed: rank {self.rank} loads the state of rank "
                          f"{state['rank']}: its batches follow from it (the position is "
                          "global), but its provenance chain is the other rank's; save and "
                          "load each rank's own state to compare runs by provenance",
                          RuntimeWarning, stacklevel=3)
        G = self.batch_size * self.world_size
        step = state.get("step")
        if step is not None and fields[1] == self._meta[1] and fields[0] % G == 0 and \
                _checked_int("load_state_dict: step", step, 0, _U64_MAX) != fields[0] // G:
            # samples is the position; step, for reading, says the same where nothing
            # was edited (in a state of this config, whose global batch is this one's):
            # a hand-edited one would otherwise be ignored without a word.
            warnings.warn(f"shmfeed: load_state_dict: the state's step {step} is not its "
                          f"samples {fields[0]} over the global batch {G} (step "
                          f"{fields[0] // G}): it resumes at samples, step {fields[0] // G}; "
                          "edit samples (step x global batch) to move it",
                          RuntimeWarning, stacklevel=3)
        epoch = _checked_int("load_state_dict: epoch", state.get("epoch", 0), 0, _U64_MAX)
        st = N.Resume(fields[0], epoch, fields[1], fields[2])
        with self._lock:
            if self._h is None:
                self._raise_closed("load_state_dict")
            r = None
            try:
                r = self._lib.sf_consumer_seek(self._h, ctypes.byref(st))
            finally:
                if r is None:  # an exception landed as the seek returned: did it move?
                    now = N.Resume()
                    moved = self._lib.sf_consumer_state(self._h, ctypes.byref(now)) == 0 \
                        and now.samples == st.samples
                else:
                    moved = r == 0
                if moved:  # a batch kept for the next call is one of before the seek
                    self._undelivered = None
                    self._batch.step = _NO_STEP
            why = self._errmsg() if r < 0 else ""
        if r == N.SF_E_DIGEST and state.get("world_size") not in (None, self.world_size):
            # A state of another world size resumes only with the same global batch, which
            # the config digest covers (world_size x batch.size, not either alone).
            step = state.get("step")
            was = f" (global batch {fields[0] // step})" if isinstance(step, int) and \
                0 < step <= fields[0] else ""
            raise Error(r, f"shmfeed: the resume state is of world size "
                           f"{state['world_size']}{was}, this job's is {self.world_size} "
                           f"with global batch {self.batch_size} x {self.world_size} = {G}, "
                           "and the configs differ: a world size that changes at a restart "
                           f"must keep world_size x batch.size ({why})")
        if r < 0:
            self._raise(r, why)

    @_then_close_deferred
    def stats(self):
        """Figures of this rank ready to log as they are, e.g.
        ``wandb.log(loader.stats(), step=step)``: numbers only. ``batches``, ``tokens``,
        ``stalls`` (batches that waited 2^20 ns, 1.05 ms, or more for their data) and the wait
        percentiles ``wait_p50_ms``/``wait_p99_ms`` cover what this Loader delivered
        since the previous call of stats() (or since attach); ``tokens_total`` since
        attach. The totals, provenance and GPU details are in counters()."""
        w = N.Window()
        st = N.Stats()
        with self._lock:
            if self._h is None:
                self._raise_closed("stats")
            r = self._lib.sf_consumer_window(self._h, ctypes.byref(w))
            if r == 0:
                r = self._lib.sf_consumer_stats(self._h, ctypes.byref(st))
            if r < 0:  # a Loader of the parent of this process (before fork())
                self._raise(r)
        return {"batches": w.batches, "tokens": w.tokens, "stalls": w.stalls,
                "wait_p50_ms": w.wait_ns_p50 / 1e6, "wait_p99_ms": w.wait_ns_p99 / 1e6,
                "tokens_total": st.tokens}

    @_then_close_deferred
    def counters(self):
        """Counters of this rank since attach: batches, tokens, wait times (ns),
        provenance, next step, GPU staging."""
        st = N.Stats()
        with self._lock:
            if self._h is None:
                self._raise_closed("counters")
            r = self._lib.sf_consumer_stats(self._h, ctypes.byref(st))
            if r < 0:  # a Loader of the parent of this process (before fork())
                self._raise(r)
        return {"batches": st.batches, "tokens": st.tokens, "wait_ns_total": st.wait_ns_total,
                "wait_ns_p50": st.wait_ns_p50, "wait_ns_p99": st.wait_ns_p99,
                "provenance": st.provenance, "next_step": st.next_step, "gpu": bool(st.gpu),
                "gpu_staged": bool(st.gpu_staged), "staged_copies": st.staged_copies,
                "rank": getattr(self, "rank", self._info.global_rank)}

    # Lifetime.

    def close(self):
        """Close the Loader: every method raises from now on. The rank is detached (its
        batch released, its position kept in the arena: the batch an interrupted next()
        took and did not deliver comes next, as state_dict() says) at once when no view of its
        batches is left, else when the last one goes; until then the arrays stay valid
        and another Loader of the rank is refused. Closing twice does nothing. A next()
        waiting in another thread raises Error (SF_E_STATE) within one slice."""
        self._closing = True
        if self._lock._is_owned():
            return  # from a signal handler inside another call: it tears down as it leaves
        with self._lock:
            self._teardown()

    def _teardown(self):
        self._put_back()
        owner = self._owner
        self._h = self._owner = None  # _h first: _put_back() needs _owner while _h is set
        if owner is not None:
            owner.loader = False
        self._tokens = self._x = self._y = self._docs = self._gpu_raw = self._host = None
        self._sources = self._widen = None
        self._slot_docs = self._slot_sources = None
        self._undelivered = self._returning = None

    @property
    def closed(self):
        return self._h is None or self._closing

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __reduce__(self):
        raise TypeError("a shmfeed.Loader cannot be pickled or copied (it is an attachment "
                        "to shared memory of this process): create the Loader in the "
                        "process that reads it, e.g. in a DataLoader worker, not before")
