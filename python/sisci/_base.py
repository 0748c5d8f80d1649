"""What every SISCI object of the binding is built on: the enums and
events they report, the error out-parameter and its check, waits in
slices, callbacks kept alive, and :class:`_Handle`, the base class that owns
one SISCI handle (its life cycle is described in :mod:`sisci._core`).
"""
from __future__ import annotations

import enum
import math
import os
import sys
import threading
import time
import traceback
import weakref
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from . import constants as C
from ._lib import ffi, lib
from .errors import SisciError, make_error


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


def _check_code(code: int, function: str, status: Optional[int] = None) -> None:
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
