"""SISCI errors as Python exceptions.

Every failing SISCI call raises :class:`SisciError` (or a subclass) carrying
the numeric ``sci_error_t`` (``code``), its C name (``name``, e.g.
``"SCI_ERR_NO_SUCH_SEGMENT"``), the C function that reported it
(``function``) and the library's explanation (``text``, from
``SCIGetErrorString``).
"""
from __future__ import annotations

import enum
from typing import Dict, Optional, Type

from . import constants as _c

__all__ = ["ErrorCode", "SisciError", "SisciTimeoutError", "SisciLibraryError", "error_name"]


class ErrorCode(enum.IntEnum):
    """The ``sci_error_t`` values (``sisci_error.h``), named without ``SCI_ERR_``."""

    OK = _c.SCI_ERR_OK
    BUSY = _c.SCI_ERR_BUSY
    FLAG_NOT_IMPLEMENTED = _c.SCI_ERR_FLAG_NOT_IMPLEMENTED
    ILLEGAL_FLAG = _c.SCI_ERR_ILLEGAL_FLAG
    NOSPC = _c.SCI_ERR_NOSPC
    API_NOSPC = _c.SCI_ERR_API_NOSPC
    HW_NOSPC = _c.SCI_ERR_HW_NOSPC
    NOT_IMPLEMENTED = _c.SCI_ERR_NOT_IMPLEMENTED
    ILLEGAL_ADAPTERNO = _c.SCI_ERR_ILLEGAL_ADAPTERNO
    NO_SUCH_ADAPTERNO = _c.SCI_ERR_NO_SUCH_ADAPTERNO
    TIMEOUT = _c.SCI_ERR_TIMEOUT
    OUT_OF_RANGE = _c.SCI_ERR_OUT_OF_RANGE
    NO_SUCH_SEGMENT = _c.SCI_ERR_NO_SUCH_SEGMENT
    ILLEGAL_NODEID = _c.SCI_ERR_ILLEGAL_NODEID
    CONNECTION_REFUSED = _c.SCI_ERR_CONNECTION_REFUSED
    SEGMENT_NOT_CONNECTED = _c.SCI_ERR_SEGMENT_NOT_CONNECTED
    SIZE_ALIGNMENT = _c.SCI_ERR_SIZE_ALIGNMENT
    OFFSET_ALIGNMENT = _c.SCI_ERR_OFFSET_ALIGNMENT
    ILLEGAL_PARAMETER = _c.SCI_ERR_ILLEGAL_PARAMETER
    MAX_ENTRIES = _c.SCI_ERR_MAX_ENTRIES
    SEGMENT_NOT_PREPARED = _c.SCI_ERR_SEGMENT_NOT_PREPARED
    ILLEGAL_ADDRESS = _c.SCI_ERR_ILLEGAL_ADDRESS
    ILLEGAL_OPERATION = _c.SCI_ERR_ILLEGAL_OPERATION
    ILLEGAL_QUERY = _c.SCI_ERR_ILLEGAL_QUERY
    SEGMENTID_USED = _c.SCI_ERR_SEGMENTID_USED
    SYSTEM = _c.SCI_ERR_SYSTEM
    CANCELLED = _c.SCI_ERR_CANCELLED
    NOT_CONNECTED = _c.SCI_ERR_NOT_CONNECTED
    NOT_AVAILABLE = _c.SCI_ERR_NOT_AVAILABLE
    INCONSISTENT_VERSIONS = _c.SCI_ERR_INCONSISTENT_VERSIONS
    COND_INT_RACE_PROBLEM = _c.SCI_ERR_COND_INT_RACE_PROBLEM
    OVERFLOW = _c.SCI_ERR_OVERFLOW
    NOT_INITIALIZED = _c.SCI_ERR_NOT_INITIALIZED
    ACCESS = _c.SCI_ERR_ACCESS
    NO_SUCH_NODEID = _c.SCI_ERR_NO_SUCH_NODEID
    NODE_NOT_RESPONDING = _c.SCI_ERR_NODE_NOT_RESPONDING
    NO_REMOTE_LINK_ACCESS = _c.SCI_ERR_NO_REMOTE_LINK_ACCESS
    NO_LINK_ACCESS = _c.SCI_ERR_NO_LINK_ACCESS
    TRANSFER_FAILED = _c.SCI_ERR_TRANSFER_FAILED


def error_name(code: int) -> str:
    """``"SCI_ERR_..."`` for a known code; a remote error (bit 0 set, as
    ``SCI_ERR_REMOTE_MASK``) is named after its local code with ``"|REMOTE"``;
    anything else is ``"0x%08x"``."""
    try:
        return "SCI_ERR_" + ErrorCode(code).name
    except ValueError:
        pass
    if code & _c.SCI_ERR_REMOTE_MASK:
        try:
            return "SCI_ERR_" + ErrorCode(code & ~_c.SCI_ERR_REMOTE_MASK).name + "|REMOTE"
        except ValueError:
            pass
    return f"{code:#010x}"


class SisciError(Exception):
    """A SISCI call failed.

    ``SisciError(code, name, function)``: ``code`` is the ``sci_error_t``
    value, ``name`` its C name (derived from ``code`` when None), ``function``
    the SISCI call that reported it (``"SCIConnectSegment"``).  ``text`` is
    ``SCIGetErrorString(code)`` when the library is loaded.  ``status`` is
    the extra result some calls return with their error (the sequence status
    of ``SCICheckSequence``, the queue state of ``SCIWaitForDMAQueue``), else
    None.
    """

    code: int
    name: str
    function: str
    text: str
    status: Optional[int]

    def __init__(self, code: int, name: Optional[str] = None, function: str = "",
                 text: Optional[str] = None, status: Optional[int] = None) -> None:
        code = int(code)
        name = name if name is not None else error_name(code)
        super().__init__(code, name, function)
        self.code = code
        self.name = name
        self.function = function
        if text is None:
            try:
                from ._lib import error_string
                text = error_string(code)
            except Exception:  # pragma: no cover - library not loadable
                text = ""
        self.text = text
        self.status = status

    @property
    def error(self) -> Optional[ErrorCode]:
        """The code as an :class:`ErrorCode`, None for an unknown value."""
        try:
            return ErrorCode(self.code)
        except ValueError:
            return None

    def __str__(self) -> str:
        where = f"{self.function}: " if self.function else ""
        text = self.text if self.text.startswith(self.name) else (
            f"{self.name}: {self.text}" if self.text else self.name)
        return f"{where}{text} ({self.code:#010x})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code:#010x}, {self.name!r}, {self.function!r})"

    def __reduce__(self):  # picklable across processes (multiprocessing)
        return (type(self), (self.code, self.name, self.function, self.text, self.status))


class SisciTimeoutError(SisciError, TimeoutError):
    """``SCI_ERR_TIMEOUT``: a wait ended without the event.  Also a
    :class:`TimeoutError`, so ``except TimeoutError`` catches it."""


class SisciLibraryError(ImportError):
    """libsisci could not be found or loaded (see ``sisci.library_path()``)."""


_BY_CODE: Dict[int, Type[SisciError]] = {_c.SCI_ERR_TIMEOUT: SisciTimeoutError}


def make_error(code: int, function: str, status: Optional[int] = None) -> SisciError:
    """The exception for ``code`` reported by ``function``."""
    return _BY_CODE.get(int(code), SisciError)(code, None, function, status=status)
