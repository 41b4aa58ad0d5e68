//! `cva bench run`: one scenario on each requested backend (the CPU here).

mod common;
use common::*;

#[test]
fn bench_run_on_the_cpu_prints_json_and_writes_parquet() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.parquet");
    let o = cva(&[
        "bench",
        "run",
        scenario("netting_set.yaml").to_str().unwrap(),
        "--backend",
        "cpu",
        "--set",
        "simulation.outer_paths=40",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(r["backend"], "cpu");
    assert_eq!(r["speedup_over_cpu"], 1.0);
    for key in [
        "wall_seconds",
        "regressions_per_second",
        "path_steps_per_second",
        "cva",
    ] {
        assert!(r[key].as_f64().unwrap() > 0.0, "{key} in {r}");
    }
    // The same CVA as `cva run` with the same settings.
    let d = tempfile::tempdir().unwrap();
    let s = run_json(
        &scenario("netting_set.yaml"),
        d.path(),
        &["--set", "simulation.outer_paths=40", "--backend", "cpu"],
    );
    assert_eq!(r["cva"].as_f64(), s["cva"].as_f64());
    use polars::prelude::*;
    let df = ParquetReader::new(std::fs::File::open(&out).unwrap())
        .finish()
        .unwrap();
    assert_eq!(df.height(), 1);
    assert!(df.column("path_steps_per_second").is_ok());
    assert_eq!(r["antithetic"], false);
    assert_eq!(
        df.column("antithetic").unwrap().bool().unwrap().get(0),
        Some(false)
    );
}
