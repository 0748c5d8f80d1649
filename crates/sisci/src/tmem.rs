//! `vsci_tmem_*` (include/vsci_tmem.h): the page store of
//! `vsci_lend::pagestore` for C programs.
//!
//! A `vsci_tmem_t *` is a token looked up in this module's table, never a
//! pointer we dereference: NULL, closed or forged stores fail with
//! `SCI_ERR_ILLEGAL_PARAMETER`. Each store has its own connection to the
//! node (as `SCIOpen` makes one), opened from `VSCI_SOCKET`.

use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_ulonglong, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use vsci_client::{Client, SciError};
use vsci_lend::pagestore::{PageStore, PoolKind, PAGE_SIZE};

use crate::{open_client, out, report, SciErr};

/// At most this many lenders per store.
const MAX_LENDERS: c_uint = 1024;

struct Tmem {
    store: Option<PageStore>,
    client: Client,
}

impl Drop for Tmem {
    fn drop(&mut self) {
        // Give the loans back over the connection, then close it.
        self.store = None;
        self.client.close();
    }
}

impl Tmem {
    fn store(&self) -> &PageStore {
        self.store.as_ref().expect("a store in the table has its pages")
    }
}

static STORES: Mutex<Option<HashMap<usize, Arc<Tmem>>>> = Mutex::new(None);
/// Tokens look like pointers (non-zero, 16-byte aligned) and are never
/// reused, so a closed store's token cannot reach a newer store.
static NEXT: AtomicUsize = AtomicUsize::new(0x7e3e_0010);

fn table() -> std::sync::MutexGuard<'static, Option<HashMap<usize, Arc<Tmem>>>> {
    STORES.lock().unwrap_or_else(|e| e.into_inner())
}

fn lookup(t: *mut c_void) -> Result<Arc<Tmem>, SciError> {
    table().as_ref().and_then(|m| m.get(&(t as usize)).cloned()).ok_or(SciError::IllegalParameter)
}

fn pool_id(pool: c_int) -> Result<u32, SciError> {
    u32::try_from(pool).map_err(|_| SciError::IllegalParameter)
}

/// `vsci_tmem_stats_t`, as laid out in vsci_tmem.h.
#[repr(C)]
pub struct TmemStats {
    pub(crate) puts: c_ulonglong,
    pub(crate) puts_refused: c_ulonglong,
    pub(crate) gets: c_ulonglong,
    pub(crate) hits: c_ulonglong,
    pub(crate) misses: c_ulonglong,
    pub(crate) evictions: c_ulonglong,
    pub(crate) transfer_errors: c_ulonglong,
    pub(crate) pages_used: c_ulonglong,
    pub(crate) pages_lost: c_ulonglong,
    pub(crate) capacity_pages: c_ulonglong,
}

#[no_mangle]
pub unsafe extern "C" fn vsci_tmem_open(
    lenders: *const c_uint,
    nlenders: c_uint,
    capacity: c_ulonglong,
    error: *mut SciErr,
) -> *mut c_void {
    let f = || {
        if lenders.is_null() || nlenders == 0 || nlenders > MAX_LENDERS {
            return Err(SciError::IllegalParameter);
        }
        // SAFETY: the caller passes `nlenders` node ids at `lenders`
        // (non-NULL, checked above); we only read them, now.
        let ids: Vec<u32> = unsafe { std::slice::from_raw_parts(lenders, nlenders as usize) }.to_vec();
        let client = open_client()?;
        let store = match PageStore::new(&client, &ids, capacity) {
            Ok(s) => s,
            Err(e) => {
                client.close();
                return Err(e);
            }
        };
        let t = NEXT.fetch_add(16, Ordering::Relaxed);
        table().get_or_insert_with(HashMap::new).insert(t, Arc::new(Tmem { store: Some(store), client }));
        Ok(t as *mut c_void)
    };
    // SAFETY: report only writes through `error` after a NULL check.
    unsafe { report("vsci_tmem_open", error, std::ptr::null_mut(), f) }
}

#[no_mangle]
pub extern "C" fn vsci_tmem_close(t: *mut c_void) {
    // A bug of ours must not unwind into C (see `guard`).
    crate::guard::void("vsci_tmem_close", || {
        let gone = table().as_mut().and_then(|m| m.remove(&(t as usize)));
        // Outside the table's lock: returning the loans talks to the node.
        // A call still running in another thread holds its own reference;
        // the store goes when that call is done.
        drop(gone);
    })
}

#[no_mangle]
pub unsafe extern "C" fn vsci_tmem_new_pool(t: *mut c_void, persistent: c_int, error: *mut SciErr) -> c_int {
    // SAFETY: see `report`.
    unsafe {
        report("vsci_tmem_new_pool", error, -1, || {
            let kind = if persistent != 0 { PoolKind::Persistent } else { PoolKind::Ephemeral };
            let id = lookup(t)?.store().new_pool(kind)?;
            c_int::try_from(id).map_err(|_| SciError::Nospc)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn vsci_tmem_destroy_pool(t: *mut c_void, pool: c_int, error: *mut SciErr) {
    // SAFETY: see `report`.
    unsafe { report("vsci_tmem_destroy_pool", error, (), || lookup(t)?.store().destroy_pool(pool_id(pool)?)) }
}

#[no_mangle]
pub unsafe extern "C" fn vsci_tmem_put(
    t: *mut c_void,
    pool: c_int,
    object: c_ulonglong,
    index: c_uint,
    page: *const c_void,
    error: *mut SciErr,
) {
    let f = || {
        let tm = lookup(t)?;
        let pool = pool_id(pool)?;
        if page.is_null() {
            return Err(SciError::IllegalParameter);
        }
        // SAFETY: the caller passes a page of PAGE_SIZE readable bytes
        // (non-NULL, checked); the store copies it before this returns
        // and keeps no reference to it.
        let page = unsafe { std::slice::from_raw_parts(page.cast::<u8>(), PAGE_SIZE) };
        tm.store().put(pool, object, index, page)
    };
    // SAFETY: see `report`.
    unsafe { report("vsci_tmem_put", error, (), f) }
}

#[no_mangle]
pub unsafe extern "C" fn vsci_tmem_get(
    t: *mut c_void,
    pool: c_int,
    object: c_ulonglong,
    index: c_uint,
    page: *mut c_void,
    error: *mut SciErr,
) -> c_int {
    let f = || {
        let tm = lookup(t)?;
        let pool = pool_id(pool)?;
        if page.is_null() {
            return Err(SciError::IllegalParameter);
        }
        // SAFETY: the caller passes PAGE_SIZE writable bytes at `page`
        // (non-NULL, checked) that nothing else uses during the call;
        // the store writes them only once the whole page has arrived
        // and keeps no reference to them.
        let page = unsafe { std::slice::from_raw_parts_mut(page.cast::<u8>(), PAGE_SIZE) };
        Ok(c_int::from(tm.store().get(pool, object, index, page)?))
    };
    // SAFETY: see `report`.
    unsafe { report("vsci_tmem_get", error, -1, f) }
}

#[no_mangle]
pub unsafe extern "C" fn vsci_tmem_flush_page(
    t: *mut c_void,
    pool: c_int,
    object: c_ulonglong,
    index: c_uint,
    error: *mut SciErr,
) {
    // SAFETY: see `report`.
    unsafe {
        report("vsci_tmem_flush_page", error, (), || {
            lookup(t)?.store().flush_page(pool_id(pool)?, object, index).map(drop)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn vsci_tmem_flush_object(t: *mut c_void, pool: c_int, object: c_ulonglong, error: *mut SciErr) {
    // SAFETY: see `report`.
    unsafe {
        report("vsci_tmem_flush_object", error, (), || {
            lookup(t)?.store().flush_object(pool_id(pool)?, object).map(drop)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn vsci_tmem_page_node(
    t: *mut c_void,
    pool: c_int,
    object: c_ulonglong,
    index: c_uint,
    error: *mut SciErr,
) -> c_uint {
    // SAFETY: see `report`.
    unsafe {
        report("vsci_tmem_page_node", error, 0, || {
            Ok(lookup(t)?.store().node_of(pool_id(pool)?, object, index)?.unwrap_or(0))
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn vsci_tmem_stats(t: *mut c_void, stats: *mut TmemStats, error: *mut SciErr) {
    let f = || {
        let s = lookup(t)?.store().stats();
        let v = TmemStats {
            puts: s.puts,
            puts_refused: s.puts_refused,
            gets: s.gets,
            hits: s.hits,
            misses: s.misses,
            evictions: s.evictions,
            transfer_errors: s.transfer_errors,
            pages_used: s.pages_used,
            pages_lost: s.pages_lost,
            capacity_pages: s.capacity_pages,
        };
        // SAFETY: `stats` is the caller's vsci_tmem_stats_t; `out`
        // writes through it only after a NULL check.
        unsafe { out(stats, v) }
    };
    // SAFETY: see `report`.
    unsafe { report("vsci_tmem_stats", error, (), f) }
}
