"""DMA queues, their transfers and DMA channels (``SCICreateDMAQueue``,
``SCIStartDmaTransfer*``, ``SCIRequestDMAChannel``); see :mod:`sisci._core`.
"""
from __future__ import annotations

import concurrent.futures
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Tuple

from . import constants as C
from ._lib import ffi, lib
from .errors import make_error
from ._base import (Buffer, DMAQueueState, Timeout, _Handle, _NULL, _OK, _check, _check_code, _err,
                    _finalizer, _sliced)
from ._segments import LocalSegment, RemoteSegment

if TYPE_CHECKING:
    from ._core import Descriptor


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
