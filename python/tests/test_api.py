"""Every call of the binding, with its results and its errors, in this
process against the session's node (node 4)."""
from __future__ import annotations

import asyncio
import gc
import itertools
import mmap
import threading
import time

import numpy as np
import pytest

from conftest import NODE_ID, counts

_ids = itertools.count(0x7000)


def new_id() -> int:
    return next(_ids)


def code_of(exc_info) -> int:
    return exc_info.value.code


def published(sd, size=1 << 16, **kw):
    seg = sd.create_segment(new_id(), size, **kw)
    seg.make_available()
    return seg


# ---------------------------------------------------------------------------
# library, queries, errors


def test_library_and_queries(sisci):
    assert sisci.library_path().endswith("libsisci.so")
    sisci.initialize()
    with pytest.raises(sisci.SisciError) as e:
        sisci.initialize(0x1)
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_FLAG
    assert e.value.name == "SCI_ERR_ILLEGAL_FLAG" and e.value.function == "SCIInitialize"
    assert sisci.local_node_id() == NODE_ID
    with pytest.raises(sisci.SisciError) as e:
        sisci.local_node_id(1)
    assert e.value.code == sisci.SCI_ERR_NO_SUCH_ADAPTERNO
    assert "vsci" in sisci.query_vendor_id()
    assert "API" in sisci.query_api()
    assert sisci.query_adapter(sisci.SCI_Q_ADAPTER_NODEID) == NODE_ID
    assert sisci.query_adapter(sisci.SCI_Q_ADAPTER_CARD_TYPE) == sisci.SCI_ADAPTER_CARD_TYPE_VSCI
    with pytest.raises(sisci.SisciError) as e:
        sisci.query_adapter(0x1FF)
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_QUERY
    with pytest.raises(sisci.SisciError) as e:
        sisci.query_adapter(sisci.SCI_Q_ADAPTER_NODEID, adapter=1)
    assert e.value.code == sisci.SCI_ERR_NO_SUCH_ADAPTERNO
    assert sisci.query_system(sisci.SCI_Q_SYSTEM_WRITE_POSTING_ENABLED) == 1
    with pytest.raises(sisci.SisciError):
        sisci.query_system(0x2FF)
    info = sisci.adapter_info()
    assert info["node_id"] == NODE_ID and info["dma_available"] == 1 and info["dma_size_alignment"] == 1


def test_errors_carry_code_name_function(sisci):
    for code in sisci.ErrorCode:
        assert sisci.error_string(code), code
        assert sisci.error_name(code) == "SCI_ERR_" + code.name
    assert sisci.error_name(sisci.SCI_ERR_NO_SUCH_NODEID | 1) == "SCI_ERR_NO_SUCH_NODEID|REMOTE"
    assert sisci.error_name(0x12345) == "0x00012345"
    e = sisci.SisciError(sisci.SCI_ERR_NO_SUCH_SEGMENT, None, "SCIConnectSegment")
    assert (e.code, e.name, e.function) == (sisci.SCI_ERR_NO_SUCH_SEGMENT, "SCI_ERR_NO_SUCH_SEGMENT", "SCIConnectSegment")
    assert e.args == (e.code, e.name, e.function)
    assert "SCIConnectSegment" in str(e) and "SCI_ERR_NO_SUCH_SEGMENT" in str(e) and "0x4000090c" in str(e)
    assert e.error is sisci.ErrorCode.NO_SUCH_SEGMENT
    import pickle
    assert pickle.loads(pickle.dumps(e)).code == e.code
    t = sisci.errors.make_error(sisci.SCI_ERR_TIMEOUT, "SCIWaitForInterrupt")
    assert isinstance(t, sisci.SisciTimeoutError) and isinstance(t, TimeoutError)


def test_memcopy_function(sisci):
    old = sisci.get_memcopy_function()
    try:
        for n in (0, 1, 2):
            sisci.set_memcopy_function(n)
            assert sisci.get_memcopy_function() == n
        sisci.set_memcopy_function(99)
        assert sisci.get_memcopy_function() == 0
    finally:
        sisci.set_memcopy_function(old)


# ---------------------------------------------------------------------------
# descriptors


def test_descriptor(sisci, node):
    sd = sisci.open()
    assert sd.probe_node(NODE_ID)
    assert not sd.probe_node(999)
    sd.close()
    sd.close()  # idempotent
    assert sd.closed
    with pytest.raises(sisci.SisciError) as e:
        sd.create_segment(new_id(), 4096)
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_PARAMETER
    with pytest.raises(sisci.SisciError) as e:
        sisci.Descriptor(0x8)
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_FLAG and e.value.function == "SCIOpen"
    with sisci.Descriptor() as d2:
        assert not d2.closed
    assert d2.closed


def test_descriptor_close_releases_everything(sisci, node):
    before = counts(node.status())
    sd = sisci.Descriptor()
    seg = published(sd)
    rs = sd.connect_segment(NODE_ID, seg.id, 1)
    m = rs.map()
    sd.create_interrupt()
    q = sd.create_dma_queue()
    assert counts(node.status())["segments"] == before["segments"] + 1
    sd.close()
    for o in (seg, rs, m, q):
        assert o.closed
    assert counts(node.status()) == before


def test_close_refuses_while_buffers_are_exported(sisci, sd):
    seg = published(sd, 8192)
    m = seg.map()
    a = m.array("uint64")
    mv = m.memoryview(8, 16)
    assert m.exports() == 2
    with pytest.raises(BufferError):
        m.close()
    with pytest.raises(BufferError):
        seg.close()
    with pytest.raises(BufferError):
        sd.close()
    assert not m.closed and not seg.closed and not sd.closed
    a[0] = 5  # still mapped
    del a, mv
    assert m.exports() == 0
    seg.close()
    assert m.closed and seg.closed


def test_dropped_map_with_live_array_stays_mapped(sisci, sd, node):
    seg = published(sd, 4096)
    a = seg.map().array("uint32")   # the Map object itself is gone at once
    gc.collect()
    a[:] = 3
    with pytest.raises(BufferError):
        seg.close()
    assert int(a.sum()) == 3 * 1024
    del a
    gc.collect()
    seg.close()


def test_garbage_collection_releases(sisci, node):
    before = counts(node.status())

    def make():
        sd = sisci.Descriptor()
        seg = published(sd)
        seg.map().memoryview()[0] = 1
        sd.create_interrupt()
        sd.connect_segment(NODE_ID, seg.id, 1)
    make()
    gc.collect()
    deadline = time.monotonic() + 10
    while counts(node.status()) != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert counts(node.status()) == before


# ---------------------------------------------------------------------------
# local segments


def test_local_segment_calls(sisci, sd):
    sid = new_id()
    seg = sd.create_segment(sid, 12345)
    assert seg.id == sid and seg.size == 12345 and not seg.attached
    assert f"{sid:#x}" in repr(seg)
    with pytest.raises(sisci.SisciError) as e:
        sd.create_segment(sid, 4096)
    assert e.value.code == sisci.SCI_ERR_SEGMENTID_USED
    with pytest.raises(sisci.SisciError) as e:
        seg.set_available()
    assert e.value.code == sisci.SCI_ERR_SEGMENT_NOT_PREPARED
    with pytest.raises(sisci.SisciError) as e:
        seg.set_unavailable()
    assert e.value.code == sisci.SCI_ERR_SEGMENT_NOT_PREPARED
    seg.prepare()
    seg.set_available()
    seg.set_unavailable(notify=True)
    seg.set_available()
    with pytest.raises(sisci.SisciError) as e:
        seg.prepare(flags=0x40000000)
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_FLAG
    with pytest.raises(sisci.SisciError) as e:
        seg.query_ioaddr()
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_QUERY
    with pytest.raises(sisci.SisciError) as e:
        sd.create_segment(new_id(), 0)
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_PARAMETER
    with pytest.raises(sisci.SisciError) as e:
        sd.create_segment(new_id(), 4096, flags=sisci.SCI_FLAG_PHYSICAL)
    assert e.value.code == sisci.SCI_ERR_FLAG_NOT_IMPLEMENTED
    auto = sd.create_segment(None, 4096)
    assert auto.id != 0
    priv = sd.create_segment(new_id(), 4096, private=True)
    priv.make_available()
    seg.close()
    assert seg.closed
    with pytest.raises(sisci.SisciError) as e:
        seg.size
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_PARAMETER


def test_share_and_attach(sisci, sd):
    seg = sd.create_segment(new_id(), 8192)
    with sisci.Descriptor() as other:
        with pytest.raises(sisci.SisciError) as e:
            other.attach_segment(seg.id)
        assert e.value.code == sisci.SCI_ERR_ACCESS
        with pytest.raises(sisci.SisciError) as e:
            other.attach_segment(new_id())
        assert e.value.code == sisci.SCI_ERR_NO_SUCH_SEGMENT
        seg.share()
        att = other.attach_segment(seg.id)
        assert att.attached and att.size == 8192 and att.id == seg.id
        with seg.map() as m, att.map() as m2:
            m.memoryview()[100] = 42
            assert m2.memoryview()[100] == 42
        att.close()


def test_register_memory(sisci, sd):
    seg = sd.create_segment(new_id(), 8192, flags=sisci.SCI_FLAG_EMPTY)
    with pytest.raises(sisci.SisciError) as e:
        seg.map()
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_OPERATION
    buf = mmap.mmap(-1, 8192, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    buf[:5] = b"hello"
    seg.register_memory(buf)
    with seg.map() as m:
        assert bytes(m.memoryview(0, 5)) == b"hello"
        m.memoryview()[0:1] = b"J"
    assert buf[:5] == b"Jello"
    other = sd.create_segment(new_id(), 8192)
    with pytest.raises(sisci.SisciError) as e:
        other.register_memory(bytearray(8192))
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_OPERATION
    empty = sd.create_segment(new_id(), 8192, flags=sisci.SCI_FLAG_EMPTY)
    with pytest.raises(sisci.SisciError) as e:
        empty.register_memory(mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS))
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_PARAMETER
    seg.close()
    del buf


# ---------------------------------------------------------------------------
# maps and buffers


def test_maps_are_zero_copy_buffers(sisci, sd):
    seg = published(sd, 1 << 16)
    rs = sd.connect_segment(NODE_ID, seg.id, 1)
    lm = seg.map()
    rm = rs.map(4096, 8192)
    assert rm.size == 8192 and rm.offset == 4096 and len(rm) == 8192
    assert rm.pointer == rm.address and rm.mapped_to_local_target()
    a = lm.array(np.uint32)
    assert a.__array_interface__["data"][0] == lm.address   # numpy over the map, no copy
    assert a.flags.writeable and a.size == (1 << 16) // 4
    img = rm.array(np.uint16, shape=(64, 64))
    img[3, 5] = 0xBEEF
    assert a[(4096 + (3 * 64 + 5) * 2) // 4] & 0xFFFF == 0xBEEF or a[(4096 + (3 * 64 + 5) * 2) // 4] >> 16 == 0xBEEF
    mv = lm.memoryview()
    assert isinstance(mv, memoryview) and not mv.readonly and mv.nbytes == 1 << 16
    mv[4096:4100] = b"abcd"
    assert bytes(rm.memoryview(0, 4)) == b"abcd"
    w = rm.memoryview().cast("Q")
    w[10] = 0x1122334455667788
    assert int(a[(4096 + 80) // 4]) == 0x55667788
    ro = seg.map(readonly=True)
    assert ro.readonly and ro.memoryview().readonly
    assert not ro.array().flags.writeable
    assert bytes(ro.memoryview(4096, 4)) == b"abcd"
    with pytest.raises(ValueError):
        lm.memoryview(1 << 16, 1)
    del a, img, mv, w
    for m in (lm, rm, ro):
        m.close()
        assert m.closed
    with pytest.raises(sisci.SisciError):
        lm.memoryview()


def test_map_errors(sisci, sd):
    seg = published(sd, 8192)
    with pytest.raises(sisci.SisciError) as e:
        seg.map(0, 0)
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_PARAMETER and e.value.function == "SCIMapLocalSegment"
    with pytest.raises(sisci.SisciError) as e:
        seg.map(4096, 8192)
    assert e.value.code == sisci.SCI_ERR_OUT_OF_RANGE
    with pytest.raises(sisci.SisciError) as e:
        seg.map(flags=sisci.SCI_FLAG_LOCK_OPERATION)
    assert e.value.code == sisci.SCI_ERR_FLAG_NOT_IMPLEMENTED
    with pytest.raises(sisci.SisciError) as e:
        seg.map(address=0x10001)
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_ADDRESS
    rs = sd.connect_segment(NODE_ID, seg.id, 1)
    with pytest.raises(sisci.SisciError) as e:
        rs.map(8000, 1000)
    assert e.value.code == sisci.SCI_ERR_OUT_OF_RANGE and e.value.function == "SCIMapRemoteSegment"


def test_memcpy_memwrite_cache_sync(sisci, sd):
    seg = published(sd, 8192)
    rs = sd.connect_segment(NODE_ID, seg.id, 1)
    with rs.map() as m:
        m.write(100, b"python")
        assert m.read(100, 6) == b"python"
        buf = bytearray(3)
        assert m.readinto(101, buf) == 3 and buf == b"yth"
        m.write(0, np.arange(4, dtype=np.uint32), error_check=True)
        assert np.frombuffer(m.read(0, 16), np.uint32).tolist() == [0, 1, 2, 3]
        m.mem_write(200, b"memwrite")
        assert m.read(200, 8) == b"memwrite"
        with pytest.raises(sisci.SisciError) as e:
            m.write(8190, b"abc")
        assert e.value.code == sisci.SCI_ERR_OUT_OF_RANGE and e.value.function == "SCIMemCpy"
        with pytest.raises(sisci.SisciError) as e:
            m.mem_write(8190, b"abc")
        assert e.value.code == sisci.SCI_ERR_ILLEGAL_ADDRESS
        m.cache_sync(0, 4096)
        m.cache_sync(invalidate=True)
        with pytest.raises(sisci.SisciError) as e:
            m.cache_sync(flush=False)
        assert e.value.code == sisci.SCI_ERR_ILLEGAL_PARAMETER
        with pytest.raises(sisci.SisciError) as e:
            m.cache_sync(4096, 8192)
        assert e.value.code == sisci.SCI_ERR_OUT_OF_RANGE


def test_sequences_and_flush(sisci, sd):
    seg = published(sd, 4096)
    rs = sd.connect_segment(NODE_ID, seg.id, 1)
    m = rs.map()
    seq = m.create_sequence()
    assert seq.start() is sisci.SequenceStatus.OK
    m.memoryview()[0] = 9
    sisci.flush()
    sisci.store_barrier()
    sisci.flush(seq)
    seq.flush()
    seq.store_barrier()
    m.flush()
    assert seq.check() is sisci.SequenceStatus.OK
    m.write(0, b"x", sequence=seq, error_check=True)
    # The owner removes the segment: the sequence reports the loss.
    seg.close(force=True)
    with pytest.raises(sisci.SisciError) as e:
        seq.check()
    assert e.value.code == sisci.SCI_ERR_TRANSFER_FAILED and e.value.status == sisci.SCI_SEQ_NOT_RETRIABLE
    with pytest.raises(sisci.SisciError) as e:
        m.write(0, b"x", error_check=True)
    assert e.value.code == sisci.SCI_ERR_TRANSFER_FAILED
    m.close()   # removes the sequence first
    assert seq.closed
    with pytest.raises(sisci.SisciError) as e:
        seq.start()
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_PARAMETER


# ---------------------------------------------------------------------------
# remote segments and segment events


def test_connect_errors(sisci, sd):
    t0 = time.monotonic()
    with pytest.raises(sisci.SisciError) as e:
        sd.connect_segment(NODE_ID, new_id(), timeout=0.3)
    assert e.value.code == sisci.SCI_ERR_NO_SUCH_SEGMENT and e.value.function == "SCIConnectSegment"
    assert 0.25 < time.monotonic() - t0 < 30
    with pytest.raises(sisci.SisciError) as e:
        sd.connect_segment(NODE_ID, new_id(), timeout=0)
    assert e.value.code == sisci.SCI_ERR_NO_SUCH_SEGMENT
    hidden = sd.create_segment(new_id(), 4096)
    hidden.prepare()
    with pytest.raises(sisci.SisciError) as e:
        sd.connect_segment(NODE_ID, hidden.id, timeout=0.2)
    assert e.value.code == sisci.SCI_ERR_CONNECTION_REFUSED
    with pytest.raises(sisci.SisciError) as e:
        sd.connect_segment(999, 1, timeout=0.2)
    assert e.value.code == sisci.SCI_ERR_NO_SUCH_NODEID


def test_connect_waits_for_the_segment(sisci, sd):
    sid = new_id()

    def later():
        time.sleep(0.3)
        s = sd.create_segment(sid, 4096)
        s.make_available()
        holder.append(s)
    holder: list = []
    threading.Thread(target=later).start()
    rs = sd.connect_segment(NODE_ID, sid, timeout=10)
    assert (rs.id, rs.node_id, rs.size) == (sid, NODE_ID, 4096)
    assert "node=4" in repr(rs)
    rs.close()


def test_segment_events(sisci, sd):
    seg = published(sd, 4096)
    with pytest.raises(sisci.SisciTimeoutError):
        seg.wait_for_event(0.05)
    with sisci.Descriptor() as other:
        rs = other.connect_segment(NODE_ID, seg.id, 1)
        ev = seg.wait_for_event(5)
        assert ev.reason is sisci.CallbackReason.CONNECT and ev.node_id == NODE_ID
        with pytest.raises(sisci.SisciTimeoutError):
            rs.wait_for_event(0)
        seg.set_unavailable(force_disconnect=True)
        rev = rs.wait_for_event(5)
        assert rev.reason is sisci.CallbackReason.LOST
        rs.close()
    seg.close()


def test_segment_callbacks(sisci, sd):
    got = []
    done = threading.Event()

    def on_local(segment, reason, node_id, adapter, status):
        got.append(("local", segment, reason, node_id))
        if reason == sisci.CallbackReason.DISCONNECT:
            done.set()

    seg = sd.create_segment(new_id(), 4096, callback=on_local)
    seg.make_available()
    with pytest.raises(sisci.SisciError) as e:
        seg.wait_for_event(0)
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_OPERATION
    lost = threading.Event()

    def on_remote(segment, reason, status):
        got.append(("remote", segment, reason, status))
        if reason == sisci.CallbackReason.LOST:
            lost.set()
            return sisci.CANCEL

    with sisci.Descriptor() as other:
        rs = other.connect_segment(NODE_ID, seg.id, 1, callback=on_remote)
        rs.close()
        assert done.wait(5), got
        rs2 = other.connect_segment(NODE_ID, seg.id, 1, callback=on_remote)
        seg.close()
        assert lost.wait(5), got
    assert ("local", seg, sisci.CallbackReason.CONNECT, NODE_ID) in got
    assert any(g[0] == "remote" and g[1] is rs2 for g in got)


# ---------------------------------------------------------------------------
# interrupts


def test_interrupts(sisci, sd):
    li = sd.create_interrupt(123)
    assert li.number >= 0
    with pytest.raises(sisci.SisciError) as e:
        sd.create_interrupt(li.number, fixed=True)
    assert e.value.code == sisci.SCI_ERR_BUSY and e.value.function == "SCICreateInterrupt"
    with pytest.raises(sisci.SisciError) as e:
        sd.create_interrupt(flags=sisci.SCI_FLAG_SHARED_INT)
    assert e.value.code == sisci.SCI_ERR_FLAG_NOT_IMPLEMENTED
    ri = sd.connect_interrupt(NODE_ID, li.number, 1)
    for _ in range(3):
        ri.trigger()
    for _ in range(3):
        li.wait(5)   # triggers are counted
    with pytest.raises(sisci.SisciTimeoutError) as e:
        li.wait(0)
    assert e.value.function == "SCIWaitForInterrupt"
    with pytest.raises(TimeoutError):
        li.wait(0.3)   # longer than one slice
    li.close()
    with pytest.raises(sisci.SisciError) as e:
        ri.trigger()
    assert e.value.code == sisci.SCI_ERR_NOT_CONNECTED
    ri.close()
    with pytest.raises(sisci.SisciError) as e:
        sd.connect_interrupt(NODE_ID, 4000, timeout=0.2)
    assert e.value.code == sisci.SCI_ERR_CONNECTION_REFUSED
    with pytest.raises(sisci.SisciError) as e:
        li.wait(0)
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_PARAMETER


def test_wait_releases_the_gil_and_is_cancelled_by_removal(sisci, sd):
    li = sd.create_interrupt()
    result = []

    def waiter():
        try:
            li.wait(30)
            result.append("woke")
        except sisci.SisciError as e:
            result.append(e.code)
    t = threading.Thread(target=waiter)
    t.start()
    n = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.3:
        n += 1           # this thread runs while the other waits
    assert n > 1000
    ri = sd.connect_interrupt(NODE_ID, li.number, 1)
    ri.trigger()
    t.join(5)
    assert result == ["woke"]
    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.2)
    li.close()
    t.join(5)
    assert not t.is_alive()
    assert result[1] in (sisci.SCI_ERR_CANCELLED, sisci.SCI_ERR_ILLEGAL_PARAMETER)


def test_interrupt_callback(sisci, sd):
    hits = []
    enough = threading.Event()

    def cb(intr, status):
        hits.append((intr, status))
        if len(hits) == 3:
            enough.set()
            return sisci.CANCEL
    li = sd.create_interrupt(callback=cb)
    assert li.has_callback
    with pytest.raises(sisci.SisciError) as e:
        li.wait(0)
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_OPERATION
    ri = sd.connect_interrupt(NODE_ID, li.number, 1)
    for _ in range(3):
        ri.trigger()
    assert enough.wait(5)
    assert hits == [(li, 0)] * 3


def test_callback_exception_is_reported_not_fatal(sisci, sd, capfd):
    calls = []

    def cb(intr, status):
        calls.append(1)
        raise RuntimeError("boom in callback")
    li = sd.create_interrupt(callback=cb)
    ri = sd.connect_interrupt(NODE_ID, li.number, 1)
    ri.trigger()
    ri.trigger()
    deadline = time.monotonic() + 5
    while len(calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(calls) == 2
    assert "boom in callback" in capfd.readouterr().err


def test_data_interrupts(sisci, sd):
    li = sd.create_data_interrupt()
    ri = sd.connect_data_interrupt(NODE_ID, li.number, 1)
    ri.trigger(b"hello")
    ri.trigger(b"")
    big = bytes(range(256)) * 4
    ri.trigger(big)
    ri.trigger(np.arange(10, dtype=np.uint8))
    assert li.wait(5) == b"hello"
    assert li.wait(5) == b""
    with pytest.raises(sisci.SisciError) as e:
        li.wait(5, max_size=100)
    assert e.value.code == sisci.SCI_ERR_OUT_OF_RANGE and e.value.status == 1024
    assert li.wait(5) == big              # kept after the refusal
    assert li.wait(5) == bytes(range(10))
    with pytest.raises(sisci.SisciError) as e:
        ri.trigger(bytes(1025))
    assert e.value.code == sisci.SCI_ERR_OUT_OF_RANGE and e.value.function == "SCITriggerDataInterrupt"
    with pytest.raises(sisci.SisciTimeoutError):
        li.wait(0.05)
    got = []
    ev = threading.Event()
    li2 = sd.create_data_interrupt(callback=lambda i, data, st: (got.append(data), ev.set()) and None)
    sd.connect_data_interrupt(NODE_ID, li2.number, 1).trigger(b"via callback")
    assert ev.wait(5) and got == [b"via callback"]
    li.close()
    with pytest.raises(sisci.SisciError) as e:
        ri.trigger(b"x")
    assert e.value.code == sisci.SCI_ERR_NOT_CONNECTED


# ---------------------------------------------------------------------------
# DMA


def test_dma_transfers(sisci, sd):
    size = 1 << 20
    src = published(sd, size)
    dst = published(sd, size)
    rs = sd.connect_segment(NODE_ID, dst.id, 1)
    a = src.map().array(np.uint8)
    a[:] = np.arange(size, dtype=np.uint64).astype(np.uint8)
    b = dst.map().array(np.uint8)
    with sd.create_dma_queue() as q:
        assert q.state is sisci.DMAQueueState.IDLE
        t = q.start(src, rs, 0, size, 0)
        assert t.wait(10) is sisci.DMAQueueState.DONE
        assert t.queue is q and q.state is sisci.DMAQueueState.DONE
        assert np.array_equal(a, b)
        a[:4096] = 0
        assert q.transfer(src, rs, 0, 4096, 4096, read=True) is sisci.DMAQueueState.DONE
        assert np.array_equal(a[:4096], b[4096:8192])
        # Python memory, both ways.
        data = np.full(1000, 7, dtype=np.uint8)
        q.transfer_mem(data, rs, 10)
        assert (b[10:1010] == 7).all()
        back = bytearray(1000)
        q.transfer_mem(back, rs, 10, read=True)
        assert back == bytes([7]) * 1000
        # Vectors.
        a[:] = 1
        t = q.start_vec(src, rs, [(10, 0, 100), (20, 50, 200)])
        t.wait(10)
        assert (b[100:110] == 1).all() and (b[200:220] == 1).all()
        # Without a callback: SCIWaitForDMAQueue.
        assert q.start(src, rs, 0, 4096, 0, use_callback=False) is None
        assert q.wait(10) is sisci.DMAQueueState.DONE
        assert q.wait(0) is sisci.DMAQueueState.DONE   # nothing posted: its state at once
    del a, b


def test_dma_errors(sisci, sd):
    src = published(sd, 8192)
    dst = published(sd, 8192)
    rs = sd.connect_segment(NODE_ID, dst.id, 1)
    q = sd.create_dma_queue(max_entries=2)
    with pytest.raises(sisci.SisciError) as e:
        q.start(src, rs, 0, 0, 0)
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_PARAMETER and e.value.function == "SCIStartDmaTransfer"
    with pytest.raises(sisci.SisciError) as e:
        q.start(src, rs, 0, 8192, 4096)
    assert e.value.code == sisci.SCI_ERR_OUT_OF_RANGE
    with pytest.raises(sisci.SisciError) as e:
        q.start(src, rs, 0, 64, 0, flags=0x80000000)
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_FLAG
    with pytest.raises(sisci.SisciError) as e:
        q.start_vec(src, rs, [])
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_PARAMETER
    with pytest.raises(sisci.SisciError) as e:
        q.start_vec(src, rs, [(1, 0, 0)] * 300)
    assert e.value.code == sisci.SCI_ERR_MAX_ENTRIES
    with pytest.raises(sisci.SisciError) as e:
        q.start_mem(bytes(100), rs, 8150)
    assert e.value.code == sisci.SCI_ERR_OUT_OF_RANGE
    with pytest.raises(sisci.SisciError) as e:
        sd.create_dma_queue(0)
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_PARAMETER
    with pytest.raises(sisci.SisciError) as e:
        sd.create_dma_queue(flags=sisci.SCI_FLAG_DMA_PHDMA)
    assert e.value.code == sisci.SCI_ERR_FLAG_NOT_IMPLEMENTED
    # the gather/post API
    with pytest.raises(sisci.SisciError) as e:
        q.post()
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_OPERATION
    assert q.enqueue(src, rs, 0, 0, 100) is sisci.DMAQueueState.GATHER
    assert q.enqueue(src, rs, 100, 200, 100) is sisci.DMAQueueState.GATHER
    with pytest.raises(sisci.SisciError) as e:
        q.enqueue(src, rs, 0, 0, 100)
    assert e.value.code == sisci.SCI_ERR_MAX_ENTRIES and e.value.status == sisci.SCI_DMAQUEUE_GATHER
    with pytest.raises(sisci.SisciError) as e:
        q.start(src, rs, 0, 64, 0)
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_OPERATION
    assert q.post().wait(10) is sisci.DMAQueueState.DONE
    q.enqueue(src, rs, 0, 0, 100)
    q.reset()
    assert q.state is sisci.DMAQueueState.IDLE
    q.enqueue(src, rs, 0, 0, 100)
    q.post(use_callback=False)
    assert q.wait(10) is sisci.DMAQueueState.DONE
    q.abort()   # nothing in flight: no effect
    # the target goes away
    dst.close(force=True)
    with pytest.raises(sisci.SisciError) as e:
        q.start(src, rs, 0, 64, 0)
    assert e.value.code == sisci.SCI_ERR_SEGMENT_NOT_CONNECTED
    q.close()
    assert q.state is sisci.DMAQueueState.ERROR
    with pytest.raises(sisci.SisciError) as e:
        q.start(src, rs, 0, 64, 0)
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_PARAMETER


def test_dma_abort_and_forced_remove(sisci, sd):
    size = 64 << 20
    src = published(sd, size)
    dst = published(sd, size)
    rs = sd.connect_segment(NODE_ID, dst.id, 1)
    q = sd.create_dma_queue()
    t = q.start(src, rs, 0, size, 0)
    q.abort()
    try:
        st = t.wait(10)
        assert st is sisci.DMAQueueState.DONE          # finished before the abort
    except sisci.SisciError as e:
        assert e.code == sisci.SCI_ERR_CANCELLED and e.status == sisci.SCI_DMAQUEUE_ABORTED
    t = q.start(src, rs, 0, size, 0)
    try:
        q.close()   # refused while posted (unless it is done already)
        closed_early = True
    except sisci.SisciError as e:
        assert e.code == sisci.SCI_ERR_ILLEGAL_OPERATION
        closed_early = False
    if not closed_early:
        q.close(force=True)
    assert q.closed
    try:
        t.wait(10)
    except sisci.SisciError as e:
        assert e.code == sisci.SCI_ERR_CANCELLED


def test_dma_asyncio(sisci, sd):
    size = 256 << 10
    src = published(sd, size)
    dst = published(sd, size)
    rs = sd.connect_segment(NODE_ID, dst.id, 1)
    src.map().array()[:] = 0x5A
    queues = [sd.create_dma_queue() for _ in range(3)]

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)
        tick = asyncio.ensure_future(ticker())
        states = await asyncio.gather(*(q.transfer_async(src, rs, i * 4096, 4096, i * 4096)
                                        for i, q in enumerate(queues)))
        img = np.zeros(4096, np.uint8) + 3
        await queues[0].transfer_mem_async(img, rs, size - 4096)
        tick.cancel()
        return states, ticks
    states, ticks = asyncio.run(main())
    assert states == [sisci.DMAQueueState.DONE] * 3 and ticks > 0
    b = dst.map().array()
    assert (b[:3 * 4096] == 0x5A).all() and (b[-4096:] == 3).all()
    del b


def test_dma_channels(sisci, sd):
    src = published(sd, 8192)
    dst = published(sd, 8192)
    rs = sd.connect_segment(NODE_ID, dst.id, 1)
    ch = sd.request_dma_channel()
    with pytest.raises(sisci.SisciError) as e:
        sd.request_dma_channel(8)
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_PARAMETER
    ch3 = sd.request_dma_channel(3)
    with pytest.raises(sisci.SisciError) as e:
        sd.request_dma_channel(3)
    assert e.value.code == sisci.SCI_ERR_BUSY
    s1 = sd.request_dma_channel(5, shared=True)
    s2 = sd.request_dma_channel(5, shared=True, type=sisci.SCI_DMA_TYPE_GLOBAL)
    q = sd.create_dma_queue()
    ch.assign(q)
    ch.prepare_local(src)
    ch.prepare_remote(rs)
    q.transfer(src, rs, 0, 8192, 0)
    ch.unprepare_remote(rs)
    ch.unprepare_local(src)
    for c in (ch, ch3, s1, s2):
        c.close()
    with pytest.raises(sisci.SisciError) as e:
        ch.assign(q)
    assert e.value.code == sisci.SCI_ERR_ILLEGAL_PARAMETER
    q.transfer(src, rs, 0, 8192, 0)   # runs without a channel now


# ---------------------------------------------------------------------------
# reflective memory on one node


def test_reflective_memory_one_node(sisci, sd):
    gid = new_id()
    member = sd.create_segment(gid, 8192, broadcast=True)
    member.make_available()
    plain = sd.create_segment(new_id(), 8192)   # not a member
    plain.make_available()
    grp = sd.connect_group(gid, 5)
    assert grp.node_id == sisci.GROUP_ALL and grp.size == 8192
    mine = member.map().array(np.uint32)
    with grp.map() as gm:
        gm.memoryview().cast("I")[7] = 77
        sisci.flush()
    assert mine[7] == 77
    q = sd.create_dma_queue()
    q.transfer_mem(np.full(16, 9, np.uint32), grp, 64)
    assert (mine[16:32] == 9).all()
    li = sd.create_interrupt()
    ri = sd.connect_interrupt(sisci.GROUP_ALL, li.number, 1)
    ri.trigger()
    li.wait(5)
    ri2 = sd.connect_interrupt(NODE_ID, li.number, 1, flags=sisci.SCI_FLAG_BROADCAST)
    ri2.trigger()
    li.wait(5)
    del mine


def test_terminate_then_release(node):
    """SCITerminate releases everything; the objects' close() succeeds once
    (run in a process of its own: terminate ends this library's state)."""
    from conftest import run_py
    run_py(node, r"""
import sisci
sd = sisci.Descriptor()
seg = sd.create_segment(None, 4096); seg.make_available()
m = seg.map(); li = sd.create_interrupt(); q = sd.create_dma_queue()
sisci.terminate()
for o in (m, seg, li, q, sd):
    o.close()
sd2 = sisci.Descriptor(); sd2.close()
print("ok")
""")


def test_forked_child_does_not_release_the_parents_objects(sisci, sd, node):
    """SISCI handles belong to the process that got them: a forked child's
    copies are closed, and its garbage collection and exit release nothing."""
    import os
    seg = published(sd, 4096)
    m = seg.map()
    li = sd.create_interrupt()
    before = counts(node.status())
    pid = os.fork()
    if pid == 0:   # the child
        code = 0
        try:
            if not (seg.closed and m.closed and li.closed and sd.closed):
                code = 2
            try:
                seg.size
                code = 3
            except sisci.SisciError:
                pass
            del m
            gc.collect()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, status
    assert not seg.closed and not m.closed and not li.closed
    assert counts(node.status()) == before
    with sd.connect_segment(NODE_ID, seg.id, 1) as rs:
        assert rs.size == 4096
    m.close()


def test_star_import_keeps_builtins():
    ns: dict = {}
    exec("from sisci import *", ns)
    assert "open" not in ns and "SCI_FLAG_BROADCAST" in ns and "Descriptor" in ns
