//! A panic in the node (a bug of ours) ends what it was doing, never a
//! thread the node needs nor, through a poisoned lock, every thread after
//! it: a request handler's panic is answered with `SCI_ERR_SYSTEM` and
//! logged (`client::Server`), and locks are taken as the panicking holder
//! left them ([`Recover`]), as the registry's always were.
//!
//! `VSCID_TEST_PANIC=REQUEST` (a request's name, as `ProbeNode`) makes the
//! handler of that request panic with the registry locked, for
//! crates/vsci-systest/tests/panics.rs; unset, a request pays one atomic
//! load for it.

use std::any::Any;
use std::fmt::Debug;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

/// `Mutex::lock` that survives a holder's panic.
pub trait Recover<T> {
    /// The lock, with the data as a panicking holder left it: what it was
    /// doing is lost either way, and the node keeps serving.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> Recover<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `Condvar::wait_timeout` on a lock taken with [`Recover::locked`].
pub fn wait_timeout<'a, T>(cv: &Condvar, guard: MutexGuard<'a, T>, d: Duration) -> MutexGuard<'a, T> {
    cv.wait_timeout(guard, d).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0)
}

/// What a caught panic said.
pub fn message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}

/// Panic if `VSCID_TEST_PANIC` names `req`'s kind (see the module).
#[inline]
pub fn test_panic(req: &impl Debug) {
    static NAME: OnceLock<Option<String>> = OnceLock::new();
    if let Some(name) = NAME.get_or_init(|| std::env::var("VSCID_TEST_PANIC").ok().filter(|n| !n.is_empty())) {
        test_panic_named(name, req);
    }
}

#[cold]
#[inline(never)]
fn test_panic_named(name: &str, req: &impl Debug) {
    let text = format!("{req:?}");
    if text.split([' ', '{', '(']).next() == Some(name) {
        panic!("VSCID_TEST_PANIC: a panic in the handler of {name}, as asked");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_taken_as_left() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let mut g = m2.lock().unwrap();
            *g = 2;
            panic!("holder dies");
        })
        .join();
        assert!(m.is_poisoned());
        assert_eq!(*m.locked(), 2);
        let p: Box<dyn Any + Send> = Box::new(String::from("why"));
        assert_eq!(message(&*p), "why");
    }
}
