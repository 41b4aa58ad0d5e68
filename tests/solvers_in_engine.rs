//! The batched solvers wired into `cva run` and `cva bench solvers`.

mod common;
use common::*;
use cva::engine::{self, NoProgress};
use cva::scenario::Scenario;
use cva_kernels::{
    solve_batched, Method, SolverParams, Status, Strategy, SymmetricBatch, SystemReport,
};

/// The regression matrices of `basket29` with the strike raised to 1.2: few inner paths
/// end in the money, so many matrices are close to singular and LDL^T in f32 meets
/// non-positive pivots. (With the shipped strike of 1, the f32 matrices have condition
/// numbers near 1e5 and LDL^T solves all of them with residuals below 1e-7: nothing
/// escalates.)
#[test]
fn escalation_beats_ldlt_on_f32_basket29_matrices() {
    let sc = Scenario::load(
        &scenario("basket29.yaml"),
        &[
            "portfolio[0].strike=1.2".into(),
            "simulation.outer_paths=4096".into(),
            "simulation.precision=f32".into(),
            // Exposure date 0 has an inner stage only with the nested t_0 value.
            "simulation.value_t0=nested".into(),
        ],
    )
    .unwrap();
    let sim = engine::simulate::<f32>(&sc, &NoProgress, Some((0, 5)));
    let cap = sim.captured.expect("regressions at exercise date 5");
    assert_eq!(cap.n, 30);
    let a: Vec<f32> = cap.a.iter().map(|&v| v as f32).collect();
    let b: Vec<f32> = cap.b.iter().map(|&v| v as f32).collect();
    let systems = SymmetricBatch::new(cap.n, &a, &b);
    let solve = |strategy| {
        let mut x = vec![f32::NAN; b.len()];
        let mut reports = vec![SystemReport::default(); systems.batch];
        solve_batched(
            &systems,
            &mut x,
            &mut reports,
            strategy,
            &SolverParams::default(),
            Method::Ldlt,
        );
        (reports, x)
    };
    let (ldlt, x_ldlt) = solve(Strategy::Ldlt);
    let (esc, x_esc) = solve(Strategy::Escalating);
    let escalated: Vec<usize> = (0..systems.batch)
        .filter(|&i| esc[i].method != Method::Ldlt)
        .collect();
    println!("{} of {} systems escalate", escalated.len(), systems.batch);
    assert!(
        !escalated.is_empty(),
        "the test family must contain systems that escalate"
    );
    // Two reasons to escalate. (a) L D L^T fails (a non-positive pivot, or a residual
    // above the tolerance): the escalated residual must be at least 10x smaller than
    // L D L^T's (which has none: NaN counts as infinite) and within the tolerance.
    // (b) L D L^T succeeds but proves the system ill-conditioned beyond the condition
    // threshold: divide and conquer then discards eigenvalues on purpose, so its residual
    // is the (larger) least-squares residual of the truncated system, and what it buys
    // is a bounded solution: the norm of x must not grow.
    let tol = SolverParams::default().tolerance::<f32>(cap.n);
    let norm = |x: &[f32], i: usize| {
        x[i * 30..(i + 1) * 30]
            .iter()
            .fold(0.0f64, |m, v| m.max(v.abs() as f64))
    };
    let (mut failed, mut ill) = (0, 0);
    for &i in &escalated {
        assert_eq!(esc[i].status, Status::Ok, "system {i}: {:?}", esc[i]);
        if ldlt[i].status != Status::Ok || ldlt[i].residual > tol {
            failed += 1;
            let r_ldlt = if ldlt[i].residual.is_nan() {
                f64::INFINITY
            } else {
                ldlt[i].residual
            };
            assert!(esc[i].residual <= tol, "system {i}: {:?}", esc[i]);
            assert!(
                esc[i].residual * 10.0 <= r_ldlt,
                "system {i}: escalating {:e} vs ldlt {r_ldlt:e}",
                esc[i].residual
            );
        } else {
            ill += 1;
            assert_eq!(esc[i].method, Method::DivideConquer, "system {i}");
            assert!(esc[i].discarded > 0, "system {i}: {:?}", esc[i]);
            assert!(
                norm(&x_esc, i) <= norm(&x_ldlt, i),
                "system {i}: |x| {} (escalating) vs {} (ldlt)",
                norm(&x_esc, i),
                norm(&x_ldlt, i)
            );
        }
    }
    println!("{failed} escalate because L D L^T fails, {ill} because they are ill-conditioned");
    assert!(failed > 0, "the family must contain L D L^T failures");
    // The systems that do not escalate are LDL^T's, bit for bit.
    for i in 0..systems.batch {
        if esc[i].method == Method::Ldlt {
            assert_eq!(esc[i].residual.to_bits(), ldlt[i].residual.to_bits());
        }
    }
}

#[test]
fn f32_escalating_cva_agrees_with_f64() {
    let d64 = tempfile::tempdir().unwrap();
    let d32 = tempfile::tempdir().unwrap();
    let base = ["--set", "simulation.outer_paths=300"];
    let s64 = run_json(&scenario("basket29.yaml"), d64.path(), &base);
    let mut args = base.to_vec();
    args.extend_from_slice(&["--set", "simulation.precision=f32"]);
    let s32 = run_json(&scenario("basket29.yaml"), d32.path(), &args);
    assert_eq!(s32["precision"], "f32");
    assert_eq!(s32["strategy"], "escalating", "the default strategy");
    let (c64, c32, se) = (f(&s64, "cva"), f(&s32, "cva"), f(&s64, "cva_std_error"));
    println!("CVA f64 {c64} ± {se}, f32 {c32}");
    assert!((c64 - c32).abs() <= 3.0 * se);
}

#[test]
fn every_strategy_is_selectable_from_the_scenario() {
    // (strategy, extra settings) -> (CVA, its standard error, discarded eigenvalues)
    let run = |s: &str, extra: &[&str]| {
        let dir = tempfile::tempdir().unwrap();
        let solver = format!("simulation.solver={s}");
        let mut args = vec!["--set", "simulation.outer_paths=60", "--set", &solver];
        args.extend_from_slice(extra);
        let j = run_json(&scenario("netting_set.yaml"), dir.path(), &args);
        assert_eq!(j["strategy"], s);
        assert!(f(&j, "systems_solved") > 0.0);
        let by_method = [
            f(&j, "solved_ldlt"),
            f(&j, "solved_householder_pcr"),
            f(&j, "solved_divide_conquer"),
        ];
        match s {
            "ldlt" => assert_eq!(by_method[1] + by_method[2], 0.0),
            "householder-pcr" => assert_eq!(by_method[0] + by_method[2], 0.0),
            "divide-conquer" => assert_eq!(by_method[0] + by_method[1], 0.0),
            _ => assert!(by_method[0] > 0.0),
        }
        (
            f(&j, "cva"),
            f(&j, "cva_std_error"),
            f(&j, "discarded_eigenvalues"),
        )
    };
    let (ldlt, se, _) = run("ldlt", &[]);
    // The methods that solve the regression as posed give the same CVA to far below its
    // error (they differ by rounding, which can flip a rare exercise decision).
    for s in ["householder-pcr", "escalating"] {
        let (c, _, _) = run(s, &[]);
        assert!(
            (c - ldlt).abs() <= 0.01 * se,
            "{s}: {c} against {ldlt} ± {se}"
        );
    }
    // So does divide and conquer when it discards nothing (threshold above any condition
    // number this scenario's regression matrices reach) ...
    let untruncated = ["--set", "simulation.condition_threshold=1e16"];
    let (c, _, discarded) = run("divide-conquer", &untruncated);
    assert_eq!(discarded, 0.0);
    assert!((c - ldlt).abs() <= 0.01 * se, "{c} against {ldlt} ± {se}");
    // ... but with the paper's threshold (1e5) it truncates most of them (their condition
    // numbers exceed 1e5): a different, regularised regression and exercise policy, whose
    // CVA is only statistically close (on this scenario, 60 outer paths, it lies below
    // L D L^T's by 0.2 to 1.5 standard errors for each of the seeds 1..7).
    let (c, _, discarded) = run("divide-conquer", &[]);
    assert!(discarded > 0.0);
    assert!((c - ldlt).abs() <= 3.0 * se, "{c} against {ldlt} ± {se}");
}

#[test]
fn bench_solvers_prints_json_and_writes_parquet() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bench.parquet");
    let o = cva(&[
        "bench",
        "solvers",
        "--backend",
        "cpu",
        "--n",
        "4,30",
        "--batch",
        "64",
        "--repeats",
        "1",
        "--family",
        "paper",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(
        rows.len(),
        2 * 2 * 4,
        "2 sizes x 2 precisions x 4 strategies"
    );
    for r in rows {
        assert!(r["systems_per_second"].as_f64().unwrap() > 0.0);
        assert!(r["max_residual"].as_f64().unwrap() < 1e-3, "{r}");
        assert_eq!(r["failures"], 0);
    }
    use polars::prelude::*;
    let df = ParquetReader::new(std::fs::File::open(&out).unwrap())
        .finish()
        .unwrap();
    assert_eq!(df.height(), rows.len());
}
