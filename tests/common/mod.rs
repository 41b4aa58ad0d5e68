//! Helpers shared by the integration tests: run the `cva` binary and read its output.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn scenario(name: &str) -> PathBuf {
    root().join("scenarios").join(name)
}

/// Runs `cva ARGS` in the repository root.
pub fn cva(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cva"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("the cva binary runs")
}

/// `cva run SCENARIO --json --quiet --out OUT EXTRA...`, asserting success; returns the
/// summary object.
pub fn run_json(scenario: &Path, out: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "run",
        scenario.to_str().unwrap(),
        "--json",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = cva(&args);
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
