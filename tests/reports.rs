//! The reports read back with the expected columns and row counts.

mod common;
use common::*;
use polars::prelude::*;

fn read(path: &std::path::Path) -> DataFrame {
    ParquetReader::new(std::fs::File::open(path).unwrap())
        .finish()
        .unwrap()
}

#[test]
fn basket29_reports_have_expected_shape() {
    let dir = tempfile::tempdir().unwrap();
    let s = run_json(
        &scenario("basket29.yaml"),
        dir.path(),
        &["--set", "simulation.outer_paths=40"],
    );
    for key in [
        "cva",
        "cva_std_error",
        "value_t0",
        "value_t0_std_error",
        "hazard_rate",
        "recovery_rate",
        "horizon",
    ] {
        assert!(s[key].is_number(), "--json lacks {key}");
    }
    let summary = read(&dir.path().join("summary.parquet"));
    assert_eq!(summary.height(), 1);
    for c in [
        "cva",
        "cva_std_error",
        "value_t0",
        "value_t0_method",
        "outer_paths",
        "antithetic",
        "systems_solved",
        "wall_seconds",
    ] {
        assert!(summary.column(c).is_ok(), "summary.parquet lacks {c}");
    }
    assert_eq!(
        summary.column("antithetic").unwrap().bool().unwrap().get(0),
        Some(false)
    );
    assert_eq!(s["antithetic"].as_bool(), Some(false));
    assert_eq!(s["value_t0_method"].as_str(), Some("discounted_t1"));
    assert_eq!(
        summary.column("cva").unwrap().f64().unwrap().get(0),
        Some(f(&s, "cva"))
    );

    let exposure = read(&dir.path().join("exposure.parquet"));
    assert_eq!(exposure.height(), 11, "t_0..t_10");
    for c in [
        "date_index",
        "time",
        "ee",
        "epe",
        "ene",
        "pfe",
        "discount_factor",
        "discounted_epe",
        "default_probability",
        "cva_contribution",
    ] {
        assert!(exposure.column(c).is_ok(), "exposure.parquet lacks {c}");
    }
    let contributions: f64 = exposure
        .column("cva_contribution")
        .unwrap()
        .f64()
        .unwrap()
        .sum()
        .unwrap();
    assert!((contributions - f(&s, "cva")).abs() <= 1e-12 * contributions.abs().max(1.0));
    // The t_0 row is the deterministic exposure V_0 (no inner stage at t_0 by default).
    let at0 = |c: &str| exposure.column(c).unwrap().f64().unwrap().get(0).unwrap();
    let v0 = f(&s, "value_t0");
    assert_eq!(at0("ee"), v0);
    assert_eq!(at0("epe"), v0.max(0.0));
    assert_eq!(at0("pfe"), v0.max(0.0));

    let stats = read(&dir.path().join("solver_stats.parquet"));
    // Exposure dates k = 1..8 each regress at exercise dates j = k+1..9: 8+7+...+1 = 36
    // (t_0 has no inner stage unless simulation.value_t0 is nested).
    assert_eq!(stats.height(), 36);
    for c in [
        "exposure_date",
        "exercise_date",
        "systems",
        "failures",
        "method_ldlt",
        "method_householder_pcr",
        "method_divide_conquer",
        "status_ok",
        "status_not_positive_definite",
        "status_failed",
        "status_non_finite_input",
        "discarded_eigenvalues",
        "too_few_paths",
        "residual_max",
        "residual_p50",
        "residual_p90",
        "residual_p99",
    ] {
        assert!(stats.column(c).is_ok(), "solver_stats.parquet lacks {c}");
    }
    let svg = std::fs::read_to_string(dir.path().join("exposure.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("EPE") && svg.contains("PFE"));
    // No temporary files left behind.
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let name = e.unwrap().file_name();
        assert!(!name.to_string_lossy().ends_with(".tmp"), "left {name:?}");
    }
}
