"""Interrupts and data interrupts, local and remote
(``SCICreate*Interrupt``, ``SCIConnect*Interrupt``, triggers and waits);
see :mod:`sisci._core`.
"""
from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Callable, Optional

from . import constants as C
from ._lib import ffi, lib
from ._base import (WAIT_SLICE, Buffer, Timeout, _Handle, _NULL, _OK, _SLICE_MS, _TIMEOUT, _action,
                    _check, _check_code, _closed, _err, _finalizer, _ms, _report_callback_exception,
                    _retire, _sliced, _tls)

if TYPE_CHECKING:
    from ._core import Descriptor


try:
    _trigger = lib.SCITriggerInterrupt
    _wait_interrupt = lib.SCIWaitForInterrupt
except Exception:  # the library is missing: calls raise SisciLibraryError
    def _trigger(*a: Any) -> None:
        lib.SCITriggerInterrupt(*a)

    def _wait_interrupt(*a: Any) -> None:
        lib.SCIWaitForInterrupt(*a)



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
