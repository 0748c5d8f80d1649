"""Finding and loading libsisci (cffi, ABI mode).

The binding declares libsisci's functions (``_cdef.py``) and opens the shared
library at import time with ``ffi.dlopen``; nothing is compiled when the
package is installed.  Where the library comes from, first match wins:

1. ``SISCI_LIBRARY``: the path of the ``libsisci.so`` to use (only that one);
2. ``$VSCI_BUILD/lib/libsisci.so`` (a vsci build tree, as the tests set it);
3. the build tree this package sits in: ``python/sisci`` of a vsci checkout
   uses ``build/lib/libsisci.so``, the staged ``build/python/sisci`` uses
   ``build/lib/libsisci.so``;
4. the installed library: ``ctypes.util.find_library("sisci")`` (what
   ``ldconfig`` knows: ``make install``, the ``libsisci`` Debian package,
   ``make install-dis``), else ``libsisci.so`` through the loader's own path
   (``LD_LIBRARY_PATH``).

If none loads, importing ``sisci`` still works; the first call raises
:class:`sisci.SisciLibraryError` saying what was tried.
"""
from __future__ import annotations

import ctypes.util
import os
from typing import Any, List, Optional, Tuple

from cffi import FFI

from ._cdef import FUNCTIONS, TYPES
from .errors import SisciLibraryError

ffi = FFI()
ffi.cdef(TYPES)
ffi.cdef(FUNCTIONS)

_HERE = os.path.dirname(os.path.abspath(__file__))


def candidates() -> List[Tuple[str, str]]:
    """``[(where, path)]`` in the order they are tried."""
    env = os.environ.get("SISCI_LIBRARY")
    if env:
        return [("SISCI_LIBRARY", env)]
    out: List[Tuple[str, str]] = []
    build = os.environ.get("VSCI_BUILD")
    if build:
        out.append(("VSCI_BUILD", os.path.join(build, "lib", "libsisci.so")))
    parent = os.path.dirname(_HERE)
    tree = [
        os.path.join(parent, "..", "build", "lib", "libsisci.so"),  # <checkout>/python/sisci
        os.path.join(parent, "..", "lib", "libsisci.so"),           # <build>/python/sisci
    ]
    for p in tree:
        if os.path.exists(p):
            out.append(("build tree", os.path.normpath(p)))
    found = ctypes.util.find_library("sisci")
    if found:
        out.append(("installed (ldconfig)", found))
    out.append(("loader path", "libsisci.so"))
    return out


class _Missing:
    """Stands in for the library when it could not be loaded."""

    def __init__(self, why: str) -> None:
        self._why = why

    def __getattr__(self, name: str) -> Any:
        raise SisciLibraryError(self._why)


def _load() -> Tuple[Any, Optional[str]]:
    tried = []
    for where, path in candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{path} ({where}): no such file")
            continue
        try:
            return ffi.dlopen(path), path
        except OSError as e:
            tried.append(f"{path} ({where}): {e}")
    why = ("libsisci could not be loaded; set SISCI_LIBRARY to its path, VSCI_BUILD to a vsci "
           "build directory, or install it (make install, or the libsisci package). Tried:\n  "
           + "\n  ".join(tried))
    return _Missing(why), None


lib, _path = _load()


def library_path() -> Optional[str]:
    """The libsisci the binding loaded (None if none could be loaded)."""
    return _path


def error_string(code: int) -> str:
    """``SCIGetErrorString(code)``."""
    s = lib.SCIGetErrorString(int(code) & 0xFFFFFFFF)
    return ffi.string(s).decode("utf-8", "replace") if s != ffi.NULL else ""
