//! Write the seed corpus: `fuzz/corpus/<target>/seed-<name>` for every seed
//! of `vsci_fuzz::seeds()` (run from the repository root, or give the
//! corpus directory as the argument). Other files are left alone, so
//! what the fuzzer added and `cargo fuzz cmin` kept stays.

fn main() -> std::io::Result<()> {
    let root = std::env::args().nth(1).unwrap_or_else(|| "fuzz/corpus".into());
    let root = std::path::Path::new(&root);
    for (target, name, bytes) in vsci_fuzz::seeds() {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(format!("seed-{name}")), bytes)?;
    }
    Ok(())
}
