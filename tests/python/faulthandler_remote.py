#!/usr/bin/env python3
"""Remote stores from Python with faulthandler enabled (issue 33).

Python's faulthandler installs handlers for SIGSEGV, SIGFPE, SIGABRT, SIGBUS
and SIGILL; ctypes loads libsisci with dlopen(RTLD_LOCAL), so libsisci's own
symbols are not in the process's global scope.  Remote stores must still
arrive, and Python's own fault must still reach faulthandler.

    faulthandler_remote.py [--wait S] LIBSISCI OWNERNODE:SEG MYSEG STORES [reenable] [fault]

The writer's half of t_sigchain's protocol (tests/c/t_sigchain.c; its
`owner` role checks): creates MYSEG (one page; its first word is the ack
word), maps OWNERNODE:SEG, then stores 1..STORES into the owner's slot 0
through the ctypes pointer, each time waiting (deadline --wait S) until the
owner acknowledges it in MYSEG.  The first half with SCIFlush after each
store, the second half with no SISCI call.  faulthandler is enabled before
libsisci is loaded (as `python3 -X faulthandler` or an enable() at the top
of a program does); with `reenable` it is also disabled and enabled again
after the map (Python code that enables it late takes the signals again).
Prints
"PY STORES DONE stores=N" and "PY FAULTHANDLER ENABLED".  With `fault`,
reads address 0 afterwards: faulthandler prints "Fatal Python error:
Segmentation fault" and the process dies of SIGSEGV (with its core-size
limit raised to the hard limit first, so that it dumps core where the host
lets processes dump one).
"""
import ctypes
import faulthandler
import resource
import sys
import time

faulthandler.enable()

args = sys.argv[1:]
wait_s = 60.0
if len(args) >= 2 and args[0] == "--wait":
    wait_s = float(args[1])
    args = args[2:]
if len(args) < 4:
    sys.exit(__doc__)
lib_path, owner_target, myseg, stores = args[0], args[1], int(args[2], 0), int(args[3], 0)
fault = "fault" in args[4:]
reenable = "reenable" in args[4:]
onode, oseg = (int(x, 0) for x in owner_target.split(":"))

lib = ctypes.CDLL(lib_path)  # RTLD_LOCAL, as every ctypes user loads it
c_uint_p = ctypes.POINTER(ctypes.c_uint)
vp = ctypes.c_void_p
u = ctypes.c_uint
lib.SCIInitialize.argtypes = [u, c_uint_p]
lib.SCIOpen.argtypes = [ctypes.POINTER(vp), u, c_uint_p]
lib.SCIGetLocalNodeId.argtypes = [u, c_uint_p, u, c_uint_p]
lib.SCICreateSegment.argtypes = [vp, ctypes.POINTER(vp), u, ctypes.c_size_t, vp, vp, u, c_uint_p]
lib.SCIMapLocalSegment.argtypes = [vp, ctypes.POINTER(vp), ctypes.c_size_t, ctypes.c_size_t, vp, u, c_uint_p]
lib.SCIMapLocalSegment.restype = vp
lib.SCIPrepareSegment.argtypes = [vp, u, u, c_uint_p]
lib.SCISetSegmentAvailable.argtypes = [vp, u, u, c_uint_p]
lib.SCIConnectSegment.argtypes = [vp, ctypes.POINTER(vp), u, u, u, vp, vp, u, u, c_uint_p]
lib.SCIMapRemoteSegment.argtypes = [vp, ctypes.POINTER(vp), ctypes.c_size_t, ctypes.c_size_t, vp, u, c_uint_p]
lib.SCIMapRemoteSegment.restype = vp
lib.SCIFlush.argtypes = [vp, u]
lib.SCIFlush.restype = None

err = u(0)


def check(what):
    if err.value != 0:
        sys.exit(f"{what} failed: error 0x{err.value:08x}")


lib.SCIInitialize(0, ctypes.byref(err))
check("SCIInitialize")
sd = vp()
lib.SCIOpen(ctypes.byref(sd), 0, ctypes.byref(err))
check("SCIOpen")
node = u(0)
lib.SCIGetLocalNodeId(0, ctypes.byref(node), 0, ctypes.byref(err))
check("SCIGetLocalNodeId")

# Our own segment: the ack word.
ls, lmap = vp(), vp()
lib.SCICreateSegment(sd, ctypes.byref(ls), myseg, 4096, None, None, 0, ctypes.byref(err))
check("SCICreateSegment")
own = lib.SCIMapLocalSegment(ls, ctypes.byref(lmap), 0, 4096, None, 0, ctypes.byref(err))
check("SCIMapLocalSegment")
lib.SCIPrepareSegment(ls, 0, 0, ctypes.byref(err))
check("SCIPrepareSegment")
lib.SCISetSegmentAvailable(ls, 0, 0, ctypes.byref(err))
check("SCISetSegmentAvailable")
ack = ctypes.c_uint32.from_address(own)

# The owner's segment, through a remote map.
rs, rmap = vp(), vp()
t0 = time.monotonic()
while True:
    lib.SCIConnectSegment(sd, ctypes.byref(rs), onode, oseg, 0, None, None, 1000, 0, ctypes.byref(err))
    if err.value == 0:
        break
    if time.monotonic() - t0 > 60:
        check(f"SCIConnectSegment({owner_target}) for 60 s")
    time.sleep(0.05)
rp = lib.SCIMapRemoteSegment(rs, ctypes.byref(rmap), 0, 4096, None, 0, ctypes.byref(err))
check("SCIMapRemoteSegment")
slot = ctypes.c_uint32.from_address(rp)

if reenable:
    # Python code that enables faulthandler late takes the signals again.
    faulthandler.disable()
    faulthandler.enable()
print(f"PY WRITER READY node={node.value} owner={owner_target} stores={stores} reenable={int(reenable)}", flush=True)

t1 = time.monotonic()
for v in range(1, stores + 1):
    slot.value = v
    if v <= stores // 2:
        lib.SCIFlush(None, 0)
    deadline = time.monotonic() + wait_s
    while ack.value != v:
        if time.monotonic() > deadline:
            sys.exit(f"PY LOST STORE: no ack for {v} within {wait_s} s (ack word holds {ack.value})")
ms = (time.monotonic() - t1) * 1000
print(f"PY STORES DONE stores={stores} ms={ms:.0f} (first half with SCIFlush, second without a call)", flush=True)
if faulthandler.is_enabled():
    print("PY FAULTHANDLER ENABLED", flush=True)

if fault:
    # As the C writers do with --core: a death by the default action dumps
    # core where the host lets processes dump one (run it in a scratch dir).
    _, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))
    print("PY OWN FAULT: reading address 0", flush=True)
    ctypes.string_at(0)
    print("PY OWN FAULT DID NOT KILL", flush=True)
    sys.exit(7)
