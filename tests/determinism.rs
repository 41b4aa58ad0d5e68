//! Same seed, one thread and several: bitwise identical CVA and exposure profile.

mod common;
use common::*;
use polars::prelude::*;

fn profile(dir: &std::path::Path) -> DataFrame {
    let file = std::fs::File::open(dir.join("exposure.parquet")).unwrap();
    ParquetReader::new(file).finish().unwrap()
}

#[test]
fn results_do_not_depend_on_thread_count() {
    let sc = scenario("netting_set.yaml");
    let extra = ["--set", "simulation.outer_paths=150"];
    let mut runs = Vec::new();
    for threads in ["1", "2", "3"] {
        let dir = tempfile::tempdir().unwrap();
        let mut args = extra.to_vec();
        args.extend_from_slice(&["--threads", threads]);
        let s = run_json(&sc, dir.path(), &args);
        runs.push((s, profile(dir.path()), dir));
    }
    let (s1, p1, _) = &runs[0];
    assert!(f(s1, "systems_solved") > 0.0);
    for (s, p, _) in &runs[1..] {
        for key in ["cva", "cva_std_error", "value_t0", "value_t0_std_error"] {
            assert_eq!(
                f(s1, key).to_bits(),
                f(s, key).to_bits(),
                "{key} differs between thread counts"
            );
        }
        assert!(p1.equals_missing(p), "exposure profiles differ:\n{p1}\n{p}");
    }
}

#[test]
fn different_seeds_give_different_results() {
    let sc = scenario("netting_set.yaml");
    let d1 = tempfile::tempdir().unwrap();
    let d2 = tempfile::tempdir().unwrap();
    let a = run_json(&sc, d1.path(), &["--set", "simulation.outer_paths=50"]);
    let b = run_json(
        &sc,
        d2.path(),
        &[
            "--set",
            "simulation.outer_paths=50",
            "--set",
            "simulation.seed=8",
        ],
    );
    assert_ne!(f(&a, "cva"), f(&b, "cva"));
}
