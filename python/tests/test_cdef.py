"""The binding's declarations against vsci's C headers: constants, function
prototypes and struct layouts cannot drift from include/."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from conftest import PYDIR, ROOT

sys.path.insert(0, str(PYDIR / "tools"))

# Declared by sisci_api.h for programs with such a path; each answers
# SCI_ERR_NOT_IMPLEMENTED (hardware that a software interconnect lacks), so
# the binding leaves them out.
HARDWARE_ONLY = {
    "SCIRegisterInterruptFlag", "SCIEnableConditionalInterrupt", "SCIDisableConditionalInterrupt",
    "SCIGetConditionalInterruptTrigCounter", "SCIphDmaEnqueue", "SCIphDmaStart",
    "SCIGetCSRRegister", "SCISetCSRRegister", "SCIGetLocalCSR", "SCISetLocalCSR",
    "SCIAttachPhysicalMemory", "SCIConnectSCISpace",
}


def header_functions() -> set:
    text = (ROOT / "include" / "sisci_api.h").read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return set(re.findall(r"\b((?:SCI|SetSci|GetSci)\w*)\s*\(", text))


def cdef_functions() -> set:
    from sisci._cdef import FUNCTIONS
    return set(re.findall(r"\b((?:SCI|SetSci|GetSci)\w*)\s*\(", FUNCTIONS))


def test_constants_match_headers():
    import gen_constants
    current = (PYDIR / "sisci" / "constants.py").read_text()
    assert gen_constants.generate() == current, \
        "python/sisci/constants.py differs from include/: run python3 python/tools/gen_constants.py"


def test_every_call_is_declared():
    missing = header_functions() - cdef_functions() - HARDWARE_ONLY
    assert not missing, f"sisci_api.h declares calls the binding lacks: {sorted(missing)}"
    extra = cdef_functions() - header_functions()
    assert not extra, f"the binding declares calls sisci_api.h does not: {sorted(extra)}"


def test_every_declared_call_is_used():
    src = "".join((PYDIR / "sisci" / f).read_text()
                  for f in ("_core.py", "_base.py", "_segments.py", "_interrupts.py", "_dma.py", "_lib.py"))
    unused = {f for f in cdef_functions() if f not in src}
    assert not unused, f"declared but never called by the binding: {sorted(unused)}"


@pytest.fixture
def cc():
    c = shutil.which("cc") or shutil.which("gcc")
    if not c:
        pytest.skip("no C compiler")
    return c


def test_prototypes_compile_against_the_header(cc, tmp_path):
    """Each prototype redeclared after the header: a different type is a
    'conflicting types' error."""
    from sisci._cdef import FUNCTIONS
    src = tmp_path / "protos.c"
    src.write_text("#include <sisci_api.h>\n" + FUNCTIONS)
    p = subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-c", "-I", str(ROOT / "include"),
                        "-o", str(tmp_path / "protos.o"), str(src)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_struct_layouts_match(cc, tmp_path):
    from sisci._lib import ffi
    fields = {
        "sci_query_string_t": ["str", "length"],
        "sci_query_adapter_t": ["localAdapterNo", "portNo", "subcommand", "data"],
        "sci_query_system_t": ["subcommand", "data"],
        "sci_query_local_segment_t": ["segment", "subcommand", "data"],
        "sci_query_remote_segment_t": ["segment", "subcommand", "data"],
        "sci_query_map_t": ["map", "subcommand", "data"],
        "dis_dma_vec_t": ["size", "local_offset", "remote_offset", "flags"],
        "sci_address_t": ["nodeId", "offsHi", "offsLo"],
    }
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <sisci_api.h>", "int main(void) {"]
    for t, fs in fields.items():
        lines.append(f'printf("{t} %zu\\n", sizeof({t}));')
        for f in fs:
            lines.append(f'printf("{t}.{f} %zu\\n", offsetof({t}, {f}));')
    for t in ("sci_error_t", "sci_dma_queue_state_t", "sci_segment_cb_reason_t", "sci_callback_action_t",
              "sci_sequence_status_t"):
        lines.append(f'printf("{t} %zu\\n", sizeof({t}));')
    lines.append("return 0; }")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    p = subprocess.run([cc, "-I", str(ROOT / "include"), "-o", str(exe), str(src)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    c_side = dict(l.rsplit(" ", 1) for l in subprocess.run([str(exe)], capture_output=True, text=True).stdout.split("\n") if l)
    for key, v in c_side.items():
        if "." in key:
            t, f = key.split(".")
            assert ffi.offsetof(t, f) == int(v), key
        else:
            assert ffi.sizeof(key) == int(v), key
