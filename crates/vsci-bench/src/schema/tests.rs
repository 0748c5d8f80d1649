//! The schema against real files and wrong ones.

use super::*;

/// The repository's docs/bench/results.json (several runs merged).
fn committed() -> String {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/bench/results.json");
    std::fs::read_to_string(p).expect("docs/bench/results.json")
}

#[test]
fn the_committed_results_load() {
    let r: Results = from_str(&committed()).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(r.paths.local.is_some() && r.paths.remote.is_some() && r.paths.devices.is_some());
    assert_eq!(r.paths.names().len(), 9);
}

#[test]
fn a_quick_local_run_of_the_current_runner_loads() {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/quick-local.json");
    let r: Results = from_str(&std::fs::read_to_string(p).unwrap()).unwrap_or_else(|e| panic!("{e:#}"));
    let l = r.paths.local.expect("local");
    assert!(l.python.and_then(|p| p.ran().cloned()).is_some_and(|p| p.segment_pingpong.is_some()));
}

#[test]
fn what_is_saved_loads_again_the_same() {
    let r: Results = from_str(&committed()).unwrap();
    let again: Results = from_str(&serde_json::to_string(&r).unwrap()).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(serde_json::to_value(&r).unwrap(), serde_json::to_value(&again).unwrap());
}

#[test]
fn a_misspelt_key_is_refused_with_its_name_and_path() {
    let text = committed().replacen("\"median_us\"", "\"medain_us\"", 1);
    let e = format!("{:#}", from_str::<Results>(&text).unwrap_err());
    assert!(e.contains("unknown field `medain_us`"), "{e}");
    assert!(e.contains("paths.") && e.contains("median_us"), "{e}");
}

#[test]
fn a_missing_key_is_refused_with_its_name() {
    // `p99_us` of a latency is always written (null when not measured).
    let mut v: serde_json::Value = serde_json::from_str(&committed()).unwrap();
    let lat = &mut v["paths"]["local"]["sisci_bench"]["pingpong"]["rows"][0]["vsci"];
    lat.as_object_mut().unwrap().remove("p99_us");
    let e = format!("{:#}", from_str::<Results>(&v.to_string()).unwrap_err());
    assert!(e.contains("missing field `p99_us`") && e.contains("paths.local.sisci_bench.pingpong.rows[0].vsci"), "{e}");
    // ... but may be null.
    v["paths"]["local"]["sisci_bench"]["pingpong"]["rows"][0]["vsci"]["p99_us"] = serde_json::Value::Null;
    from_str::<Results>(&v.to_string()).unwrap_or_else(|e| panic!("{e:#}"));
}

#[test]
fn an_unknown_path_is_refused() {
    let mut v: serde_json::Value = serde_json::from_str(&committed()).unwrap();
    v["paths"]["moon"] = serde_json::json!({});
    let e = format!("{:#}", from_str::<Results>(&v.to_string()).unwrap_err());
    assert!(e.contains("unknown field `moon`"), "{e}");
}

#[test]
fn outcomes_read_errors_skips_and_results() {
    let t: Outcome<Transfers> = serde_json::from_str(r#"{"error": "sendrecv failed"}"#).unwrap();
    assert_eq!(t.error(), Some("sendrecv failed"));
    let s: Outcome<PythonBench> = serde_json::from_str(r#"{"skipped": "no cffi"}"#).unwrap();
    assert_eq!(s.skipped(), Some("no cffi"));
    assert_eq!(serde_json::to_string(&s).unwrap(), r#"{"skipped":"no cffi"}"#);
    let e = serde_json::from_str::<Outcome<Transfers>>(r#"{"window": "4m", "rowz": []}"#).unwrap_err().to_string();
    assert!(e.contains("unknown field `rowz`"), "{e}");
}
