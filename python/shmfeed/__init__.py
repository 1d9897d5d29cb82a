"""shmfeed: token batches for PyTorch ranks from a node's shared-memory arena.

    import shmfeed
    for batch in shmfeed.Loader():          # job, ranks and device from the environment
        logits, loss = model(batch.x, batch.y)

The package is a ctypes binding of libshmfeed.so (no compiled extension). See
shmfeed.Loader for the environment it reads and the lifetime of the views it returns.
"""

from ._native import strerror, digest  # noqa: F401
from .loader import Loader, Batch, Error, JobGone  # noqa: F401


def version():
    """The version of the loaded libshmfeed."""
    from ._native import lib
    return lib().sf_version().decode()
