//! Moving data and ordering: `SCIMemCpy`, `SCIMemWrite`, `SCIFlush`,
//! `SCIStoreBarrier`, `SCICacheSync` and sequences (docs/api.md, "Moving
//! data and ordering").

use super::*;

pub(crate) fn lost_error(m: &Map) -> Result<(), SciError> {
    if m.target.is_lost() {
        Err(SciError::TransferFailed)
    } else {
        Ok(())
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCIMemCpy(
    sequence: Handle,
    mem_addr: *mut c_void,
    remote_map: Handle,
    remote_offset: usize,
    size: usize,
    flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: the map range is bounds-checked against the live mapping; the
    // program vouches for `mem_addr..+size` as SISCI requires.
    unsafe {
        report("SCIMemCpy", error, (), || {
            check_flags(flags, FLAG_BLOCK_READ | FLAG_ERROR_CHECK)?;
            if !sequence.is_null() {
                handles::seq(h(sequence))?;
            }
            let m = handles::map(h(remote_map))?;
            let end = remote_offset.checked_add(size).ok_or(SciError::OutOfRange)?;
            if end > m.size {
                return Err(SciError::OutOfRange);
            }
            if size == 0 {
                return Ok(());
            }
            if mem_addr.is_null() {
                return Err(SciError::IllegalParameter);
            }
            let remote = m.addr.add(remote_offset);
            if flags & FLAG_BLOCK_READ != 0 {
                if m.is_remote() {
                    // Fresh bytes from the owner, not our shadow.
                    m.read_fresh(std::slice::from_raw_parts_mut(mem_addr.cast::<u8>(), size), remote_offset)?;
                } else {
                    std::sync::atomic::fence(Ordering::SeqCst);
                    memcpy::copy(remote, mem_addr.cast::<u8>(), size);
                }
            } else if m.is_remote() {
                // Visible at the owner before we return.
                m.write(remote_offset, std::slice::from_raw_parts(mem_addr.cast::<u8>(), size))?;
            } else {
                // A segment of this node: the program's chosen copy routine
                // (SetSciMemCopyFunction) straight into the shared pages.
                if m.readonly {
                    return Err(SciError::IllegalOperation);
                }
                memcpy::copy(mem_addr.cast::<u8>(), remote, size);
                vsci_client::store_fence();
            }
            if flags & FLAG_ERROR_CHECK != 0 {
                lost_error(&m)?;
            }
            Ok(())
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCIMemWrite(
    mem_addr: *mut c_void,
    remote_addr: *mut c_void,
    size: usize,
    flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: the destination must lie inside one live map of ours, which
    // we check; the source is the program's own memory.
    unsafe {
        report("SCIMemWrite", error, (), || {
            check_flags(flags, FLAG_ERROR_CHECK)?;
            if size == 0 {
                return Ok(());
            }
            if mem_addr.is_null() {
                return Err(SciError::IllegalParameter);
            }
            let m = handles::map_containing(remote_addr as usize, size).ok_or(SciError::IllegalAddress)?;
            if m.readonly {
                return Err(SciError::IllegalOperation);
            }
            memcpy::copy(mem_addr.cast::<u8>(), remote_addr.cast::<u8>(), size);
            m.flush()?;
            if flags & FLAG_ERROR_CHECK != 0 {
                lost_error(&m)?;
            }
            Ok(())
        })
    }
}

/// Make every earlier store visible before any later one: on one host a
/// full fence (maps are coherent memory); for maps of other nodes' segments
/// the stores are also shipped and acknowledged. Neither call can report an
/// error (SISCI gives them none); a failed shipment shows up in
/// `SCICheckSequence` and `SCI_FLAG_ERROR_CHECK`.
#[no_mangle]
pub extern "C" fn SCIFlush(_sequence: Handle, _flags: c_uint) {
    guard::void("SCIFlush", || {
        vsci_client::store_fence();
        let _ = vsci_client::flush_remote_stores();
    })
}

#[no_mangle]
pub extern "C" fn SCIStoreBarrier(_sequence: Handle, _flags: c_uint) {
    guard::void("SCIStoreBarrier", || {
        vsci_client::store_fence();
        let _ = vsci_client::flush_remote_stores();
    })
}

/// Cache line size every x86-64 and aarch64 CPU we run on uses; a smaller
/// real line would only mean flushing some lines twice.
pub(crate) const CACHE_LINE: usize = 64;

#[no_mangle]
pub unsafe extern "C" fn SCICacheSync(
    map: Handle,
    addr: *mut c_void,
    length: usize,
    flags: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: with a map, the range is checked against the live mapping;
    // without one, the program vouches for `addr..+length` (as SISCI
    // requires), and CLFLUSH neither reads nor writes the bytes.
    unsafe {
        report("SCICacheSync", error, (), || {
            check_flags(flags, FLAG_CACHE_FLUSH | FLAG_CACHE_INVALIDATE)?;
            if flags == 0 || (addr.is_null() && length > 0) {
                return Err(SciError::IllegalParameter);
            }
            if !map.is_null() {
                let m = handles::map(h(map))?;
                if !m.contains(addr as usize, length) {
                    return Err(SciError::OutOfRange);
                }
                if m.is_remote() && flags & FLAG_CACHE_FLUSH != 0 {
                    // What a device-side reader of another node's memory
                    // needs is our stores there, not in our shadow.
                    m.flush()?;
                }
            }
            std::sync::atomic::fence(Ordering::SeqCst);
            #[cfg(target_arch = "x86_64")]
            {
                // CPU caches are coherent with every reader vsci has (other
                // processes, guests' vCPUs, the RMA engine's copies), so this
                // only matters to a program that hands the memory to a
                // non-coherent device itself; it costs one CLFLUSH per line.
                let start = addr as usize & !(CACHE_LINE - 1);
                let end = addr as usize + length;
                for line in (start..end).step_by(CACHE_LINE) {
                    std::arch::x86_64::_mm_clflush(line as *const u8);
                }
                std::arch::x86_64::_mm_mfence();
            }
            Ok(())
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCICreateMapSequence(map: Handle, sequence: *mut Handle, flags: c_uint, error: *mut SciErr) {
    // SAFETY: see `out`.
    unsafe {
        report("SCICreateMapSequence", error, (), || {
            check_flags(flags, FLAG_FAST_BARRIER)?;
            if sequence.is_null() {
                return Err(SciError::IllegalParameter);
            }
            let m = handles::map(h(map))?;
            let hnd = handles::insert(Obj::Seq(Arc::new(Sequence { map: m })), owner_desc(h(map)));
            out(sequence, as_handle(hnd))
        })
    }
}

release_op!(SCIRemoveSequence, seq, Seq, |_s| Ok::<(), SciError>(()));

pub(crate) unsafe fn sequence_status(
    name: &'static str,
    sequence: Handle,
    flags: c_uint,
    error: *mut SciErr,
) -> c_uint {
    // SAFETY: see `set`.
    unsafe {
        // A panic of ours is an error the sequence cannot recover from.
        let r = guard::value(name, Err(SciError::System), || {
            check_flags(flags, FLAG_NO_FLUSH | FLAG_NO_STORE_BARRIER | FLAG_FLUSH_CPU_BUFFERS_ONLY)?;
            let s = handles::seq(h(sequence))?;
            if flags & FLAG_NO_STORE_BARRIER == 0 {
                std::sync::atomic::fence(Ordering::SeqCst);
            }
            if flags & FLAG_NO_FLUSH == 0 {
                s.map.flush().map_err(|_| SciError::TransferFailed)?;
            }
            Ok::<_, SciError>(s)
        });
        match r {
            Err(e) => {
                set(error, e);
                SEQ_NOT_RETRIABLE
            }
            Ok(s) => match lost_error(&s.map) {
                Ok(()) => {
                    set(error, SciError::Ok);
                    SEQ_OK
                }
                Err(e) => {
                    set(error, e);
                    SEQ_NOT_RETRIABLE
                }
            },
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn SCIStartSequence(sequence: Handle, flags: c_uint, error: *mut SciErr) -> c_uint {
    // SAFETY: see `sequence_status`.
    unsafe { sequence_status("SCIStartSequence", sequence, flags, error) }
}

#[no_mangle]
pub unsafe extern "C" fn SCICheckSequence(sequence: Handle, flags: c_uint, error: *mut SciErr) -> c_uint {
    // SAFETY: see `sequence_status`.
    unsafe { sequence_status("SCICheckSequence", sequence, flags, error) }
}
