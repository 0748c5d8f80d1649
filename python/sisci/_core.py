"""The SISCI objects: descriptors, segments, maps, sequences, interrupts,
data interrupts, DMA queues and channels.

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

import concurrent.futures
import enum
import math
import os
import sys
import threading
import time
import traceback
import weakref
from typing import (Any, Awaitable, Callable, Dict, Iterable, Iterator, List, NamedTuple,
                    Optional, Sequence as SequenceT, Tuple, Union)

from . import constants as C
from ._lib import error_string, ffi, lib
from .errors import SisciError, make_error

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

Buffer = Any  # an object with the buffer protocol (bytes, bytearray, memoryview, numpy array, ...)
Timeout = Optional[float]

#: Longest single wait inside the library, in seconds.  Between slices the
#: interpreter runs signal handlers (Ctrl-C) and other threads' Python code.
WAIT_SLICE = 0.1

_SLICE_MS = int(WAIT_SLICE * 1000)
_OK = C.SCI_ERR_OK
_TIMEOUT = C.SCI_ERR_TIMEOUT
_INFINITE = C.SCI_INFINITE_TIMEOUT
_NULL = ffi.NULL


class CallbackReason(enum.IntEnum):
    """``sci_segment_cb_reason_t``: what a segment event reports."""

    CONNECT = C.SCI_CB_CONNECT
    DISCONNECT = C.SCI_CB_DISCONNECT
    NOT_OPERATIONAL = C.SCI_CB_NOT_OPERATIONAL
    OPERATIONAL = C.SCI_CB_OPERATIONAL
    LOST = C.SCI_CB_LOST


class DMAQueueState(enum.IntEnum):
    """``sci_dma_queue_state_t``."""

    IDLE = C.SCI_DMAQUEUE_IDLE
    GATHER = C.SCI_DMAQUEUE_GATHER
    POSTED = C.SCI_DMAQUEUE_POSTED
    DONE = C.SCI_DMAQUEUE_DONE
    ABORTED = C.SCI_DMAQUEUE_ABORTED
    ERROR = C.SCI_DMAQUEUE_ERROR


class SequenceStatus(enum.IntEnum):
    """``sci_sequence_status_t``."""

    OK = C.SCI_SEQ_OK
    RETRIABLE = C.SCI_SEQ_RETRIABLE
    NOT_RETRIABLE = C.SCI_SEQ_NOT_RETRIABLE
    PENDING = C.SCI_SEQ_PENDING


try:
    _trigger = lib.SCITriggerInterrupt
    _wait_interrupt = lib.SCIWaitForInterrupt
except Exception:  # the library is missing: calls raise SisciLibraryError
    def _trigger(*a: Any) -> None:
        lib.SCITriggerInterrupt(*a)

    def _wait_interrupt(*a: Any) -> None:
        lib.SCIWaitForInterrupt(*a)


class _Cancel(enum.Enum):
    CANCEL = "CANCEL"


#: Return this (or ``False``) from an interrupt or segment callback to stop
#: further calls (``SCI_CALLBACK_CANCEL``); anything else continues.
CANCEL = _Cancel.CANCEL


class SegmentEvent(NamedTuple):
    """A local segment's event: who connected or disconnected."""

    reason: CallbackReason
    node_id: int
    adapter: int


class RemoteSegmentEvent(NamedTuple):
    """A remote segment's event and the status that came with it."""

    reason: CallbackReason
    status: int


# ---------------------------------------------------------------------------
# Helpers

_tls = threading.local()


def _err() -> Any:
    """This thread's ``sci_error_t`` out-parameter (reset to OK)."""
    try:
        e = _tls.err
    except AttributeError:
        e = _tls.err = ffi.new("sci_error_t *")
    e[0] = _OK
    return e


def _check(err: Any, function: str, status: Optional[int] = None) -> None:
    code = err[0]
    if code != _OK:
        raise make_error(code, function, status)


def _ms(timeout: Timeout) -> int:
    """Seconds (None = forever) as SISCI milliseconds."""
    if timeout is None:
        return _INFINITE
    if timeout < 0:
        raise ValueError("timeout must be None or >= 0 seconds")
    ms = int(math.ceil(timeout * 1000))
    return min(ms, _INFINITE - 1)


def _sliced(call: Callable[[int], int], timeout: Timeout, retry: Tuple[int, ...] = (_TIMEOUT,)) -> int:
    """Run ``call(ms)`` (returning an error code) in slices of at most
    WAIT_SLICE until it returns a code not in ``retry`` or ``timeout``
    seconds have passed; returns the last code."""
    slice_ms = max(1, int(WAIT_SLICE * 1000))
    if timeout is None:
        while True:
            code = call(slice_ms)
            if code not in retry:
                return code
    if timeout < 0:
        raise ValueError("timeout must be None or >= 0 seconds")
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        ms = 0 if left <= 0 else min(slice_ms, int(math.ceil(left * 1000)))
        code = call(ms)
        if code not in retry or time.monotonic() >= deadline:
            return code


_retired: List[Any] = []
_retired_lock = threading.Lock()


def _retire(*callbacks: Any) -> None:
    """Keep cffi callbacks alive for the life of the process: the library
    may still be inside one on its own thread while the object is released."""
    cbs = [c for c in callbacks if c is not None]
    if cbs:
        with _retired_lock:
            _retired.extend(cbs)


def _report_callback_exception(what: str) -> None:
    sys.stderr.write(f"sisci: exception in {what} callback (ignored):\n")
    traceback.print_exc()


def _action(result: Any) -> int:
    if result is False or result is CANCEL or (type(result) is int and result == C.SCI_CALLBACK_CANCEL):
        return C.SCI_CALLBACK_CANCEL
    return C.SCI_CALLBACK_CONTINUE


def _closed(function: str) -> SisciError:
    return make_error(C.SCI_ERR_ILLEGAL_PARAMETER, function)


# Every object that owns a handle, for the fork handler below.
_all_handles: "weakref.WeakSet[_Handle]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A forked child does not own its parent's handles (SISCI handles
    belong to the process that got them): its copies are marked closed and
    their finalizers detached, so neither its garbage collection nor its exit
    releases the parent's segments, maps or interrupts."""
    for h in list(_all_handles):
        f = h._finobj
        if f is not None:
            f.detach()
        h._open = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _Handle:
    """Base of every object that owns a SISCI handle."""

    _kind = "object"

    def __init__(self, parent: Optional["_Handle"]) -> None:
        _all_handles.add(self)
        self._parent = parent
        self._children: Dict[int, "weakref.ref[_Handle]"] = {}
        self._fin: Optional[weakref.finalize] = None
        self._keep: List[Any] = []  # cffi callbacks the library may call
        # Segments: the buffers of their maps, which may outlive the Map
        # objects (a numpy array over a map that was dropped).
        self._map_bufs: Dict[int, Tuple[Any, Any]] = {}
        if parent is not None:
            parent._children[id(self)] = weakref.ref(self)

    # -- life cycle ---------------------------------------------------------

    # Set with the finalizer that releases the handle (when the object is
    # collected); ``_open`` is the plain flag the hot paths check.
    _open = False
    _finobj: Optional[weakref.finalize] = None

    @property
    def _fin(self) -> Optional[weakref.finalize]:
        return self._finobj

    @_fin.setter
    def _fin(self, f: Optional[weakref.finalize]) -> None:
        self._finobj = f
        self._open = f is not None and f.alive

    @property
    def closed(self) -> bool:
        """True once released (by ``close()`` or the descriptor's close)."""
        return not self._open

    def _live_children(self) -> List["_Handle"]:
        out = []
        for r in list(self._children.values()):
            c = r()
            if c is not None and not c.closed:
                out.append(c)
        return out

    def _check_exports(self) -> None:
        for c in self._live_children():
            c._check_exports()
        for buf_ref, map_ref in list(self._map_bufs.values()):
            if buf_ref() is not None and map_ref() is None:
                raise BufferError(f"cannot release the {self._kind}: Python buffers (memoryview, "
                                  f"numpy array) over one of its maps still exist; release them first")

    def _close_children(self) -> None:
        for c in reversed(self._live_children()):
            c._close_for_parent()

    def _close_for_parent(self) -> None:
        self.close()

    def _release(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _forget(self) -> None:
        """Mark released without calling the library (the parent's release
        took it), keeping callbacks alive."""
        for c in self._live_children():
            c._forget()
        if self._fin is not None:
            self._fin.detach()
            self._open = False
        _retire(*self._keep)
        if self._parent is not None:
            self._parent._children.pop(id(self), None)

    def close(self) -> None:
        """Release the handle (and what was made through it). Idempotent."""
        if self.closed:
            return
        self._check_exports()
        self._close_children()
        self._release()
        if self._fin is not None:
            self._fin.detach()
            self._open = False
        _retire(*self._keep)
        if self._parent is not None:
            self._parent._children.pop(id(self), None)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _h_or_raise(self, function: str) -> Any:
        if self._open:
            return self._h  # type: ignore[attr-defined]
        raise _closed(function)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<sisci.{type(self).__name__} {self._describe()} {state}>"

    def _describe(self) -> str:
        return ""


def _finalizer(function_name: str, flags: int = 0) -> Callable[..., None]:
    """A release function for weakref.finalize: calls ``function(h, flags,
    &err)`` and ignores the result.  Extra arguments only keep objects alive
    until it has run."""
    def release(h: Any, *keepalive: Any) -> None:
        try:
            e = ffi.new("sci_error_t *")
            getattr(lib, function_name)(h, flags, e)
        except Exception:
            pass
        _retire(*[k for k in keepalive if isinstance(k, ffi.CData)])
    return release


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


# ---------------------------------------------------------------------------
# Segments

def _local_segment_cb(seg_ref: "weakref.ref[LocalSegment]", fn: Callable[..., Any]) -> Any:
    def cb(arg: Any, segment: Any, reason: int, node: int, adapter: int, status: int) -> int:
        try:
            return _action(fn(seg_ref(), CallbackReason(reason), node, adapter, status))
        except BaseException:
            _report_callback_exception("segment")
            return C.SCI_CALLBACK_CONTINUE
    return ffi.callback("sci_cb_local_segment_t", cb)


class LocalSegment(_Handle):
    """A segment of this node (``SCICreateSegment`` / ``SCIAttachLocalSegment``).

    ``close()`` unmaps its maps and removes it (``SCIRemoveSegment``; on an
    attached handle: detaches).
    """

    _kind = "local segment"

    @classmethod
    def _create(cls, sd: Descriptor, segment_id: int, size: int, flags: int,
                callback: Optional[Callable[..., Any]]) -> "LocalSegment":
        h = sd._h_or_raise("SCICreateSegment")
        self = cls.__new__(cls)
        _Handle.__init__(self, sd)
        cb = _NULL
        if callback is not None:
            cb = _local_segment_cb(weakref.ref(self), callback)
            flags |= C.SCI_FLAG_USE_CALLBACK
            self._keep.append(cb)
        p = ffi.new("sci_local_segment_t *")
        e = _err()
        lib.SCICreateSegment(h, p, segment_id, size, cb, _NULL, flags, e)
        if e[0] != _OK:
            sd._children.pop(id(self), None)
            _retire(*self._keep)
            _check(e, "SCICreateSegment")
        self._h = p[0]
        self.attached = False
        self._fin = weakref.finalize(self, _finalizer("SCIRemoveSegment", C.SCI_FLAG_FORCE_REMOVE),
                                     self._h, sd, *self._keep)
        return self

    @classmethod
    def _attach(cls, sd: Descriptor, segment_id: int, flags: int,
                callback: Optional[Callable[..., Any]]) -> "LocalSegment":
        h = sd._h_or_raise("SCIAttachLocalSegment")
        self = cls.__new__(cls)
        _Handle.__init__(self, sd)
        cb = _NULL
        if callback is not None:
            cb = _local_segment_cb(weakref.ref(self), callback)
            flags |= C.SCI_FLAG_USE_CALLBACK
            self._keep.append(cb)
        p = ffi.new("sci_local_segment_t *")
        size = ffi.new("size_t *")
        e = _err()
        lib.SCIAttachLocalSegment(h, p, segment_id, size, cb, _NULL, flags, e)
        if e[0] != _OK:
            sd._children.pop(id(self), None)
            _retire(*self._keep)
            _check(e, "SCIAttachLocalSegment")
        self._h = p[0]
        self.attached = True
        self._fin = weakref.finalize(self, _finalizer("SCIRemoveSegment"), self._h, sd, *self._keep)
        return self

    @property
    def id(self) -> int:
        """``SCIGetLocalSegmentId``."""
        return int(lib.SCIGetLocalSegmentId(self._h_or_raise("SCIGetLocalSegmentId")))

    @property
    def size(self) -> int:
        """``SCIGetLocalSegmentSize``."""
        return int(lib.SCIGetLocalSegmentSize(self._h_or_raise("SCIGetLocalSegmentSize")))

    def prepare(self, adapter: int = 0, flags: int = 0) -> None:
        """``SCIPrepareSegment``."""
        e = _err()
        lib.SCIPrepareSegment(self._h_or_raise("SCIPrepareSegment"), adapter, flags, e)
        _check(e, "SCIPrepareSegment")

    def set_available(self, adapter: int = 0, flags: int = 0) -> None:
        """``SCISetSegmentAvailable``: others may connect now."""
        e = _err()
        lib.SCISetSegmentAvailable(self._h_or_raise("SCISetSegmentAvailable"), adapter, flags, e)
        _check(e, "SCISetSegmentAvailable")

    def make_available(self, adapter: int = 0) -> None:
        """``prepare()`` then ``set_available()``."""
        self.prepare(adapter)
        self.set_available(adapter)

    def set_unavailable(self, adapter: int = 0, *, notify: bool = False,
                        force_disconnect: bool = False, flags: int = 0) -> None:
        """``SCISetSegmentUnavailable`` (``SCI_FLAG_NOTIFY``,
        ``SCI_FLAG_FORCE_DISCONNECT``)."""
        if notify:
            flags |= C.SCI_FLAG_NOTIFY
        if force_disconnect:
            flags |= C.SCI_FLAG_FORCE_DISCONNECT
        e = _err()
        lib.SCISetSegmentUnavailable(self._h_or_raise("SCISetSegmentUnavailable"), adapter, flags, e)
        _check(e, "SCISetSegmentUnavailable")

    def share(self) -> None:
        """``SCIShareSegment``: other programs of this node may attach."""
        e = _err()
        lib.SCIShareSegment(self._h_or_raise("SCIShareSegment"), 0, e)
        _check(e, "SCIShareSegment")

    def register_memory(self, buffer: Buffer) -> None:
        """``SCIRegisterSegmentMemory``: make a writable, page-aligned
        buffer of private anonymous memory (e.g. ``mmap.mmap(-1, n,
        flags=mmap.MAP_PRIVATE)``) the memory of a segment created with
        ``SCI_FLAG_EMPTY``.  The buffer is kept alive with the segment."""
        h = self._h_or_raise("SCIRegisterSegmentMemory")
        cbuf = ffi.from_buffer(buffer, require_writable=True)
        e = _err()
        lib.SCIRegisterSegmentMemory(cbuf, len(cbuf), h, 0, e)
        _check(e, "SCIRegisterSegmentMemory")
        self._keep_buffer = (buffer, cbuf)

    def map(self, offset: int = 0, size: Optional[int] = None, *, readonly: bool = False,
            flags: int = 0, address: Optional[int] = None) -> "Map":
        """``SCIMapLocalSegment``: ``size`` bytes (default: to the end) from
        ``offset``.  ``readonly`` maps ``SCI_FLAG_READONLY_MAP`` (its
        buffers are read-only too); ``address`` with ``SCI_FLAG_FIXED_MAP_ADDR``."""
        return Map._map(self, offset, size, readonly, flags, address)

    def wait_for_event(self, timeout: Timeout = None) -> SegmentEvent:
        """``SCIWaitForLocalSegmentEvent``: the next CONNECT/DISCONNECT;
        :class:`SisciTimeoutError` after ``timeout`` seconds."""
        h = self._h_or_raise("SCIWaitForLocalSegmentEvent")
        node = ffi.new("unsigned int *")
        adapter = ffi.new("unsigned int *")
        e = ffi.new("sci_error_t *")
        reason = [0]

        def call(ms: int) -> int:
            reason[0] = lib.SCIWaitForLocalSegmentEvent(h, node, adapter, ms, 0, e)
            return int(e[0])

        _check_code(_sliced(call, timeout), "SCIWaitForLocalSegmentEvent")
        return SegmentEvent(CallbackReason(reason[0]), int(node[0]), int(adapter[0]))

    def query_ioaddr(self) -> int:
        """``SCIQuery(SCI_Q_LOCAL_SEGMENT, SCI_Q_LOCAL_SEGMENT_IOADDR)`` (a
        bus address: vsci answers ``SCI_ERR_ILLEGAL_QUERY``)."""
        q = ffi.new("sci_query_local_segment_t *")
        q.segment = self._h_or_raise("SCIQuery")
        q.subcommand = C.SCI_Q_LOCAL_SEGMENT_IOADDR
        e = _err()
        lib.SCIQuery(C.SCI_Q_LOCAL_SEGMENT, q, 0, e)
        _check(e, "SCIQuery")
        return int(q.data.ioaddr64)

    def close(self, force: bool = False) -> None:
        """Unmap this handle's maps and ``SCIRemoveSegment`` (detach, for an
        attached handle).  ``force`` adds ``SCI_FLAG_FORCE_REMOVE``."""
        self._force = force
        super().close()

    def _release(self) -> None:
        e = _err()
        flags = C.SCI_FLAG_FORCE_REMOVE if getattr(self, "_force", False) else 0
        lib.SCIRemoveSegment(self._h, flags, e)
        _check(e, "SCIRemoveSegment")

    def _describe(self) -> str:
        if self.closed:
            return ""
        return f"id={self.id:#x} size={self.size}"


def _check_code(code: int, function: str, status: Optional[int] = None) -> None:
    if code != _OK:
        raise make_error(code, function, status)


def _remote_segment_cb(seg_ref: "weakref.ref[RemoteSegment]", fn: Callable[..., Any]) -> Any:
    def cb(arg: Any, segment: Any, reason: int, status: int) -> int:
        try:
            return _action(fn(seg_ref(), CallbackReason(reason), status))
        except BaseException:
            _report_callback_exception("segment")
            return C.SCI_CALLBACK_CONTINUE
    return ffi.callback("sci_cb_remote_segment_t", cb)


class RemoteSegment(_Handle):
    """A connection to a segment (``SCIConnectSegment``), of this node or
    another, or to a reflective-memory group.  ``close()`` unmaps its maps and
    disconnects (``SCIDisconnectSegment``)."""

    _kind = "remote segment"

    @classmethod
    def _connect(cls, sd: Descriptor, node_id: int, segment_id: int, timeout: Timeout,
                 flags: int, adapter: int, callback: Optional[Callable[..., Any]]) -> "RemoteSegment":
        h = sd._h_or_raise("SCIConnectSegment")
        self = cls.__new__(cls)
        _Handle.__init__(self, sd)
        cb = _NULL
        if callback is not None:
            cb = _remote_segment_cb(weakref.ref(self), callback)
            flags |= C.SCI_FLAG_USE_CALLBACK
            self._keep.append(cb)
        p = ffi.new("sci_remote_segment_t *")
        e = ffi.new("sci_error_t *")

        def call(ms: int) -> int:
            lib.SCIConnectSegment(h, p, node_id, segment_id, adapter, cb, _NULL, ms, flags, e)
            return int(e[0])

        code = _sliced(call, timeout, (_TIMEOUT, C.SCI_ERR_NO_SUCH_SEGMENT, C.SCI_ERR_CONNECTION_REFUSED))
        if code != _OK:
            sd._children.pop(id(self), None)
            _retire(*self._keep)
            _check_code(code, "SCIConnectSegment")
        self._h = p[0]
        self._fin = weakref.finalize(self, _finalizer("SCIDisconnectSegment"), self._h, sd, *self._keep)
        return self

    @property
    def id(self) -> int:
        """``SCIGetRemoteSegmentId``."""
        return int(lib.SCIGetRemoteSegmentId(self._h_or_raise("SCIGetRemoteSegmentId")))

    @property
    def node_id(self) -> int:
        """``SCIGetRemoteSegmentNodeId`` (``DIS_BROADCAST_NODEID_GROUP_ALL`` for a group)."""
        return int(lib.SCIGetRemoteSegmentNodeId(self._h_or_raise("SCIGetRemoteSegmentNodeId")))

    @property
    def size(self) -> int:
        """``SCIGetRemoteSegmentSize``."""
        return int(lib.SCIGetRemoteSegmentSize(self._h_or_raise("SCIGetRemoteSegmentSize")))

    def map(self, offset: int = 0, size: Optional[int] = None, *, readonly: bool = False,
            flags: int = 0, address: Optional[int] = None, no_loopback: bool = False) -> "Map":
        """``SCIMapRemoteSegment``.  ``no_loopback`` (group connections):
        ``SCI_FLAG_NO_MEMORY_LOOPBACK_MAP``, this node's own member is left out."""
        if no_loopback:
            flags |= C.SCI_FLAG_NO_MEMORY_LOOPBACK_MAP
        return Map._map(self, offset, size, readonly, flags, address)

    def wait_for_event(self, timeout: Timeout = None) -> RemoteSegmentEvent:
        """``SCIWaitForRemoteSegmentEvent``: LOST or DISCONNECT, with its status."""
        h = self._h_or_raise("SCIWaitForRemoteSegmentEvent")
        status = ffi.new("sci_error_t *")
        e = ffi.new("sci_error_t *")
        reason = [0]

        def call(ms: int) -> int:
            reason[0] = lib.SCIWaitForRemoteSegmentEvent(h, status, ms, 0, e)
            return int(e[0])

        _check_code(_sliced(call, timeout), "SCIWaitForRemoteSegmentEvent")
        return RemoteSegmentEvent(CallbackReason(reason[0]), int(status[0]))

    def query_ioaddr(self) -> int:
        """``SCIQuery(SCI_Q_REMOTE_SEGMENT, SCI_Q_REMOTE_SEGMENT_IOADDR)``
        (vsci answers ``SCI_ERR_ILLEGAL_QUERY``)."""
        q = ffi.new("sci_query_remote_segment_t *")
        q.segment = self._h_or_raise("SCIQuery")
        q.subcommand = C.SCI_Q_REMOTE_SEGMENT_IOADDR
        e = _err()
        lib.SCIQuery(C.SCI_Q_REMOTE_SEGMENT, q, 0, e)
        _check(e, "SCIQuery")
        return int(q.data.ioaddr64)

    def _release(self) -> None:
        e = _err()
        lib.SCIDisconnectSegment(self._h, 0, e)
        _check(e, "SCIDisconnectSegment")

    def _describe(self) -> str:
        if self.closed:
            return ""
        return f"node={self.node_id} id={self.id:#x} size={self.size}"


# ---------------------------------------------------------------------------
# Maps

def _unmap_finalizer(h: Any, *keepalive: Any) -> None:
    try:
        lib.SCIUnmapSegment(h, 0, ffi.new("sci_error_t *"))
    except Exception:
        pass


class Map(_Handle):
    """A mapped range of a segment.  Its memory is plain memory shared with
    every other map of the segment, in every process (and, for another
    node's segment, delivered there by the library).

    Buffers over it: :meth:`memoryview` (``memoryview``), :meth:`array`
    (``numpy.frombuffer``, no copy), or ``memoryview(map)`` on Python 3.12+.
    They stay valid while they exist: :meth:`close` (``SCIUnmapSegment``)
    raises ``BufferError`` while any is alive, as ``mmap.close()`` does;
    a map dropped without ``close()`` is unmapped when its last buffer goes.
    """

    _kind = "map"

    @classmethod
    def _map(cls, seg: Union[LocalSegment, RemoteSegment], offset: int, size: Optional[int],
             readonly: bool, flags: int, address: Optional[int]) -> "Map":
        remote = isinstance(seg, RemoteSegment)
        fn = "SCIMapRemoteSegment" if remote else "SCIMapLocalSegment"
        h = seg._h_or_raise(fn)
        if size is None:
            size = max(0, seg.size - offset)
        if readonly:
            flags |= C.SCI_FLAG_READONLY_MAP
        addr = _NULL
        if address is not None:
            flags |= C.SCI_FLAG_FIXED_MAP_ADDR
            addr = ffi.cast("void *", address)
        mp = ffi.new("sci_map_t *")
        e = _err()
        if remote:
            ptr = lib.SCIMapRemoteSegment(h, mp, offset, size, addr, flags, e)
        else:
            ptr = lib.SCIMapLocalSegment(h, mp, offset, size, addr, flags, e)
        _check(e, fn)
        self = cls.__new__(cls)
        _Handle.__init__(self, seg)
        self._h = mp[0]
        self.segment = seg
        self.offset = offset
        self.size = size
        self.readonly = bool(flags & C.SCI_FLAG_READONLY_MAP)
        self.address = int(ffi.cast("uintptr_t", ptr))
        self._buf = ffi.buffer(ffi.cast("char *", ptr), size)
        self._base_refs = sys.getrefcount(self._buf)
        # Unmapped when the cffi buffer goes: after this object and after
        # every Python buffer made from it.
        self._fin = weakref.finalize(self._buf, _unmap_finalizer, self._h, seg)
        key = id(self._buf)
        bufs = seg._map_bufs
        bufs[key] = (weakref.ref(self._buf, lambda r: bufs.pop(key, None)), weakref.ref(self))
        return self

    def _unregister(self) -> None:
        self.segment._map_bufs.pop(id(self._buf), None)

    def _forget(self) -> None:
        self._unregister()
        super()._forget()

    # -- buffers ------------------------------------------------------------

    def exports(self) -> int:
        """How many Python buffers (memoryviews, numpy arrays) over this map
        are alive (CPython's reference count of the map's buffer)."""
        if self.closed:
            return 0
        return max(0, sys.getrefcount(self._buf) - self._base_refs)

    def memoryview(self, offset: int = 0, size: Optional[int] = None) -> memoryview:
        """A ``memoryview`` of ``size`` bytes (default: to the end) at
        ``offset`` into the map; read-only for a read-only map.  No copy:
        stores through it are stores into the segment."""
        if self.closed:
            raise _closed("SCIGetMapPointer")
        mv = memoryview(self._buf)
        if self.readonly:
            mv = mv.toreadonly()
        end = self.size if size is None else offset + size
        if offset < 0 or end > self.size or end < offset:
            raise ValueError(f"range {offset}..{end} is outside the map's {self.size} bytes")
        return mv[offset:end] if (offset, end) != (0, self.size) else mv

    def array(self, dtype: Any = "uint8", shape: Any = None, offset: int = 0,
              count: int = -1) -> Any:
        """``numpy.frombuffer`` over the map: ``count`` items of ``dtype``
        (default: as many as fit) from ``offset``, reshaped to ``shape`` if
        given.  No copy; read-only for a read-only map."""
        import numpy as np  # optional dependency
        if self.closed:
            raise _closed("SCIGetMapPointer")
        src = memoryview(self._buf).toreadonly() if self.readonly else self._buf
        dt = np.dtype(dtype)
        if count < 0 and shape is not None:
            count = int(np.prod(shape))
        a = np.frombuffer(src, dtype=dt, count=count, offset=offset)
        return a.reshape(shape) if shape is not None else a

    def __buffer__(self, flags: int) -> memoryview:  # Python 3.12+: memoryview(map)
        return self.memoryview()

    def __len__(self) -> int:
        return self.size

    @property
    def pointer(self) -> int:
        """``SCIGetMapPointer``: the address the map starts at."""
        return int(ffi.cast("uintptr_t", lib.SCIGetMapPointer(self._h_or_raise("SCIGetMapPointer"))))

    # -- copies and ordering ------------------------------------------------

    def write(self, offset: int, data: Buffer, *, sequence: Optional["Sequence"] = None,
              error_check: bool = False, flags: int = 0) -> None:
        """``SCIMemCpy`` of ``data`` into the map at ``offset``
        (``error_check``: ``SCI_FLAG_ERROR_CHECK``)."""
        h = self._h_or_raise("SCIMemCpy")
        src = ffi.from_buffer(data)
        if error_check:
            flags |= C.SCI_FLAG_ERROR_CHECK
        e = _err()
        lib.SCIMemCpy(sequence._h if sequence is not None else _NULL, src, h, offset, len(src), flags, e)
        _check(e, "SCIMemCpy")

    def readinto(self, offset: int, buffer: Buffer, *, sequence: Optional["Sequence"] = None,
                 error_check: bool = False, flags: int = 0) -> int:
        """``SCIMemCpy`` with ``SCI_FLAG_BLOCK_READ``: fill ``buffer`` from
        the map at ``offset`` (fresh bytes from another node's segment);
        returns the bytes read."""
        h = self._h_or_raise("SCIMemCpy")
        dst = ffi.from_buffer(buffer, require_writable=True)
        flags |= C.SCI_FLAG_BLOCK_READ
        if error_check:
            flags |= C.SCI_FLAG_ERROR_CHECK
        e = _err()
        lib.SCIMemCpy(sequence._h if sequence is not None else _NULL, dst, h, offset, len(dst), flags, e)
        _check(e, "SCIMemCpy")
        return len(dst)

    def read(self, offset: int, size: int, **kw: Any) -> bytes:
        """``SCIMemCpy`` with ``SCI_FLAG_BLOCK_READ``: ``size`` bytes at ``offset``."""
        b = bytearray(size)
        self.readinto(offset, b, **kw)
        return bytes(b)

    def mem_write(self, offset: int, data: Buffer, *, error_check: bool = False) -> None:
        """``SCIMemWrite`` of ``data`` to the map's address + ``offset``."""
        if self.closed:
            raise _closed("SCIMemWrite")
        src = ffi.from_buffer(data)
        e = _err()
        lib.SCIMemWrite(src, ffi.cast("void *", self.address + offset), len(src),
                        C.SCI_FLAG_ERROR_CHECK if error_check else 0, e)
        _check(e, "SCIMemWrite")

    def cache_sync(self, offset: int = 0, size: Optional[int] = None, *, flush: bool = True,
                   invalidate: bool = False) -> None:
        """``SCICacheSync`` over ``size`` bytes at ``offset`` of the map."""
        h = self._h_or_raise("SCICacheSync")
        size = self.size - offset if size is None else size
        flags = (C.SCI_FLAG_CACHE_FLUSH if flush else 0) | (C.SCI_FLAG_CACHE_INVALIDATE if invalidate else 0)
        e = _err()
        lib.SCICacheSync(h, ffi.cast("void *", self.address + offset), size, flags, e)
        _check(e, "SCICacheSync")

    def flush(self) -> None:
        """``SCIFlush``: this process's earlier stores are visible."""
        lib.SCIFlush(_NULL, 0)

    def create_sequence(self, flags: int = 0) -> "Sequence":
        """``SCICreateMapSequence``."""
        return Sequence(self, flags)

    def mapped_to_local_target(self) -> bool:
        """``SCIQuery(SCI_Q_MAP, SCI_Q_MAP_MAPPED_TO_LOCAL_TARGET)``: is the
        memory behind the map this node's?"""
        q = ffi.new("sci_query_map_t *")
        q.map = self._h_or_raise("SCIQuery")
        q.subcommand = C.SCI_Q_MAP_MAPPED_TO_LOCAL_TARGET
        e = _err()
        lib.SCIQuery(C.SCI_Q_MAP, q, 0, e)
        _check(e, "SCIQuery")
        return bool(q.data)

    # -- life cycle ---------------------------------------------------------

    def _check_exports(self) -> None:
        n = self.exports()
        if n:
            raise BufferError(f"cannot unmap: {n} Python buffer(s) over the map (memoryview, "
                              f"numpy array) still exist; release them first")
        super()._check_exports()

    def _release(self) -> None:
        e = _err()
        lib.SCIUnmapSegment(self._h, 0, e)
        _check(e, "SCIUnmapSegment")
        self._unregister()

    def close(self) -> None:
        """``SCIUnmapSegment`` (after removing its sequences); every earlier
        store is visible first.  ``BufferError`` while Python buffers over the
        map exist."""
        super().close()

    unmap = close

    def _describe(self) -> str:
        return f"offset={self.offset} size={self.size} at {self.address:#x}"


class Sequence(_Handle):
    """An error-check sequence over a map (``SCICreateMapSequence``)."""

    _kind = "sequence"

    def __init__(self, map: Map, flags: int = 0) -> None:
        h = map._h_or_raise("SCICreateMapSequence")
        p = ffi.new("sci_sequence_t *")
        e = _err()
        lib.SCICreateMapSequence(h, p, flags, e)
        _check(e, "SCICreateMapSequence")
        super().__init__(map)
        self.map = map
        self._h = p[0]
        self._fin = weakref.finalize(self, _finalizer("SCIRemoveSequence"), self._h, map)

    def _status(self, fn: Any, name: str, flags: int) -> SequenceStatus:
        h = self._h_or_raise(name)
        e = _err()
        s = fn(h, flags, e)
        _check(e, name, int(s))
        return SequenceStatus(s)

    def start(self, flags: int = 0) -> SequenceStatus:
        """``SCIStartSequence``."""
        return self._status(lib.SCIStartSequence, "SCIStartSequence", flags)

    def check(self, flags: int = 0) -> SequenceStatus:
        """``SCICheckSequence``: ``OK`` while the segment is alive (and
        every earlier store delivered); raises ``SCI_ERR_TRANSFER_FAILED``
        (``status`` ``NOT_RETRIABLE``) once it is lost."""
        return self._status(lib.SCICheckSequence, "SCICheckSequence", flags)

    def flush(self, flags: int = 0) -> None:
        """``SCIFlush`` with this sequence."""
        lib.SCIFlush(self._h_or_raise("SCIFlush"), flags)

    def store_barrier(self, flags: int = 0) -> None:
        """``SCIStoreBarrier`` with this sequence."""
        lib.SCIStoreBarrier(self._h_or_raise("SCIStoreBarrier"), flags)

    def _release(self) -> None:
        e = _err()
        lib.SCIRemoveSequence(self._h, 0, e)
        _check(e, "SCIRemoveSequence")


# ---------------------------------------------------------------------------
# Interrupts

def _interrupt_cb(ref: "weakref.ref[LocalInterrupt]", fn: Callable[..., Any]) -> Any:
    def cb(arg: Any, intr: Any, status: int) -> int:
        try:
            return _action(fn(ref(), status))
        except BaseException:
            _report_callback_exception("interrupt")
            return C.SCI_CALLBACK_CONTINUE
    return ffi.callback("sci_cb_interrupt_t", cb)


def _data_interrupt_cb(ref: "weakref.ref[LocalDataInterrupt]", fn: Callable[..., Any]) -> Any:
    def cb(arg: Any, intr: Any, data: Any, length: int, status: int) -> int:
        try:
            payload = ffi.buffer(data, length)[:] if data != _NULL else b""
            return _action(fn(ref(), payload, status))
        except BaseException:
            _report_callback_exception("data interrupt")
            return C.SCI_CALLBACK_CONTINUE
    return ffi.callback("sci_cb_data_interrupt_t", cb)


class LocalInterrupt(_Handle):
    """An interrupt of this node (``SCICreateInterrupt``); others trigger it."""

    _kind = "interrupt"
    _create_fn = "SCICreateInterrupt"
    _remove_fn = "SCIRemoveInterrupt"
    _ctype = "sci_local_interrupt_t *"

    @classmethod
    def _create(cls, sd: Descriptor, number: int, flags: int, adapter: int,
                callback: Optional[Callable[..., Any]]) -> Any:
        h = sd._h_or_raise(cls._create_fn)
        self = cls.__new__(cls)
        _Handle.__init__(self, sd)
        cb = _NULL
        if callback is not None:
            make = _data_interrupt_cb if cls is LocalDataInterrupt else _interrupt_cb
            cb = make(weakref.ref(self), callback)  # type: ignore[arg-type]
            flags |= C.SCI_FLAG_USE_CALLBACK
            self._keep.append(cb)
        p = ffi.new(cls._ctype)
        no = ffi.new("unsigned int *", number)
        e = _err()
        getattr(lib, cls._create_fn)(h, p, adapter, no, cb, _NULL, flags, e)
        if e[0] != _OK:
            sd._children.pop(id(self), None)
            _retire(*self._keep)
            _check(e, cls._create_fn)
        self._h = p[0]
        self.number = int(no[0])
        self.has_callback = callback is not None
        self._fin = weakref.finalize(self, _finalizer(cls._remove_fn), self._h, sd, *self._keep)
        return self

    def wait(self, timeout: Timeout = None) -> None:
        """``SCIWaitForInterrupt``: consume one trigger, waiting up to
        ``timeout`` seconds (None: forever, 0: check once); raises
        :class:`SisciTimeoutError` (also a ``TimeoutError``) when none came."""
        if not self._open:
            raise _closed("SCIWaitForInterrupt")
        h = self._h
        try:
            e = _tls.err
        except AttributeError:
            e = _err()
        e[0] = _OK
        wait = _wait_interrupt
        # One slice first: a trigger that is already there, or comes within
        # it, costs one call.
        wait(h, _SLICE_MS if timeout is None or timeout > WAIT_SLICE else _ms(timeout), 0, e)
        code = e[0]
        if code == _OK:
            return
        if code != _TIMEOUT or (timeout is not None and timeout <= WAIT_SLICE):
            _check(e, "SCIWaitForInterrupt")
        e = ffi.new("sci_error_t *")
        if timeout is not None:
            timeout = max(0.0, timeout - WAIT_SLICE)

        def call(ms: int) -> int:
            wait(h, ms, 0, e)
            return int(e[0])

        _check_code(_sliced(call, timeout), "SCIWaitForInterrupt")

    def _release(self) -> None:
        e = _err()
        getattr(lib, self._remove_fn)(self._h, 0, e)
        _check(e, self._remove_fn)

    def _describe(self) -> str:
        return f"number={getattr(self, 'number', '?')}"


class LocalDataInterrupt(LocalInterrupt):
    """A data interrupt of this node (``SCICreateDataInterrupt``): each
    trigger carries up to ``SCI_MAX_DATA_INTERRUPT_SIZE`` (1024) bytes."""

    _kind = "data interrupt"
    _create_fn = "SCICreateDataInterrupt"
    _remove_fn = "SCIRemoveDataInterrupt"
    _ctype = "sci_local_data_interrupt_t *"

    def wait(self, timeout: Timeout = None, max_size: int = C.SCI_MAX_DATA_INTERRUPT_SIZE) -> bytes:  # type: ignore[override]
        """``SCIWaitForDataInterrupt``: the next message's bytes.  A message
        longer than ``max_size`` raises ``SCI_ERR_OUT_OF_RANGE`` with
        ``status`` = its size, and stays queued."""
        h = self._h_or_raise("SCIWaitForDataInterrupt")
        buf = ffi.new("char[]", max(1, max_size))
        n = ffi.new("unsigned int *")
        e = ffi.new("sci_error_t *")

        def call(ms: int) -> int:
            n[0] = max_size
            lib.SCIWaitForDataInterrupt(h, buf, n, ms, 0, e)
            return int(e[0])

        code = _sliced(call, timeout)
        _check_code(code, "SCIWaitForDataInterrupt", int(n[0]) if code == C.SCI_ERR_OUT_OF_RANGE else None)
        return ffi.buffer(buf, n[0])[:]


class RemoteInterrupt(_Handle):
    """A connection to an interrupt (``SCIConnectInterrupt``); ``trigger()``
    wakes its owner."""

    _kind = "remote interrupt"
    _connect_fn = "SCIConnectInterrupt"
    _disconnect_fn = "SCIDisconnectInterrupt"
    _ctype = "sci_remote_interrupt_t *"

    @classmethod
    def _connect(cls, sd: Descriptor, node_id: int, number: int, timeout: Timeout,
                 flags: int, adapter: int) -> Any:
        h = sd._h_or_raise(cls._connect_fn)
        p = ffi.new(cls._ctype)
        e = ffi.new("sci_error_t *")
        fn = getattr(lib, cls._connect_fn)

        def call(ms: int) -> int:
            fn(h, p, node_id, adapter, number, ms, flags, e)
            return int(e[0])

        _check_code(_sliced(call, timeout, (_TIMEOUT, C.SCI_ERR_CONNECTION_REFUSED)), cls._connect_fn)
        self = cls.__new__(cls)
        _Handle.__init__(self, sd)
        self._h = p[0]
        self.node_id = node_id
        self.number = number
        self._fin = weakref.finalize(self, _finalizer(cls._disconnect_fn), self._h, sd)
        return self

    def trigger(self) -> None:
        """``SCITriggerInterrupt``: one trigger, one wake-up of the owner."""
        if not self._open:
            raise _closed("SCITriggerInterrupt")
        try:
            e = _tls.err
        except AttributeError:
            e = _err()
        e[0] = _OK
        _trigger(self._h, 0, e)
        if e[0] != _OK:
            _check(e, "SCITriggerInterrupt")

    def _release(self) -> None:
        e = _err()
        getattr(lib, self._disconnect_fn)(self._h, 0, e)
        _check(e, self._disconnect_fn)

    def _describe(self) -> str:
        return f"node={getattr(self, 'node_id', '?')} number={getattr(self, 'number', '?')}"


class RemoteDataInterrupt(RemoteInterrupt):
    """A connection to a data interrupt (``SCIConnectDataInterrupt``)."""

    _kind = "remote data interrupt"
    _connect_fn = "SCIConnectDataInterrupt"
    _disconnect_fn = "SCIDisconnectDataInterrupt"
    _ctype = "sci_remote_data_interrupt_t *"

    def trigger(self, data: Buffer = b"") -> None:  # type: ignore[override]
        """``SCITriggerDataInterrupt`` with ``data`` (0..1024 bytes)."""
        h = self._h_or_raise("SCITriggerDataInterrupt")
        src = ffi.from_buffer(data)
        e = _err()
        lib.SCITriggerDataInterrupt(h, src, len(src), 0, e)
        _check(e, "SCITriggerDataInterrupt")


# ---------------------------------------------------------------------------
# DMA

class DMATransfer(concurrent.futures.Future):  # type: ignore[type-arg]
    """The completion of one DMA transfer (or posted list): a
    ``concurrent.futures.Future`` whose result is the queue's final state
    (``DMAQueueState.DONE``), or whose exception is the :class:`SisciError`
    the transfer ended with (``SCI_ERR_CANCELLED`` after an abort,
    ``SCI_ERR_TRANSFER_FAILED``, ...).  ``await asyncio.wrap_future(t)`` or
    :meth:`DMAQueue.transfer_async` in asyncio code."""

    queue: "DMAQueue"

    def wait(self, timeout: Timeout = None) -> DMAQueueState:
        """The result, waiting up to ``timeout`` seconds (Ctrl-C interrupts);
        :class:`SisciTimeoutError` if it has not ended by then."""
        try:
            return self.result(timeout)  # type: ignore[no-any-return]
        except concurrent.futures.TimeoutError:
            raise make_error(C.SCI_ERR_TIMEOUT, "SCIWaitForDMAQueue", C.SCI_DMAQUEUE_POSTED) from None


class DMAQueue(_Handle):
    """A DMA queue (``SCICreateDMAQueue``): moves bytes between a local
    segment (or Python memory) and a connected segment without the calling
    thread copying.  One transfer at a time per queue.

    Every ``start*`` returns a :class:`DMATransfer` future completed from the
    library's completion callback (``SCI_FLAG_USE_CALLBACK``); pass
    ``use_callback=False`` to poll or wait with :meth:`state` / :meth:`wait`
    (``SCIWaitForDMAQueue``) instead.  ``close()`` (``SCIRemoveDMAQueue``)
    refuses while a transfer is posted unless ``force``.
    """

    _kind = "DMA queue"

    def __init__(self, sd: Descriptor, max_entries: int = 1, *, flags: int = 0, adapter: int = 0) -> None:
        h = sd._h_or_raise("SCICreateDMAQueue")
        p = ffi.new("sci_dma_queue_t *")
        e = _err()
        lib.SCICreateDMAQueue(h, p, adapter, max_entries, flags, e)
        _check(e, "SCICreateDMAQueue")
        super().__init__(sd)
        self._h = p[0]
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._pending: Optional[DMATransfer] = None
        self._pending_keep: Any = None
        ref = weakref.ref(self)

        def done(arg: Any, dq: Any, status: int) -> int:
            q = ref()
            if q is not None:
                q._complete(int(status))
            return C.SCI_CALLBACK_CONTINUE

        self._cb = ffi.callback("sci_cb_dma_t", done)
        self._keep.append(self._cb)
        self._fin = weakref.finalize(self, _finalizer("SCIRemoveDMAQueue", C.SCI_FLAG_FORCE_REMOVE),
                                     self._h, sd, self._cb)

    # -- completion ---------------------------------------------------------

    def _complete(self, status: int) -> None:
        with self._lock:
            fut, self._pending = self._pending, None
            self._pending_keep = None
        if fut is None:
            return
        if status == _OK:
            fut.set_result(DMAQueueState.DONE)
        else:
            state = C.SCI_DMAQUEUE_ABORTED if status == C.SCI_ERR_CANCELLED else C.SCI_DMAQUEUE_ERROR
            fut.set_exception(make_error(status, "DMA transfer", state))

    def _begin(self, use_callback: bool, keep: Any) -> Tuple[Any, Optional[DMATransfer]]:
        if not use_callback:
            return _NULL, None
        fut = DMATransfer()
        fut.queue = self
        fut.set_running_or_notify_cancel()
        with self._lock:
            self._pending = fut
            self._pending_keep = keep
        return self._cb, fut

    def _failed(self, fut: Optional[DMATransfer]) -> None:
        with self._lock:
            if self._pending is fut:
                self._pending = None
                self._pending_keep = None

    def _start(self, name: str, call: Callable[[Any, int, Any], None], flags: int, use_callback: bool,
               keep: Any = None) -> Optional[DMATransfer]:
        """Run ``call(callback, flags, err)`` (one SISCI start call) with the
        completion future set up first: the callback may run before the
        call returns."""
        cb, fut = self._begin(use_callback, keep)
        if fut is not None:
            flags |= C.SCI_FLAG_USE_CALLBACK
        e = ffi.new("sci_error_t *")
        call(cb, flags, e)
        code = int(e[0])
        if code != _OK:
            self._failed(fut)
            _check_code(code, name)
        return fut

    # -- transfers ----------------------------------------------------------

    def start(self, local: LocalSegment, remote: RemoteSegment, local_offset: int = 0,
              size: Optional[int] = None, remote_offset: int = 0, *, read: bool = False,
              flags: int = 0, use_callback: bool = True) -> Optional[DMATransfer]:
        """``SCIStartDmaTransfer``: ``size`` bytes (default: the rest of the
        local segment from ``local_offset``) from ``local`` to ``remote``
        (``read=True``: from ``remote`` to ``local``, ``SCI_FLAG_DMA_READ``).
        Returns at once with a :class:`DMATransfer` (None with
        ``use_callback=False``)."""
        q = self._h_or_raise("SCIStartDmaTransfer")
        lh = local._h_or_raise("SCIStartDmaTransfer")
        rh = remote._h_or_raise("SCIStartDmaTransfer")
        if size is None:
            size = local.size - local_offset
        if read:
            flags |= C.SCI_FLAG_DMA_READ
        return self._start("SCIStartDmaTransfer",
                           lambda cb, f, e: lib.SCIStartDmaTransfer(q, lh, rh, local_offset, size, remote_offset,
                                                                    cb, _NULL, f, e),
                           flags, use_callback, (local, remote))

    def start_mem(self, buffer: Buffer, remote: RemoteSegment, remote_offset: int = 0, *,
                  read: bool = False, flags: int = 0, use_callback: bool = True) -> Optional[DMATransfer]:
        """``SCIStartDmaTransferMem``: between the Python ``buffer`` (any
        contiguous buffer: bytes, bytearray, numpy array; writable for
        ``read``) and ``remote`` at ``remote_offset``.  The buffer is kept
        alive until the transfer ends."""
        q = self._h_or_raise("SCIStartDmaTransferMem")
        rh = remote._h_or_raise("SCIStartDmaTransferMem")
        mem = ffi.from_buffer(buffer, require_writable=read)
        if read:
            flags |= C.SCI_FLAG_DMA_READ
        n = len(mem)
        return self._start("SCIStartDmaTransferMem",
                           lambda cb, f, e: lib.SCIStartDmaTransferMem(q, mem, rh, n, remote_offset, cb, _NULL, f, e),
                           flags, use_callback, (buffer, mem, remote))

    def start_vec(self, local: LocalSegment, remote: RemoteSegment,
                  pieces: Iterable[Tuple[int, int, int]], *, read: bool = False, flags: int = 0,
                  use_callback: bool = True) -> Optional[DMATransfer]:
        """``SCIStartDmaTransferVec``: one transfer of ``(size,
        local_offset, remote_offset)`` pieces, done in order."""
        q = self._h_or_raise("SCIStartDmaTransferVec")
        lh = local._h_or_raise("SCIStartDmaTransferVec")
        rh = remote._h_or_raise("SCIStartDmaTransferVec")
        items = list(pieces)
        vec = ffi.new("dis_dma_vec_t[]", max(1, len(items)))
        for i, (size, lo, ro) in enumerate(items):
            vec[i].size, vec[i].local_offset, vec[i].remote_offset, vec[i].flags = size, lo, ro, 0
        if read:
            flags |= C.SCI_FLAG_DMA_READ
        n = len(items)
        return self._start("SCIStartDmaTransferVec",
                           lambda cb, f, e: lib.SCIStartDmaTransferVec(q, lh, rh, n, vec if n else _NULL, cb, _NULL, f, e),
                           flags, use_callback, (local, remote, vec))

    def transfer(self, local: LocalSegment, remote: RemoteSegment, local_offset: int = 0,
                 size: Optional[int] = None, remote_offset: int = 0, *, read: bool = False,
                 timeout: Timeout = None) -> DMAQueueState:
        """:meth:`start` and wait for the end (Ctrl-C interrupts the wait,
        not the transfer)."""
        t = self.start(local, remote, local_offset, size, remote_offset, read=read)
        assert t is not None
        return t.wait(timeout)

    def transfer_mem(self, buffer: Buffer, remote: RemoteSegment, remote_offset: int = 0, *,
                     read: bool = False, timeout: Timeout = None) -> DMAQueueState:
        """:meth:`start_mem` and wait for the end."""
        t = self.start_mem(buffer, remote, remote_offset, read=read)
        assert t is not None
        return t.wait(timeout)

    async def transfer_async(self, local: LocalSegment, remote: RemoteSegment, local_offset: int = 0,
                             size: Optional[int] = None, remote_offset: int = 0, *,
                             read: bool = False) -> DMAQueueState:
        """``await queue.transfer_async(...)``: :meth:`start`, completed on
        the running asyncio loop (``asyncio.wrap_future``)."""
        import asyncio
        t = self.start(local, remote, local_offset, size, remote_offset, read=read)
        assert t is not None
        return await asyncio.wrap_future(t)  # type: ignore[no-any-return]

    async def transfer_mem_async(self, buffer: Buffer, remote: RemoteSegment, remote_offset: int = 0, *,
                                 read: bool = False) -> DMAQueueState:
        """``await queue.transfer_mem_async(...)``: :meth:`start_mem` in asyncio."""
        import asyncio
        t = self.start_mem(buffer, remote, remote_offset, read=read)
        assert t is not None
        return await asyncio.wrap_future(t)  # type: ignore[no-any-return]

    # -- the older gather/post API --------------------------------------------

    def enqueue(self, local: LocalSegment, remote: RemoteSegment, local_offset: int,
                remote_offset: int, size: int, *, read: bool = False, flags: int = 0) -> DMAQueueState:
        """``SCIEnqueueDMATransfer``: add one transfer to the gathered list;
        returns the queue's state."""
        q = self._h_or_raise("SCIEnqueueDMATransfer")
        if read:
            flags |= C.SCI_FLAG_DMA_READ
        e = _err()
        s = lib.SCIEnqueueDMATransfer(q, local._h_or_raise("SCIEnqueueDMATransfer"),
                                      remote._h_or_raise("SCIEnqueueDMATransfer"),
                                      local_offset, remote_offset, size, flags, e)
        _check(e, "SCIEnqueueDMATransfer", int(s))
        return DMAQueueState(s)

    def post(self, *, flags: int = 0, use_callback: bool = True) -> Optional[DMATransfer]:
        """``SCIPostDMAQueue``: run the gathered transfers as one job."""
        q = self._h_or_raise("SCIPostDMAQueue")
        return self._start("SCIPostDMAQueue", lambda cb, f, e: lib.SCIPostDMAQueue(q, cb, _NULL, f, e),
                           flags, use_callback)

    def reset(self) -> None:
        """``SCIResetDMAQueue``: back to IDLE, dropping anything gathered."""
        e = _err()
        lib.SCIResetDMAQueue(self._h_or_raise("SCIResetDMAQueue"), 0, e)
        _check(e, "SCIResetDMAQueue")

    # -- state ----------------------------------------------------------------

    @property
    def state(self) -> DMAQueueState:
        """``SCIDMAQueueState``."""
        if self.closed:
            return DMAQueueState.ERROR
        return DMAQueueState(lib.SCIDMAQueueState(self._h))

    def wait(self, timeout: Timeout = None) -> DMAQueueState:
        """Wait up to ``timeout`` seconds for the posted transfer to end and
        return the state it ended in: the pending :class:`DMATransfer`'s
        result, or ``SCIWaitForDMAQueue`` for one started with
        ``use_callback=False``.  Raises the transfer's error (``status`` =
        the state) and :class:`SisciTimeoutError`."""
        with self._lock:
            fut = self._pending
        if fut is not None:
            return fut.wait(timeout)
        h = self._h_or_raise("SCIWaitForDMAQueue")
        e = ffi.new("sci_error_t *")
        st = [0]

        def call(ms: int) -> int:
            st[0] = lib.SCIWaitForDMAQueue(h, ms, 0, e)
            return int(e[0])

        code = _sliced(call, timeout)
        _check_code(code, "SCIWaitForDMAQueue", int(st[0]))
        return DMAQueueState(st[0])

    def abort(self) -> None:
        """``SCIAbortDMAQueue``: stop the transfer in flight (its future gets
        ``SCI_ERR_CANCELLED``)."""
        e = _err()
        lib.SCIAbortDMAQueue(self._h_or_raise("SCIAbortDMAQueue"), 0, e)
        _check(e, "SCIAbortDMAQueue")

    def close(self, force: bool = False) -> None:
        """``SCIRemoveDMAQueue``; ``force`` (``SCI_FLAG_FORCE_REMOVE``) aborts
        a transfer in flight first."""
        self._force = force
        super().close()

    def _release(self) -> None:
        e = _err()
        lib.SCIRemoveDMAQueue(self._h, C.SCI_FLAG_FORCE_REMOVE if getattr(self, "_force", False) else 0, e)
        _check(e, "SCIRemoveDMAQueue")

    def _close_for_parent(self) -> None:
        self.close(force=True)


class DMAChannel(_Handle):
    """A DMA channel (``SCIRequestDMAChannel``): the queues assigned to one
    channel run their jobs one at a time.  ``close()`` returns it
    (``SCIReturnDMAChannel``)."""

    _kind = "DMA channel"

    def __init__(self, sd: Descriptor, channel_id: int, type: int, flags: int, adapter: int) -> None:
        h = sd._h_or_raise("SCIRequestDMAChannel")
        p = ffi.new("sci_dma_channel_t *")
        e = _err()
        lib.SCIRequestDMAChannel(h, p, adapter, type, channel_id, flags, e)
        _check(e, "SCIRequestDMAChannel")
        super().__init__(sd)
        self._h = p[0]

        def ret(ch: Any, *keep: Any) -> None:
            try:
                lib.SCIReturnDMAChannel(ch, ffi.new("sci_error_t *"))
            except Exception:
                pass
        self._fin = weakref.finalize(self, ret, self._h, sd)

    def assign(self, queue: DMAQueue) -> None:
        """``SCIAssignDMAChannel``: ``queue``'s next jobs run on this channel."""
        e = _err()
        lib.SCIAssignDMAChannel(self._h_or_raise("SCIAssignDMAChannel"),
                                queue._h_or_raise("SCIAssignDMAChannel"), 0, e)
        _check(e, "SCIAssignDMAChannel")

    def _seg(self, name: str, seg: _Handle) -> None:
        e = _err()
        getattr(lib, name)(self._h_or_raise(name), seg._h_or_raise(name), 0, e)
        _check(e, name)

    def prepare_local(self, segment: LocalSegment) -> None:
        """``SCIPrepareLocalSegmentForDMA``."""
        self._seg("SCIPrepareLocalSegmentForDMA", segment)

    def unprepare_local(self, segment: LocalSegment) -> None:
        """``SCIUnprepareLocalSegmentForDMA``."""
        self._seg("SCIUnprepareLocalSegmentForDMA", segment)

    def prepare_remote(self, segment: RemoteSegment) -> None:
        """``SCIPrepareRemoteSegmentForDMA``."""
        self._seg("SCIPrepareRemoteSegmentForDMA", segment)

    def unprepare_remote(self, segment: RemoteSegment) -> None:
        """``SCIUnprepareRemoteSegmentForDMA``."""
        self._seg("SCIUnprepareRemoteSegmentForDMA", segment)

    def _release(self) -> None:
        e = _err()
        lib.SCIReturnDMAChannel(self._h, e)
        _check(e, "SCIReturnDMAChannel")
