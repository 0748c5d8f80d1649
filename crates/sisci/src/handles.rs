//! The handle table: every SISCI handle a program holds is a token looked up
//! here, never a pointer we dereference. A NULL, forged, stale or
//! wrong-kind handle is simply not found and the call fails with
//! `SCI_ERR_ILLEGAL_PARAMETER` instead of touching memory.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use vsci_client::{
    Client, DmaChannel, DmaQueue, LocalInterrupt, LocalSegment, Map, RemoteInterrupt, RemoteSegment, SciError,
};

pub struct Sequence {
    pub map: Arc<Map>,
}

pub struct Desc {
    pub client: Client,
}

/// A local interrupt and, if it has one, the state of its callback thread.
pub struct LocalIntr {
    pub intr: Arc<LocalInterrupt>,
    pub callback_active: Arc<AtomicBool>,
}

#[derive(Clone)]
pub enum Obj {
    Desc(Arc<Desc>),
    LocalSeg(Arc<LocalSegment>),
    RemoteSeg(Arc<RemoteSegment>),
    Map(Arc<Map>),
    Seq(Arc<Sequence>),
    LocalIntr(Arc<LocalIntr>),
    RemoteIntr(Arc<RemoteInterrupt>),
    LocalDataIntr(Arc<LocalIntr>),
    RemoteDataIntr(Arc<RemoteInterrupt>),
    DmaQueue(Arc<DmaQueue>),
    DmaChannel(Arc<DmaChannel>),
}

#[derive(Clone)]
pub struct Entry {
    pub obj: Obj,
    /// The descriptor this object was made through (0 for descriptors).
    pub desc: usize,
}

#[derive(Default)]
pub struct Table {
    pub entries: HashMap<usize, Entry>,
}

static TABLE: RwLock<Option<Table>> = RwLock::new(None);

/// Handles look like pointers (non-zero, 16-byte aligned, above the first
/// page) but are never reused, so a stale handle cannot alias a new object.
static NEXT: AtomicUsize = AtomicUsize::new(0x7a5c_1000);

pub fn insert(obj: Obj, desc: usize) -> usize {
    let h = NEXT.fetch_add(16, Ordering::Relaxed);
    let mut t = TABLE.write().unwrap_or_else(|p| p.into_inner());
    t.get_or_insert_with(Table::default).entries.insert(h, Entry { obj, desc });
    h
}

pub fn get(h: usize) -> Option<Entry> {
    let t = TABLE.read().unwrap_or_else(|p| p.into_inner());
    t.as_ref()?.entries.get(&h).cloned()
}

pub fn remove(h: usize) -> Option<Entry> {
    let mut t = TABLE.write().unwrap_or_else(|p| p.into_inner());
    t.as_mut()?.entries.remove(&h)
}

/// Remove and return every object made through descriptor `desc`.
pub fn remove_children(desc: usize) -> Vec<(usize, Entry)> {
    let mut t = TABLE.write().unwrap_or_else(|p| p.into_inner());
    let Some(t) = t.as_mut() else { return Vec::new() };
    let keys: Vec<usize> = t.entries.iter().filter(|(_, e)| e.desc == desc).map(|(k, _)| *k).collect();
    keys.into_iter().filter_map(|k| t.entries.remove(&k).map(|e| (k, e))).collect()
}

/// Every descriptor handle.
pub fn descriptors() -> Vec<usize> {
    let t = TABLE.read().unwrap_or_else(|p| p.into_inner());
    t.as_ref()
        .map(|t| t.entries.iter().filter(|(_, e)| matches!(e.obj, Obj::Desc(_))).map(|(k, _)| *k).collect())
        .unwrap_or_default()
}

/// Find the live map of this process that contains `[p, p+n)`.
pub fn map_containing(p: usize, n: usize) -> Option<Arc<Map>> {
    let t = TABLE.read().unwrap_or_else(|p| p.into_inner());
    t.as_ref()?.entries.values().find_map(|e| match &e.obj {
        Obj::Map(m) if m.contains(p, n) => Some(m.clone()),
        _ => None,
    })
}

/// Typed lookups: the wrong kind of handle is as invalid as a forged one.
macro_rules! getter {
    ($fn:ident, $variant:ident, $t:ty) => {
        pub fn $fn(h: usize) -> Result<$t, SciError> {
            match get(h) {
                Some(Entry { obj: Obj::$variant(x), .. }) => Ok(x),
                _ => Err(SciError::IllegalParameter),
            }
        }
    };
}

getter!(desc, Desc, Arc<Desc>);
getter!(local_seg, LocalSeg, Arc<LocalSegment>);
getter!(remote_seg, RemoteSeg, Arc<RemoteSegment>);
getter!(map, Map, Arc<Map>);
getter!(seq, Seq, Arc<Sequence>);
getter!(local_intr, LocalIntr, Arc<LocalIntr>);
getter!(remote_intr, RemoteIntr, Arc<RemoteInterrupt>);
getter!(local_data_intr, LocalDataIntr, Arc<LocalIntr>);
getter!(remote_data_intr, RemoteDataIntr, Arc<RemoteInterrupt>);
getter!(dma_queue, DmaQueue, Arc<DmaQueue>);
getter!(dma_channel, DmaChannel, Arc<DmaChannel>);

/// Every live DMA queue of this process.
pub fn dma_queues() -> Vec<Arc<DmaQueue>> {
    let t = TABLE.read().unwrap_or_else(|p| p.into_inner());
    t.as_ref()
        .map(|t| {
            t.entries
                .values()
                .filter_map(|e| if let Obj::DmaQueue(q) = &e.obj { Some(q.clone()) } else { None })
                .collect()
        })
        .unwrap_or_default()
}

// Orphans: handles whose object SCIClose or SCITerminate released while
// the program still held the handle. Dolphin's library keeps a handle's
// user-space state until the program's own release call, so programs
// written for it (GASNet's SISCI conduit, message-passing layers) close
// their descriptors, call SCITerminate, and only then remove their queues,
// maps, sequences and segments, looping until each call returns
// SCI_ERR_OK. The object is gone already; the first release call of the
// right kind that names an orphan succeeds and forgets it, after which the
// handle is an ordinary released one (SCI_ERR_ILLEGAL_PARAMETER, as any
// handle released twice). Handles are never reused (see NEXT), so an orphan
// cannot alias a live object, and one of the wrong kind is refused like any
// wrong-kind handle.
//
// Keyed by handle, which grows with age: past MAX_ORPHANS the oldest are
// forgotten, so a program that closes descriptors in a loop and never
// releases their children does not grow without bound.
static ORPHANS: Mutex<BTreeMap<usize, Kind>> = Mutex::new(BTreeMap::new());

/// How many orphans are remembered (about 40 MiB at most).
const MAX_ORPHANS: usize = 1 << 20;

/// What kind of object a handle named.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Desc,
    LocalSeg,
    RemoteSeg,
    Map,
    Seq,
    LocalIntr,
    RemoteIntr,
    LocalDataIntr,
    RemoteDataIntr,
    DmaQueue,
    DmaChannel,
}

impl Obj {
    pub fn kind(&self) -> Kind {
        match self {
            Obj::Desc(_) => Kind::Desc,
            Obj::LocalSeg(_) => Kind::LocalSeg,
            Obj::RemoteSeg(_) => Kind::RemoteSeg,
            Obj::Map(_) => Kind::Map,
            Obj::Seq(_) => Kind::Seq,
            Obj::LocalIntr(_) => Kind::LocalIntr,
            Obj::RemoteIntr(_) => Kind::RemoteIntr,
            Obj::LocalDataIntr(_) => Kind::LocalDataIntr,
            Obj::RemoteDataIntr(_) => Kind::RemoteDataIntr,
            Obj::DmaQueue(_) => Kind::DmaQueue,
            Obj::DmaChannel(_) => Kind::DmaChannel,
        }
    }
}

/// Remember that the objects behind `hs` were released by SCIClose or
/// SCITerminate while the program still holds their handles.
pub fn orphan(hs: impl IntoIterator<Item = (usize, Kind)>) {
    let mut o = ORPHANS.lock().unwrap_or_else(|p| p.into_inner());
    o.extend(hs);
    while o.len() > MAX_ORPHANS {
        o.pop_first();
    }
}

/// Is `h` an orphan of kind `kind`? If so, forget it: this is its release.
pub fn take_orphan(h: usize, kind: Kind) -> bool {
    let mut o = ORPHANS.lock().unwrap_or_else(|p| p.into_inner());
    if o.get(&h) == Some(&kind) {
        o.remove(&h);
        true
    } else {
        false
    }
}

/// Is `h` an orphan of kind `kind` (kept: the call is not its release)?
pub fn is_orphan(h: usize, kind: Kind) -> bool {
    let o = ORPHANS.lock().unwrap_or_else(|p| p.into_inner());
    o.get(&h) == Some(&kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test, as ORPHANS is global: kinds, one release each, and the cap
    /// dropping the oldest.
    #[test]
    fn orphans_are_released_once_by_their_own_kind() {
        let base = 0x1_0000_0000usize;
        orphan([(base, Kind::Map), (base + 16, Kind::Seq)]);
        assert!(!take_orphan(base, Kind::Seq), "a sequence release must not take a map");
        assert!(is_orphan(base, Kind::Map));
        assert!(take_orphan(base, Kind::Map));
        assert!(!take_orphan(base, Kind::Map), "released once only");
        assert!(!is_orphan(base, Kind::Map));
        assert!(take_orphan(base + 16, Kind::Seq));

        // Past the cap the oldest (smallest) handles go first.
        let n = MAX_ORPHANS + 3;
        orphan((0..n).map(|i| (base + 16 * i, Kind::Desc)));
        assert!(!is_orphan(base, Kind::Desc));
        assert!(!is_orphan(base + 32, Kind::Desc));
        assert!(is_orphan(base + 48, Kind::Desc));
        assert!(is_orphan(base + 16 * (n - 1), Kind::Desc));
        ORPHANS.lock().unwrap().clear();
    }
}
