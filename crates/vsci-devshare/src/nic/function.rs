//! One function of the NIC (a VF) at work: the register writes of its
//! assignment, the descriptor rings it reads and writes back, transmit and
//! receive through the function's IOMMU context, the receive FIFO, and the
//! interrupts it raises. The device, its wire, the switch between
//! functions and the platform manager are in `nic.rs`, the parent.

use super::*;

impl Function {
    fn fault(&mut self, what: std::fmt::Arguments<'_>) {
        self.stats.faults += 1;
        // Logged per fault up to 20, then every 1000th: a VM that keeps
        // faulting must not flood the log.
        if self.stats.faults <= 20 || self.stats.faults.is_multiple_of(1000) {
            warn!("IOMMU fault #{} of function {}: {what}; nothing moved", self.stats.faults, self.index);
        }
    }

    fn refuse(&mut self, what: std::fmt::Arguments<'_>) {
        self.stats.refused += 1;
        if self.stats.refused <= 20 || self.stats.refused.is_multiple_of(1000) {
            warn!("refused (function {}): {what}", self.index);
        }
    }

    pub(super) fn apply(&mut self, writes: &[(u32, u64)], dev: &Device, out: &mut Deliveries) {
        let (mut tx, mut rx) = (false, false);
        for &(off, val) in writes {
            let remap = &self.asg.as_ref().expect("checked by the caller").remap;
            if let Err(why) = regs::check_write(off, val, remap) {
                self.refuse(format_args!("{why}"));
                continue;
            }
            let a = self.asg.as_mut().expect("checked by the caller");
            let r = &mut a.regs;
            match off {
                regs::CTRL => r.ctrl = val,
                regs::TX_BASE => r.tx_base = val,
                regs::RX_BASE => r.rx_base = val,
                regs::TX_LEN => {
                    (r.tx_len, r.tx_tail, a.tx_head, a.tx_push_next) = (val as u32, 0, 0, 0);
                    a.tx_pushed.clear();
                    a.tx_inline.clear();
                }
                regs::TX_INLINE => {
                    if a.tx_inline.len() >= MAX_FRAME {
                        self.refuse(format_args!("more than {MAX_FRAME} inline bytes before a push"));
                        continue;
                    }
                    a.tx_inline.extend_from_slice(&val.to_le_bytes());
                }
                regs::RX_PUSH_LEN => a.rx_push_len = val.min(u64::from(u32::MAX)) as u32,
                regs::RX_PUSH => {
                    let (addr, count) = regs::rx_pushed(val);
                    let ring = r.rx_len;
                    if a.rx_pushed.len() + count as usize > ring as usize {
                        self.refuse(format_args!("{count} pushed receive buffers beyond the ring's {ring} entries"));
                        continue;
                    }
                    let blen = a.rx_push_len;
                    for k in 0..count {
                        let d = Desc { addr: addr.wrapping_add(u64::from(k) * u64::from(blen)), len: blen, status: 0 };
                        a.rx_pushed.push_back((a.rx_push_next, d));
                        a.rx_push_next = a.rx_push_next.wrapping_add(1);
                    }
                }
                regs::TX_PUSH => {
                    let ring = r.tx_len;
                    if a.tx_pushed.len() >= ring as usize {
                        self.refuse(format_args!("a pushed transmit descriptor beyond the ring's {ring} entries"));
                        continue;
                    }
                    let (desc, inline) = regs::pushed(val);
                    let bytes = std::mem::take(&mut a.tx_inline);
                    let inline = inline.then(|| {
                        if bytes.len() >= desc.len as usize {
                            Ok(bytes[..desc.len as usize].to_vec())
                        } else {
                            Err(bytes.len())
                        }
                    });
                    a.tx_pushed.push_back(Pushed { idx: a.tx_push_next, desc, inline });
                    a.tx_push_next = a.tx_push_next.wrapping_add(1);
                }
                regs::RX_LEN => {
                    (r.rx_len, r.rx_tail, a.rx_fetched) = (val as u32, 0, 0);
                    a.rx_ready.clear();
                    a.rx_fifo.clear();
                    a.rx_pushed.clear();
                    a.rx_push_next = 0;
                }
                regs::TX_TAIL => {
                    r.tx_tail = val as u32;
                    tx = true;
                }
                regs::RX_TAIL => {
                    r.rx_tail = val as u32;
                    rx = true;
                }
                regs::IRQ_MASK => r.irq_mask = val,
                _ => r.msix[((off - regs::MSIX_BASE) / 8) as usize] = val,
            }
        }
        if rx {
            self.fetch_rx();
            if self.asg.as_ref().is_some_and(|a| !a.rx_fifo.is_empty() && !a.rx_ready.is_empty()) {
                self.receive(Vec::new());
            }
        }
        if tx {
            self.transmit(dev, out);
        }
    }

    /// Read descriptors `[from, to)` of a ring through the IOMMU.
    fn read_descs(&mut self, base: u64, len: u32, from: u32, to: u32) -> Option<Vec<(u32, Desc)>> {
        let a = self.asg.as_ref()?;
        let runs = regs::ring_runs(base, len, from, to);
        let mut pieces = Vec::new();
        for &(dva, n, _) in &runs {
            match a.iommu.translate(dva, u64::from(n) * DESC as u64, Access::Read) {
                Ok(off) => pieces.push((n as usize * DESC, off)),
                Err(f) => {
                    self.fault(format_args!("descriptor ring: {f}"));
                    return None;
                }
            }
        }
        let total = to.wrapping_sub(from) as usize * DESC;
        let buf = match a.mem.read(vec![0u8; total], &pieces) {
            Ok(b) => b,
            Err(e) => {
                warn!("function {}: reading descriptors failed: {e}", self.index);
                return None;
            }
        };
        Some(buf.chunks_exact(DESC).enumerate().map(|(k, c)| (from.wrapping_add(k as u32), Desc::decode(c))).collect())
    }

    fn fetch_rx(&mut self) {
        let Some(a) = self.asg.as_ref() else { return };
        let (base, len, tail, from) = (a.regs.rx_base, a.regs.rx_len, a.regs.rx_tail, a.rx_fetched);
        if len == 0 || tail == from {
            return;
        }
        let used_from = a.rx_ready.front().map_or(from, |d| d.0);
        if tail.wrapping_sub(used_from) > len {
            self.refuse(format_args!("RX tail {tail} is more than the ring ({len}) ahead of the device"));
            return;
        }
        // Pushed buffers first; what was not pushed is read from the ring.
        let a = self.asg.as_mut().expect("present above");
        let mut from = from;
        while let Some(&(idx, d)) = a.rx_pushed.front() {
            if before(idx, from) {
                a.rx_pushed.pop_front();
                continue;
            }
            if idx != from || idx == tail {
                break;
            }
            a.rx_pushed.pop_front();
            a.rx_ready.push_back((idx, d));
            from = from.wrapping_add(1);
        }
        a.rx_fetched = from;
        if from == tail {
            return;
        }
        if let Some(ds) = self.read_descs(base, len, from, tail) {
            let a = self.asg.as_mut().expect("present above");
            a.rx_ready.extend(ds);
            a.rx_fetched = tail;
        }
    }

    fn fire(&mut self, vector: usize) {
        let Some(a) = self.asg.as_ref() else { return };
        if a.regs.irq_mask & (1 << vector) != 0 || a.regs.msix[vector] == 0 {
            return;
        }
        let Some(target) = a.remap.vector_of(a.regs.msix[vector]) else { return };
        let m = msg::encode(&ToHost::Irq { func: self.index, vector: target as u8 });
        if let Err(e) = a.irq.trigger_data(&m) {
            warn!("function {}: interrupt to node {} failed: {e}", self.index, a.node);
        }
        self.stats.irqs += 1;
    }

    fn transmit(&mut self, dev: &Device, out: &mut Deliveries) {
        let Some(a) = self.asg.as_ref() else { return };
        let (ctrl, base, len, head, tail) = (a.regs.ctrl, a.regs.tx_base, a.regs.tx_len, a.tx_head, a.regs.tx_tail);
        if ctrl & 1 == 0 || len == 0 || tail == head {
            return;
        }
        if tail.wrapping_sub(head) > len {
            self.refuse(format_args!("TX tail {tail} is more than the ring ({len}) ahead of head {head}"));
            return;
        }
        // Pushed descriptors first (stale ones, before the head, go); the
        // rest are read from the ring.
        let a = self.asg.as_mut().expect("present above");
        while a.tx_pushed.front().is_some_and(|p| before(p.idx, head)) {
            a.tx_pushed.pop_front();
        }
        let mut descs = Vec::with_capacity(tail.wrapping_sub(head) as usize);
        let mut inline = Vec::with_capacity(descs.capacity());
        for (k, p) in a.tx_pushed.iter().enumerate() {
            let idx = head.wrapping_add(k as u32);
            if p.idx != idx || idx == tail {
                break;
            }
            descs.push((idx, p.desc));
            inline.push(p.inline.clone());
        }
        let from = head.wrapping_add(descs.len() as u32);
        if from != tail {
            let Some(read) = self.read_descs(base, len, from, tail) else { return };
            inline.extend(read.iter().map(|_| None));
            descs.extend(read);
        }
        let a = self.asg.as_ref().expect("present above");
        // A frame whose last descriptor is not posted yet waits for it.
        let (frames, pending) = regs::frames(&descs);
        let done = tail.wrapping_sub(pending as u32);
        // Check every buffer first; a frame with a faulting or bad
        // descriptor moves nothing.
        let mut ranges = Vec::new();
        let mut good_frames: Vec<Vec<Source>> = Vec::new();
        let mut status = Vec::with_capacity(descs.len());
        let mut faults = Vec::new();
        for fr in &frames {
            let mut bad = None;
            let mut sources = Vec::with_capacity(fr.len());
            for &(idx, d) in fr {
                if d.len == 0 || d.len as usize > MAX_FRAME {
                    bad = Some(format!("descriptor {idx}: length {} (1 to {MAX_FRAME})", d.len));
                    break;
                }
                match &inline[idx.wrapping_sub(head) as usize] {
                    Some(Ok(b)) => sources.push(Source::Inline(b.clone())),
                    Some(Err(n)) => {
                        bad = Some(format!("descriptor {idx}: pushed inline with {} bytes, but {n} were sent", d.len));
                        break;
                    }
                    None => match a.iommu.translate(d.addr, u64::from(d.len), Access::Read) {
                        Ok(_) => sources.push(Source::Dma(d.addr, u64::from(d.len))),
                        Err(f) => {
                            bad = Some(format!("descriptor {idx}: {f}"));
                            break;
                        }
                    },
                }
            }
            let total: usize = fr.iter().map(|(_, d)| d.len as usize).sum();
            if bad.is_none() && total > MAX_FRAME {
                bad = Some(format!("descriptors {}..: a {total}-byte frame (at most {MAX_FRAME})", fr[0].0));
            }
            let st = if bad.is_some() { DD | ERR } else { DD };
            status.extend(fr.iter().map(|&(idx, d)| (idx, Desc { status: st, ..d })));
            match bad {
                Some(b) => faults.push(b),
                None => {
                    ranges.extend(sources.iter().filter_map(|s| match *s {
                        Source::Dma(dva, n) => Some((dva, n)),
                        Source::Inline(_) => None,
                    }));
                    good_frames.push(sources);
                }
            }
        }
        // Neighbouring buffers are read as one span.
        let plan = match gather::spans(&a.iommu, &ranges) {
            Ok(p) => p,
            Err(f) => {
                self.fault(format_args!("transmit buffers: {f}"));
                return;
            }
        };
        let payload = match a.mem.read(vec![0u8; plan.total], &plan.pieces) {
            Ok(b) => b,
            Err(e) => {
                warn!("function {}: reading transmit buffers failed: {e}", self.index);
                return;
            }
        };
        for f in faults {
            self.fault(format_args!("{f}"));
        }
        let mut frame = Vec::with_capacity(MAX_FRAME);
        // The DMA sources, in order, are the plan's ranges.
        let mut at = plan.at.iter();
        for sources in good_frames {
            frame.clear();
            for src in sources {
                match src {
                    Source::Dma(_, n) => {
                        let at = *at.next().expect("one planned range per DMA source");
                        frame.extend_from_slice(&payload[at..at + n as usize]);
                    }
                    Source::Inline(b) => frame.extend_from_slice(&b),
                }
            }
            if frame.len() >= 14 && dev.switch(&frame, Some(self.index as usize), out) {
                if let Err(e) = dev.tap.send(&frame) {
                    warn!("device: the wire failed: {e}");
                }
            }
            self.stats.tx_packets += 1;
        }
        // Write back: length and status of every descriptor taken.
        self.write_back(None, base, len, &status, false);
        if let Some(a) = self.asg.as_mut() {
            a.tx_head = done;
            while a.tx_pushed.front().is_some_and(|p| before(p.idx, done)) {
                a.tx_pushed.pop_front();
            }
        }
        self.fire(regs::VEC_TX);
    }

    /// Write the payload gathered in `data` (if any), then descriptors
    /// `status` (ring index, descriptor as written back) of the ring at
    /// `base`: everything in the descriptors lands after the payload.
    /// Where an interrupt sent next arrives after the bytes, the writes are
    /// posted and not waited for.
    fn write_back(&mut self, data: Option<Payload>, base: u64, len: u32, status: &[(u32, Desc)], rx: bool) -> bool {
        let Some(a) = self.asg.as_ref() else { return false };
        let mut descs = Gather::new(&a.iommu);
        for &(idx, d) in status {
            if let Err(f) = descs.put(base + u64::from(idx % len) * DESC as u64, DESC as u64, &d.encode()) {
                let what = if rx { "RX" } else { "TX" };
                self.fault(format_args!("{what} descriptor write-back: {f}"));
                return false;
            }
        }
        let (data, pieces) = data.unwrap_or_default();
        let (then, then_pieces) = (descs.data, descs.pieces);
        if !a.posted_ordered {
            if let Err(e) = a.mem.write(data, &pieces, then, &then_pieces) {
                warn!("function {}: writing to VM {} failed: {e}", self.index, a.vm);
                return false;
            }
            return true;
        }
        let index = self.index;
        let a = self.asg.as_mut().expect("present above");
        match a.mem.write_posted(data, &pieces, then, &then_pieces) {
            Ok(Some(p)) => a.posted.push_back(p),
            Ok(None) => {}
            Err(e) => {
                warn!("function {index}: writing to VM {} failed: {e}", a.vm);
                return false;
            }
        }
        a.reap(index, false);
        true
    }

    pub(super) fn receive(&mut self, frames: Vec<Vec<u8>>) {
        let Some(a) = self.asg.as_mut() else { return };
        if a.regs.ctrl & 1 == 0 || a.regs.rx_len == 0 {
            return;
        }
        let (base, len) = (a.regs.rx_base, a.regs.rx_len);
        let mut payload = Gather::new(&a.iommu);
        let mut status = Vec::new();
        let mut faults = Vec::new();
        let mut missed = 0;
        let mut got = 0;
        // Frames waiting in the FIFO go first, in order.
        let mut queue = std::mem::take(&mut a.rx_fifo);
        queue.extend(frames);
        while let Some(fr) = queue.pop_front() {
            let Some((idx, d)) = a.rx_ready.pop_front() else {
                queue.push_front(fr);
                break;
            };
            if fr.len() > d.len as usize {
                faults.push(format!(
                    "descriptor {idx}: a {}-byte frame does not fit its {}-byte buffer",
                    fr.len(),
                    d.len
                ));
                status.push((idx, Desc { len: 0, status: DD | ERR, ..d }));
                continue;
            }
            match payload.put(d.addr, u64::from(d.len), &fr) {
                Ok(()) => {
                    status.push((idx, Desc { len: fr.len() as u32, status: DD, ..d }));
                    got += 1;
                }
                Err(f) => {
                    faults.push(format!("descriptor {idx}: {f}"));
                    status.push((idx, Desc { len: 0, status: DD | ERR, ..d }));
                }
            }
        }
        if queue.len() > RX_FIFO {
            missed = (queue.len() - RX_FIFO) as u64;
            queue.truncate(RX_FIFO);
        }
        a.rx_fifo = queue;
        let data = (payload.data, payload.pieces);
        self.stats.rx_missed += missed;
        for f in faults {
            self.fault(format_args!("{f}"));
        }
        if status.is_empty() {
            return;
        }
        if self.write_back(Some(data), base, len, &status, true) {
            self.stats.rx_packets += got;
            self.fire(regs::VEC_RX);
        }
    }
}
