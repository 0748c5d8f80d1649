//! `VSCI_DIRTY` selects the mechanism for `ModeRequest::Auto` (own test
//! binary: the environment is process-wide).

mod common;

use common::{page, Shm};
use vsci_dirty::{DiffTracker, Mode, ModeRequest, PageTracker};

#[test]
fn env_selects_mode() {
    let s = Shm::new(4 * page());
    std::env::set_var("VSCI_DIRTY", "compare");
    let t = PageTracker::new(s.m1, s.len).unwrap();
    assert_eq!(t.mode(), Mode::Compare);
    let mut v = Vec::new();
    let mut t = t;
    t.take_dirty(&mut v).unwrap();
    assert_eq!(
        v,
        vec![(0, s.len)],
        "compare mode: every page is a candidate"
    );
    // SAFETY: `s` outlives `d`.
    let mut d = unsafe { DiffTracker::new(s.m1, s.len, 0) }.unwrap();
    assert_eq!(d.mode(), Mode::Compare);
    s.store1(5, 1);
    d.collect(&mut v).unwrap();
    assert_eq!(v, vec![(5, 1)]);
    drop((t, d));
    // Explicit requests ignore the environment.
    let t = PageTracker::with_mode(s.m1, s.len, ModeRequest::Compare).unwrap();
    assert_eq!(t.mode(), Mode::Compare);
    drop(t);
    std::env::set_var("VSCI_DIRTY", "wp");
    match PageTracker::new(s.m1, s.len) {
        Ok(t) => assert_eq!(t.mode(), Mode::WriteProtect),
        Err(e) => eprintln!("VSCI_DIRTY=wp unavailable here: {e}"),
    }
    std::env::remove_var("VSCI_DIRTY");
}
