"""The ctypes binding of libshmfeed.so: the library lookup, mirrors of the public
structs of include/shmfeed/shmfeed.h (their layout is pinned there by _Static_assert and
compared with these mirrors by tests/python/test_loader.py), and the prototypes."""

import ctypes
import operator
import os

SF_E_BASE = -1000
ERROR_NAMES = {
    -1001: "SF_E_NOT_SHMFEED", -1002: "SF_E_LAYOUT", -1003: "SF_E_UID",
    -1004: "SF_E_GEOMETRY", -1005: "SF_E_BUSY", -1006: "SF_E_CONFIG",
    -1007: "SF_E_TIMEOUT", -1008: "SF_E_CHECKSUM", -1009: "SF_E_STOPPED",
    -1010: "SF_E_RANGE", -1011: "SF_E_CUDA", -1012: "SF_E_TOKENIZER",
    -1013: "SF_E_SOURCE", -1014: "SF_E_STATE", -1015: "SF_E_DIGEST",
    -1016: "SF_E_AGAIN", -1017: "SF_E_PROTOCOL", -1018: "SF_E_END",
    -1019: "SF_E_JOB_GONE",
}
globals().update({name: code for code, name in ERROR_NAMES.items()})

SF_DTYPE_U16 = 1
SF_DTYPE_I32 = 2
SF_DTYPE_I64 = 3
SF_OUTPUT_TARGETS = 0x100  # sf_consumer_set_output(): the targets follow the tokens
SF_ATTACH_CPU = 0x1
SF_ATTACH_EXPLICIT_RELEASE = 0x2
SF_GPU_BUFFERS_MAX = 16


def SF_ATTACH_GPU_BUFFERS(n):
    return (n & 0xFF) << 8
SF_DEVICE_NONE = -1


class Batch(ctypes.Structure):
    _fields_ = [
        ("step", ctypes.c_uint64),
        ("first_sample", ctypes.c_uint64),
        ("batch", ctypes.c_uint32),
        ("seq_tokens", ctypes.c_uint32),
        ("dtype", ctypes.c_uint32),
        ("doc_starts_per_seq", ctypes.c_uint32),
        ("tokens", ctypes.c_void_p),
        ("device_ptr", ctypes.c_uint64),
        ("doc_starts", ctypes.c_void_p),
        ("digest", ctypes.c_uint64),
        ("wait_ns", ctypes.c_uint64),
        ("buffer", ctypes.c_uint32),
        ("output", ctypes.c_uint32),
        ("provenance", ctypes.c_uint64),
        ("epoch", ctypes.c_uint64),
        ("sources", ctypes.c_void_p),
    ]


class Resume(ctypes.Structure):
    _fields_ = [
        ("samples", ctypes.c_uint64),
        ("epoch", ctypes.c_uint64),
        ("config_digest", ctypes.c_uint64),
        ("provenance", ctypes.c_uint64),
    ]


class Window(ctypes.Structure):
    _fields_ = [
        ("batches", ctypes.c_uint64),
        ("tokens", ctypes.c_uint64),
        ("wait_ns_total", ctypes.c_uint64),
        ("wait_ns_p50", ctypes.c_uint64),
        ("wait_ns_p99", ctypes.c_uint64),
        ("stalls", ctypes.c_uint64),
    ]


class Stats(ctypes.Structure):
    _fields_ = [
        ("batches", ctypes.c_uint64),
        ("tokens", ctypes.c_uint64),
        ("wait_ns_total", ctypes.c_uint64),
        ("wait_ns_p50", ctypes.c_uint64),
        ("wait_ns_p99", ctypes.c_uint64),
        ("provenance", ctypes.c_uint64),
        ("next_step", ctypes.c_uint64),
        ("gpu", ctypes.c_uint32),
        ("gpu_staged", ctypes.c_uint32),
        ("staged_copies", ctypes.c_uint64),
    ]


class Info(ctypes.Structure):
    _fields_ = [
        ("local_rank", ctypes.c_uint32),
        ("global_rank", ctypes.c_uint32),
        ("world_size", ctypes.c_uint32),
        ("ranks", ctypes.c_uint32),
        ("rank_base", ctypes.c_uint32),
        ("slots_per_rank", ctypes.c_uint32),
        ("batch", ctypes.c_uint32),
        ("seq_tokens", ctypes.c_uint32),
        ("dtype", ctypes.c_uint32),
        ("doc_starts_per_seq", ctypes.c_uint32),
        ("device", ctypes.c_int32),
        ("gpu_buffers", ctypes.c_uint32),
        ("payload_stride", ctypes.c_uint64),
        ("ring_base", ctypes.c_uint64),
        ("device_buffer", ctypes.c_uint64 * 2),
        ("doc_starts_buffer", ctypes.c_uint64 * 2),
        ("config_digest", ctypes.c_uint64),
        ("sources_offset", ctypes.c_uint64),
    ]


class RankEnv(ctypes.Structure):
    """What the rank's launcher says (torchrun's environment); -1 where not known."""
    _fields_ = [
        ("rank", ctypes.c_int64),
        ("local_rank", ctypes.c_int64),
        ("world_size", ctypes.c_int64),
        ("local_world_size", ctypes.c_int64),
        ("group_rank", ctypes.c_int64),
    ]


MIRRORS = {"sf_batch": Batch, "sf_resume": Resume, "sf_consumer_stats": Stats,
           "sf_consumer_window": Window, "sf_consumer_info": Info, "sf_rank_env": RankEnv}


def _candidates():
    env = os.environ.get("SHMFEED_LIB")
    if env:
        # An explicit override is the only candidate: falling back would hide its typo.
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libshmfeed.so.0", "libshmfeed.so"):
        path = os.path.join(here, name)
        if os.path.exists(path):
            yield path
    yield "libshmfeed.so.0"


def _load():
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as exc:
            errors.append(f"{path}: {exc}")
    raise OSError("cannot load libshmfeed (install shmfeed with pip, or set SHMFEED_LIB to "
                  "its path): " + "; ".join(errors))


def _layout(L):
    """The library's own layout of its public structs (sf_abi_entry()): {name: (offset,
    size)}, or None for a library that does not say."""
    try:
        entry = L.sf_abi_entry
    except AttributeError:
        return None
    size_t = ctypes.c_size_t
    entry.restype = ctypes.c_char_p
    entry.argtypes = [ctypes.c_uint32, ctypes.POINTER(size_t), ctypes.POINTER(size_t)]
    layout, off, size = {}, size_t(), size_t()
    i = 0
    while True:
        name = entry(i, ctypes.byref(off), ctypes.byref(size))
        if name is None:
            return layout
        layout[name.decode()] = (off.value, size.value)
        i += 1


def check_layout(L, mirrors=None):
    """Refuse a library whose public structs are laid out otherwise than this package's
    mirrors of them: a library of another build, whose batches the package would misread
    (another slot's tokens, writes past a struct) without a word."""
    mirrors = MIRRORS if mirrors is None else mirrors
    layout = _layout(L)
    try:
        L.sf_version.restype = ctypes.c_char_p
        where = f"libshmfeed at {L._name} (shmfeed {L.sf_version().decode()})"
    except AttributeError:
        where = f"libshmfeed at {L._name}"
    fix = ("load the library built with this package (SHMFEED_LIB=BUILD/libshmfeed.so for "
           "a build tree, or reinstall the package and the library together)")
    if layout is None:
        raise OSError(f"{where} does not say how its structs are laid out (no sf_abi_entry: "
                      f"it is older than this Python package), so its batches cannot be "
                      f"read safely; {fix}")
    wrong = []
    for cname, mirror in mirrors.items():
        there = layout.get(cname)
        if there != (0, ctypes.sizeof(mirror)):
            wrong.append(f"struct {cname} is " + (f"{there[1]} bytes there" if there else
                                                  "unknown there") +
                         f", {ctypes.sizeof(mirror)} here")
        for fname, _ in mirror._fields_:
            field, there = getattr(mirror, fname), layout.get(f"{cname}.{fname}")
            if there != (field.offset, field.size):
                wrong.append(f"{cname}.{fname} " + (f"at {there[0]} ({there[1]} bytes) there"
                                                    if there else "unknown there") +
                             f", at {field.offset} ({field.size} bytes) here")
    if wrong:
        shown = "; ".join(wrong[:4]) + (f"; and {len(wrong) - 4} more" if len(wrong) > 4
                                         else "")
        raise OSError(f"{where} lays out its structs otherwise than this Python package "
                      f"expects ({shown}): the two come from different builds of shmfeed, "
                      f"and its batches would be misread; {fix}")


_lib = None


def lib():
    """The loaded library, with prototypes set; loaded on first use, and refused when its
    structs are laid out otherwise than the mirrors here (check_layout())."""
    global _lib
    if _lib is not None:
        return _lib
    L = _load()
    check_layout(L)
    vp, u32, i32, u64 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64
    protos = {
        "sf_strerror": (ctypes.c_char_p, [ctypes.c_int]),
        "sf_version": (ctypes.c_char_p, []),
        "sf_consumer_attach": (ctypes.c_int, [ctypes.c_char_p, i32, i32, u32,
                                              ctypes.POINTER(vp), ctypes.c_char_p, u32]),
        "sf_consumer_attach_ranks": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(RankEnv),
                                                    i32, u32, ctypes.POINTER(vp),
                                                    ctypes.c_char_p, u32]),
        "sf_consumer_info": (ctypes.c_int, [vp, ctypes.POINTER(Info)]),
        "sf_consumer_set_stream": (ctypes.c_int, [vp, u64]),
        "sf_consumer_next": (ctypes.c_int, [vp, i32, ctypes.POINTER(Batch)]),
        "sf_consumer_release": (ctypes.c_int, [vp]),
        "sf_consumer_release_batch": (ctypes.c_int, [vp, ctypes.POINTER(Batch)]),
        "sf_consumer_device_buffer": (ctypes.c_int, [vp, u32, ctypes.POINTER(u64),
                                                     ctypes.POINTER(u64)]),
        "sf_consumer_state": (ctypes.c_int, [vp, ctypes.POINTER(Resume)]),
        "sf_consumer_seek": (ctypes.c_int, [vp, ctypes.POINTER(Resume)]),
        "sf_consumer_stats": (ctypes.c_int, [vp, ctypes.POINTER(Stats)]),
        "sf_consumer_window": (ctypes.c_int, [vp, ctypes.POINTER(Window)]),
        "sf_consumer_errmsg": (ctypes.c_char_p, [vp]),
        "sf_consumer_detach": (None, [vp]),
        "sf_consumer_detach_at": (None, [ctypes.POINTER(vp)]),
        "sf_digest": (u64, [vp, u64, u64]),
        "sf_consumer_set_output": (ctypes.c_int, [vp, u32, ctypes.POINTER(vp), u32]),
        "sf_tokens_widen": (ctypes.c_int, [vp, u32, vp, u32, u64]),
    }
    for name, (restype, argtypes) in protos.items():
        fn = getattr(L, name)
        fn.restype = restype
        fn.argtypes = argtypes
    _lib = L
    return L


def strerror(code):
    code = operator.index(code)
    if not -2**31 <= code < 2**31:  # ctypes would wrap it
        raise ValueError(f"shmfeed.strerror: {code} is no error code")
    return lib().sf_strerror(code).decode()


def digest(data, seed=0):
    """XXH3-64 of a bytes-like object, as the library computes batch digests."""
    seed = operator.index(seed)
    if not 0 <= seed < 2**64:  # ctypes would wrap it
        raise ValueError(f"shmfeed.digest: seed={seed} is out of range 0..2^64-1")
    buf = memoryview(data).cast("B")
    arr = (ctypes.c_uint8 * len(buf)).from_buffer_copy(buf) if buf.readonly else \
        (ctypes.c_uint8 * len(buf)).from_buffer(buf)
    return lib().sf_digest(arr, len(buf), seed)
