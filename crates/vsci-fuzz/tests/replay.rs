//! Replays every committed fuzz input through the function its target
//! calls: the seed corpus (`fuzz/corpus/<target>/`) and inputs that once
//! found a bug (`fuzz/regressions/<target>/`). A panic fails the test, as
//! it is a crash of the target. Runs on stable Rust with the rest of the
//! suite; `scripts/fuzz.sh` is what searches for new inputs.

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Files of `dir`, sorted (none if it does not exist).
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.map(|e| e.expect("readable directory entry").path()).filter(|p| p.is_file()).collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    files
}

fn replay(kind: &str, min_per_target: usize) {
    for &(target, entry) in vsci_fuzz::TARGETS {
        let files = inputs(&fuzz_dir().join(kind).join(target));
        assert!(files.len() >= min_per_target, "fuzz/{kind}/{target} holds {} inputs", files.len());
        for f in files {
            let data = std::fs::read(&f).expect("readable input");
            let r = std::panic::catch_unwind(|| entry(&data));
            assert!(r.is_ok(), "{target} panicked on {}", f.display());
        }
    }
}

#[test]
fn corpus_replays_without_a_crash() {
    replay("corpus", 1);
}

#[test]
fn regressions_replay_without_a_crash() {
    replay("regressions", 0);
}

/// The generated seeds run too (a seed the code no longer takes would show
/// here before anyone regenerates the corpus), and every committed seed
/// file is still what the generator makes.
#[test]
fn seeds_run_and_match_the_committed_corpus() {
    for (target, name, bytes) in vsci_fuzz::seeds() {
        let entry = vsci_fuzz::TARGETS.iter().find(|t| t.0 == target).expect("a known target").1;
        entry(&bytes);
        let path = fuzz_dir().join("corpus").join(target).join(format!("seed-{name}"));
        let committed = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (run cargo run -p vsci-fuzz --bin vsci-fuzz-seeds)", path.display()));
        assert!(committed == bytes, "{} differs from the generated seed (regenerate it)", path.display());
    }
}
