"""The SISCI objects: descriptors, segments, maps, sequences, interrupts,
data interrupts, DMA queues and channels.  This module holds the
library-wide calls and :class:`Descriptor`, through which everything else
is made, and gathers the rest: ``_base`` (enums, helpers, the handle base
class), ``_segments`` (segments, maps, sequences), ``_interrupts`` and
``_dma``.

Each class owns one SISCI handle.  ``close()`` releases it (and first
whatever was made through it: a segment's maps, a map's sequences, a
descriptor's everything); every class is a context manager that closes on
exit; an object that is garbage-collected without ``close()`` is released
then (errors ignored), and so is everything still open when the interpreter
exits.  A closed object's methods raise :class:`SisciError` with
``SCI_ERR_ILLEGAL_PARAMETER`` (the handle is gone), as the C library answers
a released handle.

Waits (interrupts, data interrupts, segment events, DMA queues, connects
that wait for their target) call the library in slices of at most
:data:`WAIT_SLICE` seconds with the GIL released, so other Python threads
run, and return to the interpreter between slices, so Ctrl-C
(``KeyboardInterrupt``) and other signal handlers run within a slice.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Dict, Optional

from . import constants as C
from ._lib import error_string, ffi, lib
from ._base import (CANCEL, WAIT_SLICE, CallbackReason, DMAQueueState, RemoteSegmentEvent,
                    SegmentEvent, SequenceStatus, Timeout, _Handle, _NULL, _check, _err, _finalizer)
from ._dma import DMAChannel, DMAQueue, DMATransfer
from ._interrupts import LocalDataInterrupt, LocalInterrupt, RemoteDataInterrupt, RemoteInterrupt
from ._segments import LocalSegment, Map, RemoteSegment, Sequence

__all__ = [
    "WAIT_SLICE", "CallbackReason", "DMAQueueState", "SequenceStatus", "CANCEL",
    "SegmentEvent", "RemoteSegmentEvent",
    "Descriptor", "LocalSegment", "RemoteSegment", "Map", "Sequence",
    "LocalInterrupt", "RemoteInterrupt", "LocalDataInterrupt", "RemoteDataInterrupt",
    "DMAQueue", "DMAChannel", "DMATransfer",
    "open", "initialize", "terminate", "local_node_id", "query_vendor_id", "query_api",
    "query_adapter", "query_system", "adapter_info", "flush", "store_barrier",
    "set_memcopy_function", "get_memcopy_function", "error_string",
]


# ---------------------------------------------------------------------------
# Library-wide calls

def initialize(flags: int = 0) -> None:
    """``SCIInitialize`` (optional: the first descriptor initialises the library)."""
    e = _err()
    lib.SCIInitialize(flags, e)
    _check(e, "SCIInitialize")


def terminate() -> None:
    """``SCITerminate``: release everything this process holds in the
    library.  Python objects made before stay valid objects; their
    ``close()`` then succeeds once, as the C library answers a first
    release after ``SCITerminate``."""
    lib.SCITerminate()


def local_node_id(adapter: int = 0) -> int:
    """``SCIGetLocalNodeId``: this node's id."""
    n = ffi.new("unsigned int *")
    e = _err()
    lib.SCIGetLocalNodeId(adapter, n, 0, e)
    _check(e, "SCIGetLocalNodeId")
    return int(n[0])


def _query_string(command: int) -> str:
    buf = ffi.new("char[]", 256)
    q = ffi.new("sci_query_string_t *", {"str": buf, "length": 256})
    e = _err()
    lib.SCIQuery(command, q, 0, e)
    _check(e, "SCIQuery")
    return ffi.string(buf).decode("utf-8", "replace")


def query_vendor_id() -> str:
    """``SCIQuery(SCI_Q_VENDORID)``: the vendor string."""
    return _query_string(C.SCI_Q_VENDORID)


def query_api() -> str:
    """``SCIQuery(SCI_Q_API)``: the API version string."""
    return _query_string(C.SCI_Q_API)


def query_adapter(subcommand: int, adapter: int = 0) -> int:
    """``SCIQuery(SCI_Q_ADAPTER)`` with ``subcommand`` (``SCI_Q_ADAPTER_*``,
    e.g. ``SCI_Q_ADAPTER_NODEID``): the unsigned value it answers."""
    v = ffi.new("unsigned int *")
    q = ffi.new("sci_query_adapter_t *", {"localAdapterNo": adapter, "portNo": 0,
                                         "subcommand": subcommand, "data": v})
    e = _err()
    lib.SCIQuery(C.SCI_Q_ADAPTER, q, 0, e)
    _check(e, "SCIQuery")
    return int(v[0])


def query_system(subcommand: int) -> int:
    """``SCIQuery(SCI_Q_SYSTEM)`` with ``subcommand`` (``SCI_Q_SYSTEM_*``)."""
    v = ffi.new("unsigned int *")
    q = ffi.new("sci_query_system_t *", {"subcommand": subcommand, "data": v})
    e = _err()
    lib.SCIQuery(C.SCI_Q_SYSTEM, q, 0, e)
    _check(e, "SCIQuery")
    return int(v[0])


_ADAPTER_QUERIES = {
    "node_id": C.SCI_Q_ADAPTER_NODEID,
    "serial_number": C.SCI_Q_ADAPTER_SERIAL_NUMBER,
    "card_type": C.SCI_Q_ADAPTER_CARD_TYPE,
    "configured": C.SCI_Q_ADAPTER_CONFIGURED,
    "link_operational": C.SCI_Q_ADAPTER_LINK_OPERATIONAL,
    "dma_size_alignment": C.SCI_Q_ADAPTER_DMA_SIZE_ALIGNMENT,
    "dma_offset_alignment": C.SCI_Q_ADAPTER_DMA_OFFSET_ALIGNMENT,
    "dma_mtu": C.SCI_Q_ADAPTER_DMA_MTU,
    "suggested_min_dma_size": C.SCI_Q_ADAPTER_SUGGESTED_MIN_DMA_SIZE,
    "suggested_min_block_size": C.SCI_Q_ADAPTER_SUGGESTED_MIN_BLOCK_SIZE,
    "att_page_size": C.SCI_Q_ADAPTER_ATT_PAGE_SIZE,
    "dma_available": C.SCI_Q_ADAPTER_DMA_AVAILABLE,
}


def adapter_info(adapter: int = 0) -> Dict[str, Any]:
    """Vendor, API and the adapter's answers to the usual ``SCI_Q_ADAPTER``
    sub-commands, as a dict (``{"vendor": ..., "api": ..., "node_id": ...}``)."""
    out: Dict[str, Any] = {"vendor": query_vendor_id(), "api": query_api()}
    for k, sub in _ADAPTER_QUERIES.items():
        out[k] = query_adapter(sub, adapter)
    return out


def flush(sequence: Optional["Sequence"] = None, flags: int = 0) -> None:
    """``SCIFlush``: every earlier store is visible (at other nodes'
    segments too) before any later one."""
    lib.SCIFlush(sequence._h if sequence is not None and not sequence.closed else _NULL, flags)


def store_barrier(sequence: Optional["Sequence"] = None, flags: int = 0) -> None:
    """``SCIStoreBarrier``: as :func:`flush`."""
    lib.SCIStoreBarrier(sequence._h if sequence is not None and not sequence.closed else _NULL, flags)


def set_memcopy_function(routine: int) -> None:
    """``SetSciMemCopyFunction``: 0 memmove, 1 8-byte stores, 2 non-temporal stores."""
    lib.SetSciMemCopyFunction(routine)


def get_memcopy_function() -> int:
    """``GetSciMemCopyFunction``: the copy routine in use."""
    return int(lib.GetSciMemCopyFunction())


def open(flags: int = 0) -> "Descriptor":  # noqa: A001 - SISCI's name for it
    """``SCIOpen``: a new :class:`Descriptor` (same as ``Descriptor(flags)``)."""
    return Descriptor(flags)


# ---------------------------------------------------------------------------
# Descriptors

class Descriptor(_Handle):
    """A SISCI virtual device (``SCIOpen``): everything else is made through one.

    ``close()`` (``SCIClose``) releases everything made through it; it raises
    ``BufferError`` first, releasing nothing, while Python buffers over any
    of its maps are alive (see :meth:`Map.close`).
    """

    _kind = "descriptor"

    def __init__(self, flags: int = 0) -> None:
        super().__init__(None)
        p = ffi.new("sci_desc_t *")
        e = _err()
        lib.SCIOpen(p, flags, e)
        _check(e, "SCIOpen")
        self._h = p[0]
        self._fin = weakref.finalize(self, _finalizer("SCIClose"), self._h)

    def _release(self) -> None:
        # SCIClose releases every object of the descriptor; the Python
        # objects are only marked (their handles are gone with it).
        for c in self._live_children():
            c._forget()
        e = _err()
        lib.SCIClose(self._h, 0, e)
        _check(e, "SCIClose")

    def close(self) -> None:
        """``SCIClose``: release the descriptor and everything made through it."""
        if self.closed:
            return
        self._check_exports()
        self._release()
        assert self._fin is not None
        self._fin.detach()
        self._open = False

    # -- nodes --------------------------------------------------------------

    def probe_node(self, node_id: int, adapter: int = 0) -> bool:
        """``SCIProbeNode``: can this node reach ``node_id``?  False for a node
        that is not in the cluster or not answering."""
        h = self._h_or_raise("SCIProbeNode")
        e = _err()
        r = lib.SCIProbeNode(h, adapter, node_id, 0, e)
        if e[0] in (C.SCI_ERR_NO_SUCH_NODEID, C.SCI_ERR_NODE_NOT_RESPONDING,
                    C.SCI_ERR_NO_REMOTE_LINK_ACCESS):
            return False
        _check(e, "SCIProbeNode")
        return bool(r)

    # -- segments -----------------------------------------------------------

    def create_segment(self, segment_id: Optional[int], size: int, *, flags: int = 0,
                       callback: Optional[Callable[..., Any]] = None,
                       broadcast: bool = False, private: bool = False) -> "LocalSegment":
        """``SCICreateSegment``: a zero-filled local segment of ``size`` bytes.

        ``segment_id`` None picks a free id (``SCI_FLAG_AUTO_ID``).
        ``broadcast=True`` makes it this node's member of reflective-memory
        group ``segment_id`` (``SCI_FLAG_BROADCAST``); ``private=True`` adds
        ``SCI_FLAG_PRIVATE``.  ``callback(segment, reason, node_id, adapter,
        status)`` gets CONNECT/DISCONNECT events on a library thread
        (``SCI_FLAG_USE_CALLBACK``); return :data:`CANCEL` to stop them.
        """
        if segment_id is None:
            flags |= C.SCI_FLAG_AUTO_ID
            segment_id = 0
        if broadcast:
            flags |= C.SCI_FLAG_BROADCAST
        if private:
            flags |= C.SCI_FLAG_PRIVATE
        return LocalSegment._create(self, segment_id, size, flags, callback)

    def attach_segment(self, segment_id: int, *, flags: int = 0,
                       callback: Optional[Callable[..., Any]] = None) -> "LocalSegment":
        """``SCIAttachLocalSegment``: a handle on segment ``segment_id`` of
        this node that its creator shared (:meth:`LocalSegment.share`);
        ``close()`` detaches."""
        return LocalSegment._attach(self, segment_id, flags, callback)

    def connect_segment(self, node_id: int, segment_id: int, timeout: Timeout = None, *,
                        flags: int = 0, adapter: int = 0,
                        callback: Optional[Callable[..., Any]] = None) -> "RemoteSegment":
        """``SCIConnectSegment``: connect to segment ``segment_id`` of node
        ``node_id`` (this node's too), waiting up to ``timeout`` seconds
        (None: forever, 0: one try) for it to exist and be available.
        ``callback(segment, reason, status)`` gets its events on a library
        thread (``SCI_FLAG_USE_CALLBACK``).  Node
        ``DIS_BROADCAST_NODEID_GROUP_ALL`` or ``SCI_FLAG_BROADCAST`` connects to
        a reflective-memory group (see :meth:`connect_group`)."""
        return RemoteSegment._connect(self, node_id, segment_id, timeout, flags, adapter, callback)

    def connect_group(self, segment_id: int, timeout: Timeout = None, *, flags: int = 0,
                      adapter: int = 0) -> "RemoteSegment":
        """Reflective memory: connect to every member of group
        ``segment_id`` (segments created with ``broadcast=True`` on any node
        of the cluster).  Stores through a map of the result, and DMA
        transfers to it, reach every member."""
        return RemoteSegment._connect(self, C.DIS_BROADCAST_NODEID_GROUP_ALL, segment_id, timeout,
                                      flags | C.SCI_FLAG_BROADCAST, adapter, None)

    # -- interrupts ---------------------------------------------------------

    def create_interrupt(self, number: Optional[int] = None, *, fixed: bool = False,
                         flags: int = 0, adapter: int = 0,
                         callback: Optional[Callable[..., Any]] = None) -> "LocalInterrupt":
        """``SCICreateInterrupt``: ``number`` is a hint (None: any) unless
        ``fixed`` (``SCI_FLAG_FIXED_INTNO``); the number given is
        ``.number``.  ``callback(interrupt, status)`` runs on a library thread
        for each trigger (``SCI_FLAG_USE_CALLBACK``) until it returns
        :data:`CANCEL`."""
        if fixed:
            flags |= C.SCI_FLAG_FIXED_INTNO
        return LocalInterrupt._create(self, number or 0, flags, adapter, callback)

    def connect_interrupt(self, node_id: int, number: int, timeout: Timeout = None, *,
                          flags: int = 0, adapter: int = 0) -> "RemoteInterrupt":
        """``SCIConnectInterrupt``: interrupt ``number`` of node ``node_id``,
        waiting up to ``timeout`` seconds for it to exist.  Node
        ``DIS_BROADCAST_NODEID_GROUP_ALL`` or ``SCI_FLAG_BROADCAST``: that
        number on every node that has one."""
        return RemoteInterrupt._connect(self, node_id, number, timeout, flags, adapter)

    def create_data_interrupt(self, number: Optional[int] = None, *, fixed: bool = False,
                              flags: int = 0, adapter: int = 0,
                              callback: Optional[Callable[..., Any]] = None) -> "LocalDataInterrupt":
        """``SCICreateDataInterrupt``: as :meth:`create_interrupt`; triggers
        carry up to 1024 bytes.  ``callback(interrupt, data, status)``."""
        if fixed:
            flags |= C.SCI_FLAG_FIXED_INTNO
        return LocalDataInterrupt._create(self, number or 0, flags, adapter, callback)

    def connect_data_interrupt(self, node_id: int, number: int, timeout: Timeout = None, *,
                               flags: int = 0, adapter: int = 0) -> "RemoteDataInterrupt":
        """``SCIConnectDataInterrupt``: as :meth:`connect_interrupt`."""
        return RemoteDataInterrupt._connect(self, node_id, number, timeout, flags, adapter)

    # -- DMA ----------------------------------------------------------------

    def create_dma_queue(self, max_entries: int = 1, *, flags: int = 0, adapter: int = 0) -> "DMAQueue":
        """``SCICreateDMAQueue``."""
        return DMAQueue(self, max_entries, flags=flags, adapter=adapter)

    def request_dma_channel(self, channel_id: Optional[int] = None, *,
                            type: int = C.SCI_DMA_TYPE_DONTCARE, shared: bool = False,
                            flags: int = 0, adapter: int = 0) -> "DMAChannel":
        """``SCIRequestDMAChannel``: channel ``channel_id`` (None: any free one)."""
        if shared:
            flags |= C.SCI_FLAG_DMA_CHANNEL_SHARED
        cid = C.SCI_DMA_CHANNEL_ID_DONTCARE if channel_id is None else channel_id
        return DMAChannel(self, cid, type, flags, adapter)

    def _describe(self) -> str:
        return ""
