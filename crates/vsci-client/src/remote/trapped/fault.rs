//! The fault path of a trapped map (the parent, `trapped.rs`, says how the
//! map works and keeps its pages, its shadow and its shipments): the
//! handler `vsci_trap` calls in the faulting thread, which emulates a store
//! (`Shadow::emulate`), or fetches the page (and, for a sequential stream
//! of stores, the run after it) and maps it in, marking a stored-to page
//! dirty.

use super::*;

impl Shadow {
    /// A store to a clean or absent page, done without making the page
    /// writable: the faulting instruction is decoded, its bytes written to
    /// the shadow and posted to the owner as an RMA write at once, and the
    /// thread resumes after it. A program that stores a flag, a counter or
    /// a mailbox word so gets it on its way with no fetch, no shipment and
    /// no other thread woken (the twin's way costs a read round trip and a
    /// wake-up of the flusher before the write). Only for maps reached over
    /// this process's RMA endpoint (a group's: every member gets the write
    /// posted, this node's a copy), only plain stores `vsci_trap::emulate`
    /// decodes exactly, only while no map has unshipped stores (they would
    /// arrive after this one), and at most `EMULATE_MAX` per page per
    /// millisecond: a page stored to many times is a page being
    /// filled, which the twin's way ships in one write.
    fn emulate(&self, g: &mut Pages, f: &Fault, p: usize) -> bool {
        if !self.may_emulate(g, p) {
            return false;
        }
        // Where the store goes: the owner, or every member of a group (its
        // remote members by RMA, this node's by copy).
        let (targets, here) = match &self.owner {
            Owner::Rma(t) => (vec![(None, t.clone())], Vec::new()),
            Owner::Group(grp, loopback) => match grp.emulation_targets(*loopback) {
                Some((rma, here)) => (rma.into_iter().map(|(i, t)| (Some(i), t)).collect(), here),
                None => return false,
            },
            Owner::Agent(_) => return false,
        };
        if targets.is_empty() && here.is_empty() {
            return false;
        }
        let Some(st) = f.decode_store(self.page) else {
            // A string store is a whole copy at one fault: no burst to count.
            return match (&targets[..], here.is_empty()) {
                ([(None, target)], true) => self.emulate_rep(g, f, p, target),
                _ => false,
            };
        };
        if !self.emulate_store(g, &targets, &here, &st, p) {
            return false;
        }
        let mut len = st.insn_len;
        if let ([(None, _)], true) = (&targets[..], here.is_empty()) {
            // The stores that follow it, up to the next instruction that
            // is not one (a header, then a flag: compilers put them side
            // by side), are made here too, as the fault of each would make
            // them: no page of any map is dirty while stores are emulated
            // (`may_emulate`), so each would trap. One trap instead of one
            // per store, and the registers need nothing but skipping: a
            // plain store changes no register and no flag. Stores
            // elsewhere, or that this path would not emulate, are left to
            // the CPU.
            let base = self.map_start(f);
            for _ in 0..EMULATE_BURST {
                let Some(next) = f.decode_store_after(len, self.page) else { break };
                let Some(q) = next.addr.checked_sub(base).filter(|&o| o < self.len).map(|o| o / self.page) else {
                    break;
                };
                // One past a burst is the CPU's to store: its fault then
                // takes the twin's way, as without this loop.
                let burst_full = g.burst.0 == q && g.burst.1 >= EMULATE_BURST;
                if burst_full
                    || bit(&g.dirty, q)
                    || !self.may_emulate(g, q)
                    || !self.emulate_store(g, &targets, &here, &next, q)
                {
                    break;
                }
                len += next.insn_len;
            }
        }
        // SAFETY: the effect of the `len` bytes of stores is made (shadow
        // and owner); the thread resumes after them.
        unsafe { f.skip_store(len) };
        true
    }

    /// Make the decoded store `st` into page `p` as `emulate` says: into
    /// the window (one owner) or posted to every target, and into the
    /// shadow. False, with nothing made, when it must take the twin's way.
    fn emulate_store(
        &self,
        g: &mut Pages,
        targets: &[(Option<usize>, Arc<crate::remote::RemoteTarget>)],
        here: &[Arc<crate::dma::SegMem>],
        st: &vsci_trap::emulate::Store,
        p: usize,
    ) -> bool {
        // Stores that trap back to back into one page are one copy (a
        // message being written): the first few are emulated, a longer
        // one takes the twin's way, where every store after the fetch is free.
        // "Back to back" counts from the end of the last emulation: posting
        // a write can hand this core to the owner's engine for a while (on
        // a host whose nodes share cores), which is not the program's gap.
        // A flush point in between ends the copy (the next message starts).
        let (bp, count, last_end, epoch) = g.burst;
        let now_epoch = crate::remote::flush_epoch();
        let same = bp == p && epoch == now_epoch && now_ns().saturating_sub(last_end) < EMULATE_BURST_GAP_NS;
        let count = if same { count.saturating_add(1) } else { 1 };
        g.burst = (p, count, 0, now_epoch);
        if count > EMULATE_BURST {
            // Copies into this page are longer than a burst: take the
            // twin's way at once for the next ones (see `EMULATE_LONG_NS`).
            g.long_copies = (p, now_ns() + EMULATE_LONG_NS);
            return false;
        }
        if st.len > 8 && g.long_copies.0 == p && now_ns() < g.long_copies.1 {
            return false;
        }
        let Some(off) = self.store_offset(st, p) else { return false };
        // An absent page stays absent: the store needs none of the owner's
        // bytes, and the program's next load of the page traps and fetches
        // it, with a read the owner serves after this write (FI_ORDER_RAW).
        // (Fetching it here cost a read round trip and a page on the link
        // per message into a page dropped since the last one.)
        let offset = self.seg_off + off as u64;
        // One owner: the store joins the process's open window of stores
        // into this page (see `combine`), posted with the stores around it.
        let combined = match (targets, here.is_empty()) {
            ([(None, target)], true) => self.combine(target, p, off, &st.bytes[..st.len]),
            _ => false,
        };
        let mut posted = usize::from(combined);
        for (member, target) in targets.iter().filter(|_| !combined) {
            let data = st.bytes[..st.len].to_vec();
            match crate::remote::post_emulated(target, data, offset, member.is_some(), |_| {}) {
                Ok(()) => posted += 1,
                // A group member that cannot take it is dropped, as a
                // failed shipment drops it; the others still get the store.
                Err(e) => match (&self.owner, *member) {
                    (Owner::Group(grp, _), Some(i)) => grp.drop_member(i, &e),
                    _ => {
                        log::debug!("vsci: emulated store not posted ({e}); taking the twin's way");
                        return false;
                    }
                },
            }
        }
        if posted == 0 && here.is_empty() {
            return false;
        }
        if let Some((_, t)) = targets.first().filter(|_| !combined) {
            // The provider's progress is manual: drive it once so the
            // writes leave now rather than at the progress thread's next
            // wake-up.
            t.fabric().progress();
        }
        for mem in here {
            // SAFETY: `off + len` lies inside the group's size, which no
            // member is smaller than; the mapping covers the member's whole
            // segment.
            unsafe { std::ptr::copy_nonoverlapping(st.bytes.as_ptr(), mem.ptr().add(offset as usize), st.len) };
        }
        // SAFETY: `off + len` lies in page `p` of the fill mapping (decode
        // checked one page, and `valid` the end); the program's mapping of
        // the same memfd page is write-protected, so only we write it here.
        unsafe { std::ptr::copy_nonoverlapping(st.bytes.as_ptr(), (self.fill + off) as *mut u8, st.len) };
        g.count_emulated(p);
        g.burst.2 = now_ns();
        self.stored.store(true, Ordering::Release);
        true
    }

    /// The cheap reasons not to emulate a store into page `p`, looked at
    /// first (this runs at every store fault and every `memcpy` into the
    /// map): see `emulate`.
    fn may_emulate(&self, g: &Pages, p: usize) -> bool {
        emulation_on() && !self.check_lost() && g.emulated(p) < EMULATE_MAX && DIRTY_MAPS.load(Ordering::SeqCst) == 0
    }

    /// Put the store of `bytes` at map offset `off` (in page `p`) into the
    /// process's window for this page; false if it takes none.
    fn combine(&self, target: &Arc<crate::remote::RemoteTarget>, p: usize, off: usize, bytes: &[u8]) -> bool {
        let base = self.seg_off + (p * self.page) as u64;
        let map = self as *const Shadow as usize;
        crate::remote::combine::append(target, map, p, self.page, base, off - p * self.page, bytes)
    }

    /// Where a store decoded at a fault in page `p` lands in the shadow (the
    /// decoder keeps it inside that page), if inside the segment's bytes.
    fn store_offset(&self, st: &vsci_trap::emulate::Store, p: usize) -> Option<usize> {
        let off = p * self.page + (st.addr & (self.page - 1));
        (off + st.len <= self.valid).then_some(off)
    }

    /// Make the effect of the faulting store, if it decodes exactly, in
    /// page `p` of the shadow (which the caller made present and dirty),
    /// and resume the thread after it.
    fn complete_store(&self, f: &Fault, p: usize) {
        let Some(st) = f.decode_store(self.page) else { return };
        let Some(off) = self.store_offset(&st, p) else { return };
        // SAFETY: `off + len` lies in page `p` of the fill mapping (decode
        // checked one page, `valid` the end); the program's thread that
        // would store it is stopped in this handler, and the lock we hold
        // keeps the flusher from reading the page meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(st.bytes.as_ptr(), (self.fill + off) as *mut u8, st.len) };
        // SAFETY: the store's effect is made; the thread resumes after it.
        unsafe { f.skip_store(st.insn_len) };
    }

    /// The map's first byte in the program's address space, from a fault
    /// inside it.
    fn map_start(&self, f: &Fault) -> usize {
        (f.addr & !(self.page - 1)) - f.page
    }

    /// A `REP MOVSB` / `REP STOSB` (glibc's `memcpy` and `memset` of 2 KiB
    /// to 1 MiB) into this map, done in one go: the bytes it has left to
    /// store inside the map go into the shadow and out to the owner as one
    /// RMA write, and the thread resumes after the instruction (or goes on
    /// with what lies past the map). One fault and one write for the whole
    /// copy, where the twin's way costs a fault and a read round trip per
    /// run of pages before the shipment. No page is fetched: one not mapped
    /// stays so, and its next load fetches it (the owner's bytes with this
    /// write in them).
    fn emulate_rep(&self, g: &mut Pages, f: &Fault, p: usize, target: &Arc<crate::remote::RemoteTarget>) -> bool {
        let Some(r) = f.decode_rep() else { return false };
        let base = self.map_start(f);
        let n = self.emulate_copy(g, base, &r, p, target);
        if n > 0 {
            // SAFETY: those `n` bytes are stored (shadow and owner, or the
            // window).
            unsafe { f.advance_rep(&r, n) };
        }
        n > 0
    }

    /// Make the first bytes of the copy `r` into this map (whose first byte
    /// is at `base` in the program; `p`: the page of the copy's fault) as
    /// emulated stores, and say how many: `emulate_rep`'s work, for a copy
    /// that faulted or one `memcpy` hands over before it can (`on_copy`).
    /// 0: none made, the CPU makes the copy.
    fn emulate_copy(
        &self,
        g: &mut Pages,
        base: usize,
        r: &vsci_trap::emulate::RepString,
        p: usize,
        target: &Arc<crate::remote::RemoteTarget>,
    ) -> usize {
        let Some(start) = r.dst.checked_sub(base) else { return 0 };
        if start >= self.valid {
            return 0;
        }
        let n = r.count.min(self.valid - start).min(REP_MAX);
        let mut data = crate::remote::spare_buffer(n);
        match r.src {
            Some(src) if r.src_staged => {
                // SAFETY: a staged source is the library's own buffer of at
                // least `r.count >= n` bytes (`RepString::src_staged`),
                // readable and untouched while this copy runs.
                unsafe { vsci_trap::trap::copy_bytes(data.as_mut_ptr(), src as *const u8, n) };
            }
            // The source is read through the kernel, never directly: this
            // runs in the fault handler with the map's lock held, and a
            // source page that faults (another remote map's page not
            // fetched yet, a truncated file, a guard page some runtime
            // handles itself) must come back as a short read, never as a
            // nested fault here. A source that cannot be read so is left to
            // the CPU, which faults at the program's own instruction.
            Some(src) => {
                if vsci_sys::mman::read_own(src, &mut data) != n {
                    crate::remote::keep_buffer(data);
                    return 0;
                }
            }
            None => data.fill(r.value),
        }
        let offset = self.seg_off + start as u64;
        let page = start / self.page;
        if n > 0 && n <= crate::remote::combine::COPY_MAX && self.combine(target, page, start, &data) {
            // A short copy inside one page or across into the next (a small
            // message's payload) joins the window (`combine::append` takes
            // no more than two pages).
            // SAFETY: `start + n` lies inside the map's valid bytes, all in
            // the fill mapping; the program's pages of it are
            // write-protected or absent, so only we write them here.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), (self.fill + start) as *mut u8, n) };
            crate::remote::keep_buffer(data);
            g.count_emulated(p);
            g.burst.2 = now_ns();
            self.stored.store(true, Ordering::Release);
            return n;
        }
        // The shadow takes the bytes from the write's own buffer (the
        // provider only reads it): one copy of the data, not two.
        let into_shadow = |bytes: &[u8]| {
            // SAFETY: `start + n` lies inside the map's valid bytes, all in
            // the fill mapping; the program's pages of it are write-protected
            // or absent, so only we write them here.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), (self.fill + start) as *mut u8, n) }
        };
        if let Err(e) = crate::remote::post_emulated(target, data, offset, false, into_shadow) {
            log::debug!("vsci: string store not posted ({e}); taking the twin's way");
            return 0;
        }
        target.fabric().progress();
        g.count_emulated(p);
        g.burst.2 = now_ns();
        self.stored.store(true, Ordering::Release);
        n
    }

    /// Fetch pages `p..p + count` from the owner into their twin and the
    /// shadow, in one read. On a failure the map is marked failed and the
    /// pages left as they are.
    fn fetch(&self, g: &mut Pages, p: usize, count: usize) -> bool {
        let n = self.valid.saturating_sub(p * self.page).min(count * self.page);
        let twin = g.twin.slice_mut(p * self.page, count * self.page);
        if n > 0 {
            let t0 = now_ns();
            match self.owner.read_direct(&mut twin[..n], self.seg_off + (p * self.page) as u64) {
                Ok(()) => self.note_fetch(now_ns().saturating_sub(t0)),
                Err(e) => {
                    self.failed.store(true, Ordering::SeqCst);
                    g.abandon_twin(&e);
                    return false;
                }
            }
        }
        for q in p..p + count {
            let twin = g.twin.slice(q * self.page, self.page);
            self.fill_page(q).copy_from_slice(twin);
        }
        true
    }

    /// A fetch took `ns`. Through a guest's host side a round trip is a
    /// control message each way, milliseconds under software emulation,
    /// where 20 µs of quiet is a few dozen of the program's stores: a page
    /// being filled byte by byte was shipped, write-protected and fetched
    /// again at its next store every few dozen bytes (a guest's 2 MiB write
    /// took 40,000 fetch-and-ship rounds and minutes). Waiting for quiet at
    /// least twice the round trip keeps the program storing for two thirds
    /// of the time at the worst. Not for this process's own RMA maps: there
    /// a store fault is tens of µs and the settle time is what bounds how
    /// late a store made with no call arrives.
    fn note_fetch(&self, ns: u64) {
        if !self.via_agent {
            return;
        }
        // A moving average (1/4 new): one slow round trip (the host was
        // busy) does not hold shipments back for long.
        let old = self.settle_floor.load(Ordering::Relaxed);
        let new = (2 * ns).min(self.stream_cap / 2);
        let avg = if old == 0 { new } else { old - old / 4 + new / 4 };
        self.settle_floor.store(avg, Ordering::Relaxed);
    }

    /// Which pages a store fault on clean page `p` fetches and makes
    /// writable (first page, count; the run holds `p`): more than `p` only
    /// when the program writes through the map in address order, up or
    /// down — the page next to `p` on one side is dirty, or `p` is where a
    /// stream through the last run would go on (in the stream's direction:
    /// the next message written into the same pages is not a stream). A
    /// `memcpy` is such
    /// a stream (glibc copies large blocks downwards when source and
    /// destination are equally aligned within their pages), as is a ring
    /// being filled. Each store fault costs one owner read, so a stream of
    /// 4 KiB faults runs at one page per read round trip; taking the next
    /// pages in the direction of the stream in the same read (2, 4, … up
    /// to `STREAM_AHEAD_MAX` as the stream goes on) makes it one round trip
    /// per run. Those pages are fetched at this fault rather than at their
    /// own first store: docs/design.md ("Remote nodes") says what that
    /// changes. A run stops before a dirty page (it may hold stores not yet
    /// shipped) and at either end of the segment.
    fn stream_run(&self, g: &mut Pages, p: usize) -> (usize, usize) {
        let npages = self.len / self.page;
        let edge = |up: bool| g.stream_edges.contains(&Some((p, up)));
        let up = (p > 0 && bit(&g.dirty, p - 1)) || edge(true);
        let down = !up && ((p + 1 < npages && bit(&g.dirty, p + 1)) || edge(false));
        if !up && !down {
            g.ahead = 1;
            g.stream_edges = [Some((p + 1, true)), p.checked_sub(1).map(|e| (e, false))];
            self.in_stream.store(false, Ordering::Release);
            return (p, 1);
        }
        g.ahead = (g.ahead * 2).clamp(2, STREAM_AHEAD_MAX);
        let open = |q: usize| self.page_valid(q) > 0 && !bit(&g.dirty, q);
        let (first, n) = if up {
            let mut n = 1;
            while n < g.ahead && p + n < npages && open(p + n) {
                n += 1;
            }
            (p, n)
        } else {
            let mut n = 1;
            while n < g.ahead && n <= p && open(p - n) {
                n += 1;
            }
            (p + 1 - n, n)
        };
        g.stream_edges = [if up { Some((first + n, true)) } else { first.checked_sub(1).map(|e| (e, false)) }, None];
        // Background shipments wait for a long stream to pause (see
        // `ship_due`) only from its third run on: a message of a few pages
        // (a payload, then a flag in its last page) must ship after the
        // settle time like any store.
        self.in_stream.store(g.ahead >= STREAM_LONG, Ordering::Release);
        (first, n)
    }

    /// Make pages `from..to` (fetched ahead of a stream, not dirty)
    /// writable in the program's mapping and dirty: one call per run of
    /// pages alike (mapped already, or not), not one per page (a 32-page
    /// run took about 60 µs page by page).
    fn open_ahead(&self, trap: &Trap, g: &mut Pages, from: usize, to: usize) {
        let mut q = from;
        while q < to {
            let present = bit(&g.present, q);
            let mut end = q + 1;
            while end < to && bit(&g.present, end) == present {
                end += 1;
            }
            let (off, len) = (q * self.page, (end - q) * self.page);
            if present {
                let _ = trap.unprotect(off, len);
            } else if let Err(e) = trap.map_in(off, len, false) {
                // The fetch wrote the pages through the fill mapping, so
                // they exist in the memfd; leave them absent (their first
                // access traps and handles them) rather than dirty and
                // unmapped.
                log::debug!("vsci: pages ahead of a stream not mapped ({e})");
                q = end;
                continue;
            }
            for r in q..end {
                if !present {
                    let Pages { present, present_list, .. } = &mut *g;
                    set(present, present_list, r);
                }
                let Pages { dirty, dirty_list, .. } = &mut *g;
                set(dirty, dirty_list, r);
            }
            q = end;
        }
    }
}

impl TrapHandler for Shadow {
    /// A `memcpy` or `memmove` into this map (libsisci's, `sisci::interpose`),
    /// made as the fault handler makes the string store that would fault
    /// (`emulate_rep`), but before it faults: one trap less per copy, a
    /// third of an 8-byte message's (payload, header, flag). Only where the
    /// copy would be emulated at its fault; and no page is dirty then
    /// (`may_emulate` wants no map with unshipped stores), so the copy's
    /// pages are all write-protected or absent, as at such a fault.
    fn on_copy(&self, trap: &Trap, r: &vsci_trap::emulate::RepString) -> usize {
        let Owner::Rma(target) = &self.owner else { return 0 };
        let p = (r.dst - trap.base()) / self.page;
        let mut g = self.lock();
        if !self.may_emulate(&g, p) {
            return 0;
        }
        self.faults.fetch_add(1, Ordering::Relaxed);
        self.emulate_copy(&mut g, trap.base(), r, p, target)
    }

    fn on_fault(&self, trap: &Trap, f: Fault) {
        self.faults.fetch_add(1, Ordering::Relaxed);
        self.check_lost();
        let mut g = self.lock();
        let p = f.page / self.page;
        let dirty = bit(&g.dirty, p);
        // Emulated stores still on their way need no wait before the fetch
        // below: the owner serves a read after every write this process
        // posted to it before (FI_ORDER_RAW).
        if f.write && !dirty && self.emulate(&mut g, &f, p) {
            return;
        }
        // Stores combined before this fault go first (its fetch is served
        // after them, its page's shipment placed after them).
        crate::remote::combine::close();
        let (first, run) = if f.write && !dirty { self.stream_run(&mut g, p) } else { (p, 1) };
        // Never fetch over a dirty page: it may hold stores not yet shipped.
        if !dirty && !self.failed.load(Ordering::Relaxed) {
            self.fetch(&mut g, first, run);
        }
        if self.failed.load(Ordering::Relaxed) {
            // Nowhere to fetch from: let the access complete on what the
            // shadow holds (its page must exist in the memfd to be mapped).
            self.allocate(p);
        }
        let off = p * self.page;
        if f.present != Some(true) {
            if let Err(e) = trap.map_in(off, self.page, !f.write && !dirty) {
                // Only a page missing from the memfd fails here; the access
                // would trap again for ever. Make it exist and try once more.
                self.allocate(p);
                if let Err(e2) = trap.map_in(off, self.page, !f.write && !dirty) {
                    log::error!("vsci: cannot map a page of a remote map ({e}, then {e2})");
                }
            }
            let Pages { present, present_list, .. } = &mut *g;
            set(present, present_list, p);
        }
        if f.write {
            if f.present != Some(false) {
                let _ = trap.unprotect(off, self.page);
            }
            let Pages { dirty, dirty_list, .. } = &mut *g;
            if dirty_list.is_empty() {
                self.oldest_dirty.store(now_ns(), Ordering::Release);
            }
            set(dirty, dirty_list, p);
            self.stored.store(true, Ordering::Release);
            if !self.failed.load(Ordering::Relaxed) {
                self.open_ahead(trap, &mut g, first, p);
                self.open_ahead(trap, &mut g, p + 1, first + run);
            }
        }
        if f.write {
            // The store that faulted is done here, under the lock, when it
            // decodes: between this handler's return and the CPU retrying
            // it, the flusher may ship the page (finding nothing new),
            // write-protect it and drop it as clean, and the retry then
            // faults again, for ever — a guest's vCPU under software
            // emulation on a busy host, or any thread preempted there, saw
            // every retry lose that race (the same page fetched 30,000
            // times in a minute). Done, the store is in the shadow of a
            // dirty page, which the next shipment diffs and sends.
            self.complete_store(&f, p);
            // Before the lock goes: a shipment waiting for it must see this
            // fault (see `ship_due`).
            self.last_write_fault.store(now_ns(), Ordering::Release);
        }
        g.count_dirty();
        drop(g);
        if f.write {
            crate::remote::wake_flusher();
        }
    }
}
