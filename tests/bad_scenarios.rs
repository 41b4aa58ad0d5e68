//! Every kind of bad scenario: exit code 2, a message naming the field, no report.

mod common;
use common::*;
use std::path::Path;

/// Writes `text` to a scenario file, runs it, and checks the failure.
fn rejects(text: &str, extra: &[&str], field: &str, words: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.yaml");
    std::fs::write(&file, text).unwrap();
    let out = dir.path().join("report");
    let mut args = vec![
        "run",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = cva(&args);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(2),
        "expected exit code 2, stderr: {stderr}"
    );
    assert!(
        stderr.contains(field),
        "message does not name `{field}`: {stderr}"
    );
    assert!(
        stderr.contains(words),
        "message does not say `{words}`: {stderr}"
    );
    assert!(!Path::new(&out).exists(), "a report directory was created");
}

fn american_put() -> String {
    std::fs::read_to_string(scenario("american_put.yaml")).unwrap()
}

fn netting_set() -> String {
    std::fs::read_to_string(scenario("netting_set.yaml")).unwrap()
}

fn replace(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "test setup: `{from}` not in scenario");
    text.replacen(from, to, 1)
}

#[test]
fn unknown_field() {
    let t = replace(
        &american_put(),
        "  rate: 0.06\n",
        "  rate: 0.06\n  rates: 0.07\n",
    );
    rejects(&t, &[], "market", "unknown field `rates`");
}

#[test]
fn unknown_field_reports_line() {
    let t = replace(
        &american_put(),
        "  rate: 0.06\n",
        "  rate: 0.06\n  rates: 0.07\n",
    );
    rejects(&t, &[], "line ", "unknown field");
}

#[test]
fn missing_field() {
    let t = replace(&american_put(), "  recovery_rate: 0.4\n", "");
    rejects(&t, &[], "counterparty", "missing field `recovery_rate`");
}

#[test]
fn non_positive_spot() {
    let t = replace(&american_put(), "spot: 36.0", "spot: 0.0");
    rejects(&t, &[], "market.assets[0].spot", "positive");
}

#[test]
fn negative_volatility() {
    let t = replace(&american_put(), "volatility: 0.2", "volatility: -0.2");
    rejects(&t, &[], "market.assets[0].volatility", "positive");
}

#[test]
fn correlation_not_positive_semidefinite() {
    let t = replace(&netting_set(), "[1.0, 0.5, 0.3]", "[1.0, 0.99, -0.99]");
    let t = replace(&t, "[0.5, 1.0, 0.4]", "[0.99, 1.0, 0.99]");
    let t = replace(&t, "[0.3, 0.4, 1.0]", "[-0.99, 0.99, 1.0]");
    rejects(&t, &[], "market.correlation", "positive semi-definite");
}

#[test]
fn correlation_not_symmetric() {
    let t = replace(&netting_set(), "[1.0, 0.5, 0.3]", "[1.0, 0.2, 0.3]");
    rejects(&t, &[], "market.correlation", "symmetric");
}

#[test]
fn correlation_wrong_size() {
    let t = replace(&netting_set(), "    - [0.3, 0.4, 1.0]\n", "");
    rejects(&t, &[], "market.correlation", "3 x 3");
}

#[test]
fn maturity_beyond_horizon() {
    let t = replace(&american_put(), "maturity: 1.0", "maturity: 1.5");
    rejects(&t, &[], "portfolio[0].maturity", "beyond the horizon");
}

#[test]
fn unknown_asset_name() {
    let t = replace(&american_put(), "{asset: S}", "{asset: SX}");
    rejects(
        &t,
        &[],
        "portfolio[0].underlying.asset",
        "unknown asset `SX`",
    );
}

#[test]
fn unknown_asset_in_basket() {
    let t = replace(&netting_set(), "EQ2: 0.3, EQ3", "EQ2: 0.3, EQ9");
    rejects(
        &t,
        &[],
        "portfolio[2].underlying.basket.EQ9",
        "unknown asset",
    );
}

#[test]
fn fewer_inner_paths_than_basis_functions() {
    rejects(
        &american_put(),
        &["--set", "simulation.inner_paths=3"],
        "simulation.inner_paths",
        "fewer than the 4 basis functions",
    );
}

#[test]
fn antithetic_with_an_odd_number_of_inner_paths() {
    rejects(
        &american_put(),
        &[
            "--set",
            "simulation.inner_paths=301",
            "--set",
            "simulation.antithetic=true",
        ],
        "simulation.antithetic",
        "even",
    );
}

#[test]
fn unknown_value_t0_method() {
    rejects(
        &american_put(),
        &["--set", "simulation.value_t0=at_t1"],
        "simulation.value_t0",
        "`discounted_t1` or `nested`",
    );
}

#[test]
fn recovery_outside_unit_interval() {
    let t = replace(&american_put(), "recovery_rate: 0.4", "recovery_rate: 1.5");
    rejects(&t, &[], "counterparty.recovery_rate", "[0, 1]");
}

#[test]
fn nan_anywhere() {
    let t = replace(&american_put(), "strike: 40.0", "strike: .nan");
    rejects(&t, &[], "portfolio[0].strike", "finite");
    let t = replace(&american_put(), "hazard_rate: 0.02", "hazard_rate: .nan");
    rejects(&t, &[], "counterparty.hazard_rate", "finite");
}

#[test]
fn malformed_yaml_names_the_line() {
    let t = replace(&american_put(), "  horizon: 1.0\n", "  horizon: [1.0\n");
    rejects(&t, &[], "line ", "");
}

#[test]
fn bad_override() {
    rejects(
        &american_put(),
        &["--set", "simulation.outer_paths=-5"],
        "simulation.outer_paths",
        "",
    );
    rejects(
        &american_put(),
        &["--set", "simulation.colour=red"],
        "simulation",
        "unknown field `colour`",
    );
}

#[test]
fn unknown_solver_strategy() {
    rejects(
        &american_put(),
        &["--set", "simulation.solver=cholesky"],
        "simulation.solver",
        "unknown strategy",
    );
}
