"""Local and remote segments, their maps and the maps' sequences
(``SCICreateSegment``, ``SCIConnectSegment``, ``SCIMap*Segment``,
``SCICreateMapSequence``); see :mod:`sisci._core`.
"""
from __future__ import annotations

import sys
import weakref
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from . import constants as C
from ._lib import ffi, lib
from ._base import (Buffer, CallbackReason, RemoteSegmentEvent, SegmentEvent, SequenceStatus, Timeout,
                    _Handle, _NULL, _OK, _TIMEOUT, _action, _check, _check_code, _closed, _err,
                    _finalizer, _report_callback_exception, _retire, _sliced)

if TYPE_CHECKING:
    from ._core import Descriptor


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
    def _make(cls, sd: Descriptor, function: str, flags: int, callback: Optional[Callable[..., Any]],
              call: Callable[[Any, Any, Any, int, Any], None]) -> "LocalSegment":
        """A local segment of ``sd`` made by ``call(sd_handle, out, callback,
        flags, error)``, which calls ``function`` (SCICreateSegment or
        SCIAttachLocalSegment), with ``callback`` wired to it."""
        h = sd._h_or_raise(function)
        self = cls.__new__(cls)
        _Handle.__init__(self, sd)
        cb = _NULL
        if callback is not None:
            cb = _local_segment_cb(weakref.ref(self), callback)
            flags |= C.SCI_FLAG_USE_CALLBACK
            self._keep.append(cb)
        p = ffi.new("sci_local_segment_t *")
        e = _err()
        call(h, p, cb, flags, e)
        if e[0] != _OK:
            sd._children.pop(id(self), None)
            _retire(*self._keep)
            _check(e, function)
        self._h = p[0]
        return self

    @classmethod
    def _create(cls, sd: Descriptor, segment_id: int, size: int, flags: int,
                callback: Optional[Callable[..., Any]]) -> "LocalSegment":
        self = cls._make(sd, "SCICreateSegment", flags, callback,
                         lambda h, p, cb, fl, e: lib.SCICreateSegment(h, p, segment_id, size, cb, _NULL, fl, e))
        self.attached = False
        self._fin = weakref.finalize(self, _finalizer("SCIRemoveSegment", C.SCI_FLAG_FORCE_REMOVE),
                                     self._h, sd, *self._keep)
        return self

    @classmethod
    def _attach(cls, sd: Descriptor, segment_id: int, flags: int,
                callback: Optional[Callable[..., Any]]) -> "LocalSegment":
        size = ffi.new("size_t *")
        self = cls._make(sd, "SCIAttachLocalSegment", flags, callback,
                         lambda h, p, cb, fl, e: lib.SCIAttachLocalSegment(h, p, segment_id, size, cb, _NULL, fl, e))
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
