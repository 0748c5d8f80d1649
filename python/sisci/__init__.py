"""sisci: the SISCI shared-memory API from Python, over vsci's libsisci.

A quick look::

    import sisci

    with sisci.Descriptor() as sd:
        seg = sd.create_segment(42, 1 << 20)          # SCICreateSegment
        seg.make_available()                           # SCIPrepareSegment + SCISetSegmentAvailable
        with seg.map() as m:                           # SCIMapLocalSegment
            a = m.array("uint32")                      # numpy view, no copy
            a[0] = 7
            del a                                      # buffers first, then unmap

Objects own their SISCI handles and release them on ``close()``, at the end
of a ``with`` block, when garbage-collected, or at interpreter exit.  Errors
raise :class:`SisciError` with the SISCI code, name and function.  Waits
release the GIL and wake up for Ctrl-C.  Constants keep their C names
(``sisci.SCI_FLAG_BROADCAST``, ``sisci.SCI_ERR_TIMEOUT``).  See
``python/README.md``.
"""
from . import constants
from .constants import *  # noqa: F401,F403 - SCI_* names, as in C
from .errors import ErrorCode, SisciError, SisciLibraryError, SisciTimeoutError, error_name
from ._lib import library_path
from ._core import (CANCEL, WAIT_SLICE, CallbackReason, Descriptor, DMAChannel, DMAQueue,
                    DMAQueueState, DMATransfer, LocalDataInterrupt, LocalInterrupt, LocalSegment, Map,
                    RemoteDataInterrupt, RemoteInterrupt, RemoteSegment, RemoteSegmentEvent,
                    SegmentEvent, Sequence, SequenceStatus, adapter_info, error_string, flush,
                    get_memcopy_function, initialize, local_node_id, open, query_adapter, query_api,
                    query_system, query_vendor_id, set_memcopy_function, store_barrier, terminate)

#: Node id that names every member of a reflective-memory group.
GROUP_ALL = constants.DIS_BROADCAST_NODEID_GROUP_ALL
#: Wait forever (as a timeout in seconds, use None).
INFINITE = None

__version__ = "0.1.0"

__all__ = [
    "Descriptor", "LocalSegment", "RemoteSegment", "Map", "Sequence",
    "LocalInterrupt", "RemoteInterrupt", "LocalDataInterrupt", "RemoteDataInterrupt",
    "DMAQueue", "DMAChannel", "DMATransfer",
    "CallbackReason", "DMAQueueState", "SequenceStatus", "SegmentEvent", "RemoteSegmentEvent",
    "SisciError", "SisciTimeoutError", "SisciLibraryError", "ErrorCode", "error_name",
    "CANCEL", "GROUP_ALL", "WAIT_SLICE",
    "initialize", "terminate", "local_node_id", "query_vendor_id", "query_api",
    "query_adapter", "query_system", "adapter_info", "flush", "store_barrier",
    "set_memcopy_function", "get_memcopy_function", "error_string", "library_path",
    "constants",
    # sisci.open is left out: `from sisci import *` must not hide the builtin open.
] + [n for n in dir(constants) if n.isupper()]
