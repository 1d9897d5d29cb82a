"""A stand-in for torch with the fake driver's CUDA devices (FAKE_CUDA_DEVICES, 1), for
the Loader's GPU path on a machine without a GPU, with tests/gpu/fake_cuda.c as
libcuda.so.1: its "device memory" is host memory, so a "CUDA tensor" here is a NumPy
array over it. It has only what shmfeed.Loader uses; operations run at once, so the test
makes the fake driver's streams run at once too (fake_cuda_set_eager)."""

import ctypes
import os

import numpy as np

int16, int32, int64 = np.dtype(np.int16), np.dtype(np.int32), np.dtype(np.int64)


class device:
    def __init__(self, kind, index=None):
        if isinstance(kind, device):
            kind, index = kind.type, kind.index
        elif ":" in kind:
            kind, index = kind.split(":")[0], int(kind.split(":")[1])
        if kind not in ("cpu", "cuda"):
            raise RuntimeError(f"unsupported device {kind}")
        self.type, self.index = kind, index


class Tensor:
    def __init__(self, array, dev, keep=None):
        self._a, self.device, self._keep = array, dev, keep

    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)

    def __getitem__(self, key):
        return Tensor(self._a[key], self.device, self)

    def copy_(self, src):
        np.copyto(self._a, src._a, casting="unsafe")
        return self

    def data_ptr(self):
        return self._a.ctypes.data

    def bitwise_and_(self, mask):
        np.bitwise_and(self._a, mask, out=self._a)
        return self

    def record_stream(self, stream):
        recorded.append((self.data_ptr(), self._a.nbytes, stream.cuda_stream))

    def host(self):
        """For the test: a copy of the values."""
        return self._a.copy()


def as_tensor(obj, device=None):
    ai = obj.__cuda_array_interface__
    dt = np.dtype(ai["typestr"])
    n = int(np.prod(ai["shape"])) * dt.itemsize
    mem = (ctypes.c_char * n).from_address(ai["data"][0])
    return Tensor(np.frombuffer(mem, dtype=dt).reshape(ai["shape"]), device, obj)


def empty(shape, dtype=None, device=None):
    return Tensor(np.empty(shape, dtype), device)


def from_numpy(array):
    return Tensor(array, device("cpu"))


# Each record_stream() call, for the tests: (address, bytes, stream handle).
recorded = []


class _Stream:
    cuda_stream = 0  # the NULL stream


class _SideStream:
    """A stream of the fake driver, made in device 0's primary context."""

    def __init__(self, device=None):
        cu = ctypes.CDLL("libcuda.so.1")
        ctx, h, popped = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        ok = (cu.cuInit(0) == 0 and cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
              and cu.cuCtxPushCurrent_v2(ctx) == 0)
        ok = ok and cu.cuStreamCreate(ctypes.byref(h), 0) == 0
        cu.cuCtxPopCurrent_v2(ctypes.byref(popped))
        if not ok:
            raise RuntimeError("fake torch: no stream from the fake driver")
        self.cuda_stream = h.value


_current = [_Stream()]


class _StreamContext:
    def __init__(self, stream):
        self._s = stream

    def __enter__(self):
        _current.append(self._s)

    def __exit__(self, *exc):
        _current.pop()


class cuda:
    is_available = staticmethod(lambda: True)
    # As many GPUs as the fake driver shows (FAKE_CUDA_DEVICES, 1 by default).
    device_count = staticmethod(lambda: int(os.environ.get("FAKE_CUDA_DEVICES", "1")))
    current_stream = staticmethod(lambda dev=None: _current[-1])
    Stream = _SideStream
    stream = _StreamContext
