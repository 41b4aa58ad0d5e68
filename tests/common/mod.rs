//! Helpers shared by the integration tests: run the `cva` binary and read its output.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root; `CVA_ROOT` overrides it (and `CVA_BIN` the binary) so that a
/// test binary can run on a machine where the build paths do not exist (the GPU machine).
pub fn root() -> PathBuf {
    std::env::var_os("CVA_ROOT")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

pub fn scenario(name: &str) -> PathBuf {
    root().join("scenarios").join(name)
}

/// Runs `cva ARGS` in the repository root.
pub fn cva(args: &[&str]) -> Output {
    cva_env(args, &[])
}

/// Runs `cva ARGS` in the repository root with the environment variables `env` set.
pub fn cva_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let bin = std::env::var_os("CVA_BIN")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cva")), PathBuf::from);
    Command::new(bin)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(root())
        .output()
        .expect("the cva binary runs")
}

/// `cva run SCENARIO --json --quiet --out OUT EXTRA...`, asserting success; returns the
/// summary object.
pub fn run_json(scenario: &Path, out: &Path, extra: &[&str]) -> serde_json::Value {
    run_json_env(scenario, out, extra, &[])
}

/// [`run_json`] with the environment variables `env` set for the run.
pub fn run_json_env(
    scenario: &Path,
    out: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> serde_json::Value {
    let mut args = vec![
        "run",
        scenario.to_str().unwrap(),
        "--json",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = cva_env(&args, env);
    assert!(
        o.status.success(),
        "cva {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("--json prints one JSON object")
}

pub fn f(v: &serde_json::Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("key {key} missing in {v}"))
}

/// Standard normal density.
pub fn phi(z: f64) -> f64 {
    (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt()
}

/// Black–Scholes price of a European call or put, by Simpson integration of the payoff
/// against the normal density over [-12, 12] (error far below 1e-9 here): independent
/// of the engine's code.
pub fn black_scholes(call: bool, s0: f64, k: f64, r: f64, q: f64, sigma: f64, t: f64) -> f64 {
    let n = 200_000;
    let (a, b) = (-12.0, 12.0);
    let h = (b - a) / n as f64;
    let g = |z: f64| {
        let s = s0 * ((r - q - 0.5 * sigma * sigma) * t + sigma * t.sqrt() * z).exp();
        let payoff = if call {
            (s - k).max(0.0)
        } else {
            (k - s).max(0.0)
        };
        payoff * phi(z)
    };
    let mut sum = g(a) + g(b);
    for i in 1..n {
        let w = if i % 2 == 1 { 4.0 } else { 2.0 };
        sum += w * g(a + i as f64 * h);
    }
    (-r * t).exp() * sum * h / 3.0
}

/// Checks a `cva run --json` summary of `scenarios/european_call.yaml` (kind `call` or
/// put): for a long European option the discounted exposure is a martingale, so
/// CVA = (1 - R) V0 (1 - e^{-λT}) within 3 of the run's standard errors, and the value at
/// t0 equals Black–Scholes within 3 standard errors.
pub fn check_european_closed_form(s: &serde_json::Value, call: bool, label: &str) {
    let v0 = black_scholes(call, 100.0, 100.0, 0.05, 0.0, 0.2, 1.0);
    let (lambda, r, t) = (f(s, "hazard_rate"), f(s, "recovery_rate"), f(s, "horizon"));
    let expected = (1.0 - r) * v0 * (1.0 - (-lambda * t).exp());
    let (cva, se) = (f(s, "cva"), f(s, "cva_std_error"));
    println!("{label}: CVA {cva} ± {se}, closed form {expected}, V0 {v0}");
    assert!(
        se > 0.0 && se < 0.05 * expected,
        "standard error {se} implausible"
    );
    assert!(
        (cva - expected).abs() <= 3.0 * se,
        "{label}: CVA {cva} differs from the closed form {expected} by more than 3 standard errors ({se})"
    );
    let (v, vse) = (f(s, "value_t0"), f(s, "value_t0_std_error"));
    assert!(
        (v - v0).abs() <= 3.0 * vse,
        "V0 {v} ± {vse} vs Black–Scholes {v0}"
    );
}
