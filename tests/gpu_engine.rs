//! The GPU backend of `cva run` against the CPU backend (same seed, f64) on every shipped
//! scenario, and the European closed form on the GPU. Needs a CUDA GPU: ignored on CI,
//! run with `--include-ignored` on the GPU machine.

mod common;
use common::{check_european_closed_form, cva, f, run_json, scenario};
use polars::prelude::*;
use std::path::Path;

fn epe(dir: &Path) -> Vec<f64> {
    let file = std::fs::File::open(dir.join("exposure.parquet")).unwrap();
    let df = ParquetReader::new(file).finish().unwrap();
    df.column("epe")
        .unwrap()
        .f64()
        .unwrap()
        .into_no_null_iter()
        .collect()
}

/// Runs `file` with `outer` outer paths on the GPU and on the CPU (f64), and checks
/// that the CVAs agree to 5% of the standard error.
fn gpu_matches_cpu(file: &str, outer: usize) {
    let sc = scenario(file);
    let set = format!("simulation.outer_paths={outer}");
    let mut runs = Vec::new();
    for backend in ["gpu", "cpu"] {
        let dir = tempfile::tempdir().unwrap();
        let args = [
            "--set",
            set.as_str(),
            "--set",
            "simulation.precision=f64",
            "--backend",
            backend,
        ];
        let s = run_json(&sc, dir.path(), &args);
        assert_eq!(s["backend"].as_str(), Some(backend), "{s}");
        let profile = epe(dir.path());
        runs.push((s, profile));
    }
    let ((g, ge), (c, ce)) = (&runs[0], &runs[1]);
    let (cva_g, cva_c, se) = (f(g, "cva"), f(c, "cva"), f(c, "cva_std_error"));
    println!(
        "{file} ({outer} outer paths): CVA gpu {cva_g} cpu {cva_c} (std error {se}); \
         wall gpu {:.3} s cpu {:.3} s; device {}; systems gpu {} cpu {}; failures gpu {} cpu {}; \
         outer exercises gpu {} cpu {}",
        f(g, "wall_seconds"),
        f(c, "wall_seconds"),
        g["device"],
        g["systems_solved"],
        c["systems_solved"],
        g["solver_failures"],
        c["solver_failures"],
        g["outer_exercises"],
        c["outer_exercises"],
    );
    let mut worst = (0usize, 0.0f64);
    for (k, (a, b)) in ge.iter().zip(ce).enumerate() {
        let rel = if *b == 0.0 && *a == 0.0 {
            0.0
        } else {
            (a - b).abs() / b.abs().max(1e-300)
        };
        println!("  date {k}: EPE gpu {a:.10e} cpu {b:.10e} relative difference {rel:.3e}");
        if rel > worst.1 {
            worst = (k, rel);
        }
    }
    println!(
        "{file}: largest relative EPE difference {:.3e} at date {}",
        worst.1, worst.0
    );
    assert_eq!(ge.len(), ce.len());
    assert!(
        (cva_g - cva_c).abs() <= 0.05 * se,
        "{file}: CVA on the GPU {cva_g} differs from the CPU's {cva_c} by more than 5% of the standard error {se}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_matches_cpu_on_american_put() {
    gpu_matches_cpu("american_put.yaml", 200);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_matches_cpu_on_basket29() {
    gpu_matches_cpu("basket29.yaml", 300);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_matches_cpu_on_european_call() {
    gpu_matches_cpu("european_call.yaml", 1000);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_matches_cpu_on_netting_set() {
    gpu_matches_cpu("netting_set.yaml", 300);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_matches_cpu_in_f32() {
    // f32 regression: the same selection and the same arithmetic on both sides.
    let sc = scenario("american_put.yaml");
    let mut runs = Vec::new();
    for backend in ["gpu", "cpu"] {
        let dir = tempfile::tempdir().unwrap();
        let args = [
            "--set",
            "simulation.outer_paths=100",
            "--set",
            "simulation.precision=f32",
            "--backend",
            backend,
        ];
        runs.push(run_json(&sc, dir.path(), &args));
    }
    let (g, c) = (&runs[0], &runs[1]);
    println!(
        "american_put f32: CVA gpu {} cpu {} (std error {})",
        f(g, "cva"),
        f(c, "cva"),
        f(c, "cva_std_error")
    );
    assert!((f(g, "cva") - f(c, "cva")).abs() <= 0.05 * f(c, "cva_std_error"));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn long_european_call_cva_matches_closed_form_on_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let s = run_json(
        &scenario("european_call.yaml"),
        dir.path(),
        &["--backend", "gpu"],
    );
    assert_eq!(s["backend"].as_str(), Some("gpu"));
    check_european_closed_form(&s, true, "GPU");
}

#[test]
fn backend_gpu_without_a_gpu_is_a_clear_error() {
    // Only meaningful where there is no GPU (CI); on the GPU machine it is skipped.
    if cva_kernels::cuda::probe().is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let o = cva(&[
        "run",
        scenario("european_call.yaml").to_str().unwrap(),
        "--backend",
        "gpu",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("backend gpu: not available"), "{err}");
    assert!(!dir.path().join("summary.parquet").exists());
    // auto falls back to the CPU with a one-line message.
    let o = cva(&[
        "run",
        scenario("european_call.yaml").to_str().unwrap(),
        "--backend",
        "auto",
        "--set",
        "simulation.outer_paths=200",
        "--no-report",
        "--json",
    ]);
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("backend auto: running on the CPU"), "{err}");
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["backend"].as_str(), Some("cpu"));
}
