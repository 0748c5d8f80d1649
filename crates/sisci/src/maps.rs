//! Maps of local and remote segments (docs/api.md, "Maps").

use super::*;

pub(crate) fn map_flags(flags: c_uint, addr: *mut c_void) -> Result<MapFlags, SciError> {
    // SCI_FLAG_BROADCAST: a map of a group connection writes every member
    // whether or not the flag says so; on other maps it changes nothing.
    check_flags(
        flags,
        FLAG_FIXED_MAP_ADDR | FLAG_READONLY_MAP | FLAG_BROADCAST | MAP_HINT_FLAGS | MAP_UNIMPLEMENTED_FLAGS,
    )?;
    if flags & MAP_UNIMPLEMENTED_FLAGS != 0 {
        return Err(SciError::FlagNotImplemented);
    }
    let fixed_addr = if flags & FLAG_FIXED_MAP_ADDR != 0 {
        if addr.is_null() {
            return Err(SciError::IllegalAddress);
        }
        Some(addr as usize)
    } else {
        None
    };
    Ok(MapFlags {
        readonly: flags & FLAG_READONLY_MAP != 0,
        fixed_addr,
        no_loopback: flags & FLAG_NO_MEMORY_LOOPBACK_MAP != 0,
    })
}

pub(crate) unsafe fn do_map(
    target: MapTarget,
    desc: usize,
    map: *mut Handle,
    offset: usize,
    size: usize,
    addr: *mut c_void,
    flags: c_uint,
) -> Result<*mut c_void, SciError> {
    let mf = map_flags(flags, addr)?;
    if map.is_null() {
        return Err(SciError::IllegalParameter);
    }
    let m = Arc::new(Map::new(target, offset as u64, size as u64, mf)?);
    let p = m.addr.cast::<c_void>();
    let hnd = handles::insert(Obj::Map(m), desc);
    // SAFETY: NULL-checked above.
    unsafe { out(map, as_handle(hnd))? };
    Ok(p)
}

pub(crate) fn owner_desc(h: usize) -> usize {
    handles::get(h).map(|e| e.desc).unwrap_or(0)
}

// SCIMapLocalSegment and SCIMapRemoteSegment: one call but for where the
// segment handle is looked up and what the map targets.
macro_rules! map_op {
    ($name:ident, $getter:ident, $target:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            segment: Handle,
            map: *mut Handle,
            offset: usize,
            size: usize,
            addr: *mut c_void,
            flags: c_uint,
            error: *mut SciErr,
        ) -> *mut c_void {
            // SAFETY: see `do_map`.
            unsafe {
                report(stringify!($name), error, std::ptr::null_mut(), || {
                    let s = handles::$getter(h(segment))?;
                    do_map(MapTarget::$target(s), owner_desc(h(segment)), map, offset, size, addr, flags)
                })
            }
        }
    };
}

map_op!(SCIMapLocalSegment, local_seg, Local);
map_op!(SCIMapRemoteSegment, remote_seg, Remote);

#[no_mangle]
pub unsafe extern "C" fn SCIUnmapSegment(map: Handle, flags: c_uint, error: *mut SciErr) {
    // SAFETY: see `set`.
    unsafe {
        report("SCIUnmapSegment", error, (), || {
            check_flags(flags, 0)?;
            if handles::map(h(map)).is_err() && handles::take_orphan(h(map), handles::Kind::Map) {
                return Ok(()); // unmapped by SCIClose or SCITerminate
            }
            let m = handles::map(h(map))?;
            handles::remove(h(map));
            m.unmap();
            Ok(())
        })
    }
}
