//! DMA channels (`SCIRequestDMAChannel`), for the queues of `dma.rs`, the
//! parent.
//!
//! On Dolphin hardware a channel is one of the adapter's (or the system's)
//! DMA engines, which a program reserves and assigns to its queues. vsci's
//! engine is software: every queue has its own worker thread, so queues run
//! side by side. A vsci channel is a token for one engine's worth of
//! concurrency: the transfers of all queues assigned to one channel run one
//! job at a time, in the order they reach it, as they would on one hardware
//! engine; queues without a channel are not limited. A process holds at most
//! `DMA_CHANNELS` channels, numbered `0..DMA_CHANNELS`; a channel requested
//! as shared (`SCI_FLAG_DMA_CHANNEL_SHARED`) can be held by several
//! requesters at once, all of them shared.

use super::*;

/// The engine a channel stands for: one job at a time.
pub struct ChannelCore {
    pub id: u32,
    busy: Mutex<bool>,
    freed: std::sync::Condvar,
}

/// Held while a job runs on a channel.
pub(super) struct EngineGuard<'a>(&'a ChannelCore);

impl Drop for EngineGuard<'_> {
    fn drop(&mut self) {
        *self.0.busy.lock().unwrap() = false;
        self.0.freed.notify_one();
    }
}

impl ChannelCore {
    /// Take the engine, or give up (`None`) once `abort` is set: a job
    /// waiting for its channel must still obey SCIAbortDMAQueue.
    pub(super) fn acquire<'a>(&'a self, abort: &AtomicBool) -> Option<EngineGuard<'a>> {
        let mut busy = self.busy.lock().unwrap();
        while *busy {
            if abort.load(SeqCst) {
                return None;
            }
            busy = self.freed.wait_timeout(busy, std::time::Duration::from_millis(1)).unwrap().0;
        }
        *busy = true;
        Some(EngineGuard(self))
    }
}

struct ChannelSlot {
    core: Weak<ChannelCore>,
    holders: u32,
    shared: bool,
}

static CHANNEL_SLOTS: Mutex<Vec<Option<ChannelSlot>>> = Mutex::new(Vec::new());

/// One program's hold on a channel (`sci_dma_channel_t`); returned on drop.
pub struct DmaChannel {
    pub(super) core: Arc<ChannelCore>,
    /// `sci_dma_type_t` the program asked for (every type is the one engine).
    pub kind: u32,
    /// Segments prepared for DMA on this channel (`SCIPrepare*SegmentForDMA`):
    /// the engine's mappings of them, made at prepare time so the first
    /// transfer takes no `mmap`; dropped by unprepare or when the channel is
    /// returned.
    prepared: Mutex<Vec<(usize, Option<Arc<SegMem>>)>>,
}

impl DmaChannel {
    /// Reserve channel `id` (or the lowest free one for `None`). An id held
    /// by others is `SCI_ERR_BUSY` unless both sides ask to share it; an id
    /// outside `0..DMA_CHANNELS` is `SCI_ERR_ILLEGAL_PARAMETER`; no free
    /// channel is `SCI_ERR_NOSPC`.
    pub fn request(id: Option<u32>, shared: bool, kind: u32) -> Result<DmaChannel> {
        let mut slots = CHANNEL_SLOTS.lock().unwrap();
        if slots.is_empty() {
            slots.resize_with(DMA_CHANNELS as usize, || None);
        }
        // A slot whose holders all went away without returning it (their
        // handles were dropped) is free again.
        for s in slots.iter_mut() {
            if s.as_ref().is_some_and(|x| x.core.strong_count() == 0) {
                *s = None;
            }
        }
        let pick = match id {
            Some(i) if i >= DMA_CHANNELS => return Err(SciError::IllegalParameter),
            Some(i) => i as usize,
            None => match slots.iter().position(|s| s.is_none()) {
                Some(i) => i,
                None if shared => {
                    slots.iter().position(|s| s.as_ref().is_some_and(|x| x.shared)).ok_or(SciError::Nospc)?
                }
                None => return Err(SciError::Nospc),
            },
        };
        let core = match &mut slots[pick] {
            Some(s) => {
                if !(shared && s.shared) {
                    return Err(SciError::Busy);
                }
                let core = s.core.upgrade().ok_or(SciError::Busy)?;
                s.holders += 1;
                core
            }
            slot @ None => {
                let core = Arc::new(ChannelCore {
                    id: pick as u32,
                    busy: Mutex::new(false),
                    freed: std::sync::Condvar::new(),
                });
                *slot = Some(ChannelSlot { core: Arc::downgrade(&core), holders: 1, shared });
                core
            }
        };
        Ok(DmaChannel { core, kind, prepared: Mutex::new(Vec::new()) })
    }

    pub fn id(&self) -> u32 {
        self.core.id
    }

    /// Prepare a local segment for DMA on this channel: map it in the
    /// engine now.
    pub fn prepare_local(&self, s: &Arc<LocalSegment>) -> Result<()> {
        let key = Arc::as_ptr(s) as usize;
        let mem = if s.client().is_guest() { None } else { Some(seg_mem_local(s)?) };
        self.remember(key, mem);
        Ok(())
    }

    /// Prepare a connected segment for DMA on this channel: a co-located one
    /// is mapped in the engine now; one of another node needs nothing (the
    /// RMA engine reaches its registered memory), but must still be there.
    pub fn prepare_remote(&self, s: &Arc<RemoteSegment>) -> Result<()> {
        if s.is_lost() {
            return Err(SciError::SegmentNotConnected);
        }
        let key = Arc::as_ptr(s) as usize;
        let mem = if !s.is_remote() && !s.client().is_guest() { Some(seg_mem_remote(s)?) } else { None };
        self.remember(key, mem);
        Ok(())
    }

    fn remember(&self, key: usize, mem: Option<Arc<SegMem>>) {
        let mut p = self.prepared.lock().unwrap();
        if !p.iter().any(|(k, _)| *k == key) {
            p.push((key, mem));
        }
    }

    /// Undo a prepare (of `segment`, a local or remote segment object);
    /// unpreparing what was not prepared does nothing.
    pub fn unprepare<T>(&self, segment: &Arc<T>) {
        let key = Arc::as_ptr(segment) as usize;
        self.prepared.lock().unwrap().retain(|(k, _)| *k != key);
        prune_cache();
    }
}

impl Drop for DmaChannel {
    fn drop(&mut self) {
        self.prepared.lock().unwrap().clear();
        let mut slots = CHANNEL_SLOTS.lock().unwrap();
        if let Some(slot) = slots.get_mut(self.core.id as usize) {
            if let Some(s) = slot {
                s.holders = s.holders.saturating_sub(1);
                if s.holders == 0 {
                    *slot = None;
                }
            }
        }
        drop(slots);
        prune_cache();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The channel pool: ids, exclusivity, sharing, exhaustion, return, and
    /// one job at a time per channel. (One test: the pool is per process.)
    #[test]
    fn channel_pool_and_engine() {
        let a = DmaChannel::request(None, false, 1).unwrap();
        assert_eq!(a.id(), 0);
        assert_eq!(DmaChannel::request(Some(0), false, 1).err(), Some(SciError::Busy));
        assert_eq!(DmaChannel::request(Some(0), true, 1).err(), Some(SciError::Busy));
        assert_eq!(DmaChannel::request(Some(DMA_CHANNELS), false, 1).err(), Some(SciError::IllegalParameter));
        let s1 = DmaChannel::request(Some(5), true, 3).unwrap();
        let s2 = DmaChannel::request(Some(5), true, 3).unwrap();
        assert!(Arc::ptr_eq(&s1.core, &s2.core));
        assert_eq!(DmaChannel::request(Some(5), false, 3).err(), Some(SciError::Busy));
        let rest: Vec<DmaChannel> =
            (0..DMA_CHANNELS - 2).map(|_| DmaChannel::request(None, false, 4).unwrap()).collect();
        assert_eq!(DmaChannel::request(None, false, 4).err(), Some(SciError::Nospc));
        // A shared request with no free id joins a shared one.
        let s3 = DmaChannel::request(None, true, 4).unwrap();
        assert_eq!(s3.id(), 5);
        drop((s1, s2, s3));
        // Id 5 is free again once its last holder returned it.
        let again = DmaChannel::request(None, false, 4).unwrap();
        assert_eq!(again.id(), 5);

        // One job at a time; a waiting job gives up on abort.
        let core = a.core.clone();
        let abort = AtomicBool::new(false);
        let held = core.acquire(&abort).unwrap();
        std::thread::scope(|s| {
            let t = s.spawn(|| core.acquire(&abort).is_none());
            std::thread::sleep(std::time::Duration::from_millis(20));
            abort.store(true, SeqCst);
            assert!(t.join().unwrap(), "a waiting job must give up when aborted");
        });
        drop(held);
        abort.store(false, SeqCst);
        assert!(core.acquire(&abort).is_some());
        drop((a, rest, again));
    }
}
