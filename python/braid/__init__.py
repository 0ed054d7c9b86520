"""braid for Python: collectives on numpy arrays and TensorFlow-style strategies.

    import numpy as np, braid
    comm = braid.Comm.from_env()             # under braid-run -n 4 /usr/bin/python3 script.py
    grad = np.ones(1024, np.float32)
    comm.all_reduce(grad, op="sum")          # in place; out=... for out of place
    work = comm.all_reduce_async(grad)       # a braid.Work: wait(), is_completed(), result()
    work.wait()

Arrays are used where they are (zero copy), so they must be C-contiguous,
of a braid type (float16/32/64, int8, uint8, int32, uint32, int64, uint64;
bf16 as uint16 with dtype='bf16') and writable where braid writes. The GIL
is released while braid waits. Errors are braid.Error subclasses with braid's
messages: braid.InvalidArgument (also a ValueError), braid.Timeout (also a
TimeoutError), braid.PeerLost (also a ConnectionError), braid.Aborted, ...

braid.mirrored holds the strategies (MultiWorkerMirrored, Mirrored,
CentralStorage, ParameterServer). braid.torch (where built) is PyTorch's
process-group backend; it is not imported here.

braid.shutdown() finalizes every communicator of the process and stops
braid's threads; it runs by itself at interpreter exit (atexit), before the
interpreter finalizes.
"""

import atexit as _atexit

from ._braid import (  # noqa: F401
    Aborted,
    Comm,
    DataType,
    Error,
    InternalError,
    InvalidArgument,
    InvalidUsage,
    PeerLost,
    ProtocolMismatch,
    ReduceOp,
    SystemError,
    Timeout,
    UniqueId,
    Unsupported,
    Work,
    __version__,
    mem_alloc,
)
from . import mirrored  # noqa: F401,E402
from ._braid import _shutdown as shutdown  # noqa: E402

_atexit.register(shutdown)

__all__ = [
    "Aborted", "Comm", "DataType", "Error", "InternalError", "InvalidArgument", "InvalidUsage", "PeerLost",
    "ProtocolMismatch", "ReduceOp", "SystemError", "Timeout", "UniqueId", "Unsupported", "Work", "mem_alloc", "mirrored",
    "shutdown",
]
