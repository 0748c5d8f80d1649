//! Two endpoints in one process over 127.0.0.1.

use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vsci_fabric::*;

/// Memory that peers write behind Rust's back: accessed only through raw
/// pointers with volatile operations.
struct Shared {
    ptr: *mut u8,
    len: usize,
}
// SAFETY: the memory is only accessed through volatile raw-pointer reads and
// writes, never through references, and freed once, in Drop.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Shared {
    fn new(len: usize) -> Shared {
        let b = vec![0u8; len].into_boxed_slice();
        Shared { ptr: Box::into_raw(b) as *mut u8, len }
    }
    fn get(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.len);
        // SAFETY: in bounds (asserted above) of a live allocation.
        (0..len).map(|i| unsafe { ptr::read_volatile(self.ptr.add(off + i)) }).collect()
    }
    fn set(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.len);
        for (i, b) in data.iter().enumerate() {
            // SAFETY: in bounds (asserted above) of a live allocation.
            unsafe { ptr::write_volatile(self.ptr.add(off + i), *b) };
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from Box::into_raw in new() and are freed once.
        unsafe { drop(Box::from_raw(ptr::slice_from_raw_parts_mut(self.ptr, self.len))) };
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

struct Pair {
    a: Fabric,
    b: Fabric,
    mem: Shared,
    mr: MemRegion,
    peer_b: Peer,
    _progress_b: ProgressThread,
}

fn pair(provider: &str) -> Pair {
    pair_with(provider, None, ProgressMode::default())
}

fn pair_with(provider: &str, delivery: Option<Delivery>, mode: ProgressMode) -> Pair {
    let o = OpenOptions { provider: provider.into(), bind: Some("127.0.0.1".into()), delivery };
    let a = Fabric::open_with(&o).unwrap();
    let b = Fabric::open_with(&o).unwrap();
    let mem = Shared::new(1 << 20);
    // SAFETY: mem outlives mr (field order in Pair drops mr first).
    let mr = unsafe { b.register(mem.ptr, mem.len, true, true) }.unwrap();
    let peer_b = a.insert_peer(&b.address()).unwrap();
    let progress_b = b.spawn_progress_thread_with(mode);
    Pair { a, b, mem, mr, peer_b, _progress_b: progress_b }
}

fn write_read(p: Pair) {
    let r = p.mr.remote();
    assert_eq!(r.len, 1 << 20);
    for (off, len, seed) in [(0usize, 8usize, 1u8), (4095, 3000, 2), ((1 << 20) - 8, 8, 3), (12345, 200_000, 4)] {
        let data = pattern(len, seed);
        p.a.write(&p.peer_b, &data, &r, off as u64).unwrap();
        // Visible as soon as write returns, with B doing nothing but its
        // progress thread.
        assert_eq!(p.mem.get(off, len), data, "offset {off}");
        let mut back = vec![0u8; len];
        p.a.read(&p.peer_b, &mut back, &r, off as u64).unwrap();
        assert_eq!(back, data);
    }
    // Reads see the owner's own stores.
    p.mem.set(777, b"owner");
    let mut back = [0u8; 5];
    p.a.read(&p.peer_b, &mut back, &r, 777).unwrap();
    assert_eq!(&back, b"owner");
}

#[test]
fn write_read_rxm() {
    write_read(pair("tcp;ofi_rxm"));
}

#[test]
fn write_read_sockets() {
    write_read(pair("sockets"));
}

#[test]
fn write_read_with_read_fence() {
    let p = pair_with(DEFAULT_PROVIDER, Some(Delivery::ReadAfterWrite), ProgressMode::default());
    assert_eq!(p.a.delivery(), Delivery::ReadAfterWrite);
    write_read(p);
}

#[test]
fn every_progress_mode_serves_the_target() {
    for mode in [ProgressMode::Blocking, ProgressMode::Adaptive(Duration::from_micros(50)), ProgressMode::Polling] {
        let p = pair_with(DEFAULT_PROVIDER, None, mode);
        let r = p.mr.remote();
        for i in 0..50u64 {
            p.a.write(&p.peer_b, &i.to_le_bytes(), &r, 64).unwrap();
            assert_eq!(p.mem.get(64, 8), i.to_le_bytes(), "{mode:?}");
        }
        p.a.send(&p.peer_b, b"hi").unwrap();
        assert_eq!(p.b.recv_timeout(Duration::from_secs(5)).unwrap().data, b"hi", "{mode:?}");
    }
}

/// The delivery guarantee itself: on tcp;ofi_rxm the target's memory is only
/// written when the target progresses, so a write must not return before.
#[test]
fn write_waits_for_delivery() {
    let a = Fabric::open(DEFAULT_PROVIDER, Some("127.0.0.1")).unwrap();
    let b = Fabric::open(DEFAULT_PROVIDER, Some("127.0.0.1")).unwrap();
    assert!(!b.info().auto_progress);
    let mem = Arc::new(Shared::new(4096));
    // SAFETY: mem outlives mr (mr is dropped at the end of this function,
    // and the Arc keeps mem alive at least that long).
    let mr = unsafe { b.register(mem.ptr, mem.len, true, false) }.unwrap();
    let r = mr.remote();
    let peer = Arc::new(a.insert_peer(&b.address()).unwrap());
    // Connect while B progresses, so only the data path is left.
    {
        let _g = b.spawn_progress_thread();
        a.write(&peer, b"warm", &r, 0).unwrap();
    }
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let (a2, peer2) = (a.clone(), peer.clone());
    let writer = std::thread::spawn(move || {
        let res = a2.write(&peer2, b"delivered", &r, 100);
        done_tx.send(()).unwrap();
        res
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(done_rx.try_recv().is_err(), "write returned although the target never progressed");
    assert_eq!(mem.get(100, 9), [0; 9]);
    while done_rx.try_recv().is_err() {
        b.progress();
    }
    writer.join().unwrap().unwrap();
    assert_eq!(mem.get(100, 9), b"delivered");
}

/// Writes posted to complete once sent (no acknowledgement from the target,
/// what an emulated store uses) complete before they are placed, and a read
/// posted after them is served after them (`FI_ORDER_RAW`): its completion
/// is what proves them placed. A refused access, after which the target drops
/// the connection, shows in the failure count that such a proof checks.
#[test]
fn posted_writes_are_placed_before_a_later_read() {
    let a = Fabric::open(DEFAULT_PROVIDER, Some("127.0.0.1")).unwrap();
    let b = Fabric::open(DEFAULT_PROVIDER, Some("127.0.0.1")).unwrap();
    assert!(a.info().reads_follow_writes(), "{:?}", a.info());
    let mem = Arc::new(Shared::new(4096));
    // SAFETY: mem outlives mr (dropped at the end of this function; the Arc
    // keeps mem alive at least that long).
    let mr = unsafe { b.register(mem.ptr, mem.len, true, true) }.unwrap();
    let r = mr.remote();
    let peer = a.insert_peer(&b.address()).unwrap();
    {
        let _g = b.spawn_progress_thread();
        a.write(&peer, b"warm", &r, 0).unwrap();
    }
    let failures = a.failures();
    // B does not progress: nothing can be placed, yet every write completes.
    let writes: Vec<PendingWrite> = (1..=64u64)
        .map(|i| a.write_post_runs(&peer, i.to_le_bytes().to_vec(), &[(0..8, 8 * i)], &r).unwrap())
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !writes.iter().all(|w| a.write_done(w)) {
        assert!(std::time::Instant::now() < deadline, "posted writes did not complete without the target");
        a.progress();
    }
    assert_eq!(mem.get(8, 64 * 8), vec![0u8; 64 * 8], "placed although the target never progressed");
    for w in writes {
        a.write_finish(w).unwrap();
    }
    let _g = b.spawn_progress_thread();
    let mut probe = [0u8; 1];
    a.read(&peer, &mut probe, &r, 64 * 8 + 7).unwrap();
    for i in 1..=64u64 {
        assert_eq!(mem.get(8 * i as usize, 8), i.to_le_bytes(), "write {i} not placed before the read");
    }
    assert_eq!(a.failures(), failures, "no operation failed");
    // A refused access: the target drops the connection, which must show.
    let bad = RemoteRegion { key: r.key ^ 0x5a5a, ..r };
    assert!(a.write(&peer, b"intruder", &bad, 0).is_err());
    assert!(a.failures() > failures, "a refused write is not counted");
}

#[test]
fn unreachable_peer_is_an_error() {
    let a = Fabric::open(DEFAULT_PROVIDER, Some("127.0.0.1")).unwrap();
    let mut addr = a.address();
    // Port 1 on loopback: nobody listens there.
    addr[2] = 0;
    addr[3] = 1;
    let peer = a.insert_peer(&addr).unwrap();
    let r = RemoteRegion { base: 0, key: 1, len: 8 };
    let e = a.write(&peer, b"x", &r, 0).unwrap_err();
    assert!(matches!(e, Error::Unreachable { .. } | Error::Completion { .. }), "{e}");
}

#[test]
fn batched_writes() {
    let p = pair(DEFAULT_PROVIDER);
    let r = p.mr.remote();
    let bufs: Vec<(Vec<u8>, u64)> =
        (0..300u64).map(|i| (pattern(1 + (i as usize * 37) % 3000, i as u8), i * 3333)).collect();
    let runs: Vec<(&[u8], u64)> = bufs.iter().map(|(b, o)| (b.as_slice(), *o)).collect();
    p.a.write_many(&p.peer_b, &runs, &r).unwrap();
    for (b, o) in &bufs {
        assert_eq!(&p.mem.get(*o as usize, b.len()), b);
    }
    // An empty batch is a no-op.
    p.a.write_many(&p.peer_b, &[], &r).unwrap();
}

#[test]
fn batched_reads() {
    let p = pair(DEFAULT_PROVIDER);
    let r = p.mr.remote();
    let want: Vec<(Vec<u8>, u64)> =
        (0..300u64).map(|i| (pattern(1 + (i as usize * 37) % 3000, i as u8), i * 3333)).collect();
    for (b, o) in &want {
        p.mem.set(*o as usize, b);
    }
    let mut bufs: Vec<Vec<u8>> = want.iter().map(|(b, _)| vec![0u8; b.len()]).collect();
    let mut ops: Vec<(&mut [u8], u64)> = bufs.iter_mut().zip(&want).map(|(b, (_, o))| (b.as_mut_slice(), *o)).collect();
    p.a.read_many(&p.peer_b, &mut ops, &r).unwrap();
    for (b, (w, o)) in bufs.iter().zip(&want) {
        assert_eq!(b, w, "offset {o}");
    }
    // An empty batch, and empty buffers in a batch, are no-ops.
    p.a.read_many(&p.peer_b, &mut [], &r).unwrap();
    let mut one = [0u8; 4];
    p.a.read_many(&p.peer_b, &mut [(&mut [][..], 5), (&mut one[..], want[1].1)], &r).unwrap();
    assert_eq!(one[..], want[1].0[..4]);
    // A batch with one bad range reads nothing.
    let mut x = [7u8; 4];
    let mut y = [7u8; 4];
    let e = p.a.read_many(&p.peer_b, &mut [(&mut x[..], 0), (&mut y[..], r.len)], &r).unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
    assert_eq!((x, y), ([7; 4], [7; 4]));
}

/// Memory named by address: writes from and reads into a second shared
/// buffer (as a segment another party writes), never through a slice; a
/// read into memory made from a shared slice is refused.
#[test]
fn writes_and_reads_by_address() {
    let p = pair(DEFAULT_PROVIDER);
    let r = p.mr.remote();
    let local = Shared::new(64 << 10);
    local.set(0, &pattern(64 << 10, 9));
    // SAFETY: `local` lives until the end of the test, past every operation
    // (none is abandoned: the peer is never declared down), and is only
    // reached through raw pointers.
    let all = unsafe { LocalMem::from_raw(local.ptr, local.len) };
    let runs = [(all.sub(0, 4096).unwrap(), 100), (all.sub(4096, 60 << 10).unwrap(), 8192)];
    p.a.write_many_mem(&p.peer_b, &runs, &r).unwrap();
    assert_eq!(p.mem.get(100, 4096), local.get(0, 4096));
    assert_eq!(p.mem.get(8192, 60 << 10), local.get(4096, 60 << 10));
    p.a.write_many_ordered_mem(&p.peer_b, &runs[..1], &[(all.sub(0, 8).unwrap(), 0)], &r).unwrap();
    assert_eq!(p.mem.get(0, 8), local.get(0, 8));
    p.mem.set(300_000, b"from the owner");
    p.a.read_mem(&p.peer_b, all.sub(10, 14).unwrap(), &r, 300_000).unwrap();
    assert_eq!(local.get(10, 14), b"from the owner");
    p.a.read_many_mem(&p.peer_b, &[(all.sub(0, 4).unwrap(), 300_000), (all.sub(30, 5).unwrap(), 300_004)], &r).unwrap();
    assert_eq!((local.get(0, 4), local.get(30, 5)), (b"from".to_vec(), b" the ".to_vec()));
    assert!(all.sub(64 << 10, 1).is_none());
    let shared = [0u8; 4];
    let e = p.a.read_mem(&p.peer_b, LocalMem::from_slice(&shared), &r, 0).unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
}

#[test]
fn out_of_range_is_an_error() {
    let p = pair(DEFAULT_PROVIDER);
    let r = p.mr.remote();
    let e = p.a.write(&p.peer_b, &[1; 16], &r, r.len - 8).unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
    assert!(p.a.write(&p.peer_b, &[1; 16], &r, u64::MAX - 4).is_err());
    let mut buf = [0u8; 16];
    assert!(p.a.read(&p.peer_b, &mut buf, &r, r.len).is_err());
    // A batch with one bad run posts nothing.
    let e = p.a.write_many(&p.peer_b, &[(&[9u8; 4][..], 0), (&[9u8; 4][..], r.len)], &r).unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }));
    assert_eq!(p.mem.get(0, 4), [0; 4]);

    // A forged descriptor gets past our own check; the target must refuse,
    // including a write that straddles the end (no partial write either).
    let forged = RemoteRegion { len: r.len * 4, ..r };
    let e = p.a.write(&p.peer_b, &[1; 16], &forged, r.len + 4096).unwrap_err();
    println!("forged out-of-range write: {e}");
    let e = p.a.read(&p.peer_b, &mut buf, &forged, r.len * 2).unwrap_err();
    println!("forged out-of-range read: {e}");
    assert!(p.a.write(&p.peer_b, &[1; 16], &forged, r.len - 8).is_err());
    assert_eq!(p.mem.get(r.len as usize - 8, 8), [0; 8]);
    // The connection recovers.
    p.a.write(&p.peer_b, b"still fine", &r, 0).unwrap();
    assert_eq!(p.mem.get(0, 10), b"still fine");
}

#[test]
fn wrong_key_is_an_error() {
    let p = pair(DEFAULT_PROVIDER);
    let r = p.mr.remote();
    let bad = RemoteRegion { key: r.key ^ 0x5a5a, ..r };
    let e = p.a.write(&p.peer_b, b"intruder", &bad, 0).unwrap_err();
    println!("wrong-key write: {e}");
    assert!(matches!(e, Error::Completion { .. }), "{e}");
    let mut buf = [0u8; 8];
    let e = p.a.read(&p.peer_b, &mut buf, &bad, 0).unwrap_err();
    println!("wrong-key read: {e}");
    assert_eq!(p.mem.get(0, 8), [0; 8]);
    p.a.write(&p.peer_b, b"rightkey", &r, 0).unwrap();
    assert_eq!(p.mem.get(0, 8), b"rightkey");
}

#[test]
fn deregistered_region_is_refused() {
    let p = pair(DEFAULT_PROVIDER);
    let mem2 = Shared::new(4096);
    // SAFETY: mem2 outlives mr2.
    let mr2 = unsafe { p.b.register(mem2.ptr, mem2.len, true, false) }.unwrap();
    let r2 = mr2.remote();
    assert_ne!(r2.key, p.mr.remote().key);
    p.a.write(&p.peer_b, b"x", &r2, 0).unwrap();
    drop(mr2);
    assert!(p.a.write(&p.peer_b, b"y", &r2, 0).is_err());
    assert_eq!(mem2.get(0, 1), b"x");
}

#[test]
fn read_only_region_refuses_writes() {
    let p = pair(DEFAULT_PROVIDER);
    let mem2 = Shared::new(4096);
    mem2.set(0, b"ro");
    // SAFETY: mem2 outlives mr2.
    let mr2 = unsafe { p.b.register(mem2.ptr, mem2.len, false, true) }.unwrap();
    let e = p.a.write(&p.peer_b, b"no", &mr2.remote(), 0);
    println!("write to read-only region: {e:?}");
    assert!(e.is_err());
    let mut buf = [0u8; 2];
    p.a.read(&p.peer_b, &mut buf, &mr2.remote(), 0).unwrap();
    assert_eq!(&buf, b"ro");
}

fn messages(provider: &str) {
    let p = pair(provider);
    let peer_a = p.b.insert_peer(&p.a.address()).unwrap();
    p.a.send(&p.peer_b, b"ping").unwrap();
    let m = p.b.recv_timeout(Duration::from_secs(5)).expect("b got ping");
    assert_eq!(m.data, b"ping");
    if p.b.info().source {
        assert_eq!(m.from, Some(peer_a.id()));
    }
    p.b.send(&peer_a, b"pong").unwrap();
    // A has no progress thread: recv_timeout polls for itself.
    let m = p.a.recv_timeout(Duration::from_secs(5)).expect("a got pong");
    assert_eq!(m.data, b"pong");
    if p.a.info().source {
        assert_eq!(m.from, Some(p.peer_b.id()));
    }
    // Largest message, and more messages than receive buffers.
    let big = pattern(MAX_MSG, 9);
    p.a.send(&p.peer_b, &big).unwrap();
    assert_eq!(p.b.recv_timeout(Duration::from_secs(5)).unwrap().data, big);
    assert!(matches!(p.a.send(&p.peer_b, &vec![0; MAX_MSG + 1]), Err(Error::MessageTooLarge(_))));
    for i in 0..200u32 {
        p.a.send(&p.peer_b, &i.to_le_bytes()).unwrap();
    }
    for i in 0..200u32 {
        let m = p.b.recv_timeout(Duration::from_secs(5)).expect("message");
        assert_eq!(m.data, i.to_le_bytes());
    }
    assert!(p.b.recv_timeout(Duration::from_millis(50)).is_none());
}

#[test]
fn messages_rxm() {
    messages("tcp;ofi_rxm");
}

#[test]
fn messages_sockets() {
    messages("sockets");
}

#[test]
fn unknown_sender_has_no_id() {
    let p = pair(DEFAULT_PROVIDER);
    p.a.send(&p.peer_b, b"who am i").unwrap();
    let m = p.b.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(m.data, b"who am i");
    assert_eq!(m.from, None);
}

#[test]
fn peers_can_be_removed_and_reinserted() {
    let p = pair(DEFAULT_PROVIDER);
    let r = p.mr.remote();
    let addr = p.b.address();
    let second = p.a.insert_peer(&addr).unwrap();
    p.a.write(&second, b"one", &r, 0).unwrap();
    drop(second);
    p.a.write(&p.peer_b, b"two", &r, 0).unwrap();
    let third = p.a.insert_peer(&addr).unwrap();
    p.a.write(&third, b"six", &r, 0).unwrap();
    assert_eq!(p.mem.get(0, 3), b"six");
    assert!(p.a.insert_peer(&addr[..4]).is_err());
    // A peer of another fabric is refused, not dereferenced.
    let foreign = p.b.insert_peer(&p.a.address()).unwrap();
    assert!(matches!(p.a.write(&foreign, b"x", &r, 0), Err(Error::Invalid(_))));
}

#[test]
fn many_threads_share_one_fabric() {
    let p = Arc::new(pair(DEFAULT_PROVIDER));
    let r = p.mr.remote();
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let p = p.clone();
            std::thread::spawn(move || {
                for i in 0..100u64 {
                    let off = (t as u64) * 200_000 + i * 1000;
                    let data = pattern(1000, t.wrapping_add(i as u8));
                    p.a.write(&p.peer_b, &data, &r, off).unwrap();
                    let mut back = vec![0u8; 1000];
                    p.a.read(&p.peer_b, &mut back, &r, off).unwrap();
                    assert_eq!(back, data);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// `write_many_ordered`: the second group lands after the first. A reader on
/// the target polls a flag that only the second group writes and checks the
/// payload of the first group whenever the flag shows a new value (a single
/// write of payload and flag may show the flag first: the target's memcpy
/// does not store in address order). Both orderings of the provider are
/// exercised: granted WAW (posted back to back) and, on `sockets`, whatever
/// it grants.
fn ordered_writes(provider: &str, messages: u32) {
    let p = pair(provider);
    if provider == DEFAULT_PROVIDER {
        assert!(p.a.info().ordered_writes > 0, "tcp;ofi_rxm grants WAW ordering: {:?}", p.a.info());
    }
    let r = p.mr.remote();
    const LEN: usize = 512;
    let pat =
        |seq: u32| -> Vec<u8> { (0..LEN - 4).map(|i| (i as u32 ^ seq.wrapping_mul(0x9e37_79b1)) as u8).collect() };
    let stop = Arc::new(AtomicBool::new(false));
    // The reader acknowledges each message before the next is written, so
    // a payload it checks is never already the next one.
    let acked = Arc::new(AtomicU32::new(0));
    let base = p.mem.ptr as usize;
    let reader = {
        let stop = stop.clone();
        let acked = acked.clone();
        std::thread::spawn(move || {
            let flag = (base + LEN - 4) as *const AtomicU32;
            let mut seen = 0u32;
            let mut bad = 0u32;
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: the flag word lies inside the registered 1 MiB
                // buffer, 4-byte aligned, alive until the pair is dropped
                // (after this thread is joined); the provider writes it
                // concurrently, hence the atomic load.
                let f = unsafe { &*flag }.load(Ordering::Acquire);
                if f != seen {
                    seen = f;
                    let got: Vec<u8> = (0..LEN - 4)
                        // SAFETY: as above, for the payload bytes below the
                        // flag; volatile, since the provider writes them.
                        .map(|i| unsafe { ptr::read_volatile((base + i) as *const u8) })
                        .collect();
                    if got != pat(f) {
                        bad += 1;
                    }
                    acked.store(f, Ordering::Release);
                }
                std::hint::spin_loop();
            }
            bad
        })
    };
    for seq in 1..=messages {
        let data = pat(seq);
        let flag = seq.to_ne_bytes();
        p.a.write_many_ordered(&p.peer_b, &[(&data, 0)], &[(&flag, (LEN - 4) as u64)], &r).unwrap();
        assert_eq!(p.mem.get(LEN - 4, 4), flag);
        while acked.load(Ordering::Acquire) != seq {
            std::hint::spin_loop();
        }
    }
    stop.store(true, Ordering::Relaxed);
    assert_eq!(reader.join().unwrap(), 0, "the flag showed before its payload");
    // One group empty: a plain write.
    let data = pattern(100, 9);
    p.a.write_many_ordered(&p.peer_b, &[], &[(&data, 4096)], &r).unwrap();
    assert_eq!(p.mem.get(4096, 100), data);
}

#[test]
fn ordered_writes_rxm() {
    ordered_writes(DEFAULT_PROVIDER, 3000);
}

#[test]
fn ordered_writes_sockets() {
    ordered_writes("sockets", 500);
}
