//! Closed-form check: for a long European option (maturity T), discounted exposure is a
//! martingale, so CVA = (1 - R) V0 (1 - e^{-λT}) for a flat hazard rate λ.

mod common;
use common::*;

fn check(kind: &str, extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["--set", kind];
    args.extend_from_slice(extra);
    let s = run_json(&scenario("european_call.yaml"), dir.path(), &args);
    let call = kind.ends_with("call");
    let v0 = black_scholes(call, 100.0, 100.0, 0.05, 0.0, 0.2, 1.0);
    let (lambda, r, t) = (
        f(&s, "hazard_rate"),
        f(&s, "recovery_rate"),
        f(&s, "horizon"),
    );
    let expected = (1.0 - r) * v0 * (1.0 - (-lambda * t).exp());
    let (cva, se) = (f(&s, "cva"), f(&s, "cva_std_error"));
    println!("{kind}: CVA {cva} ± {se}, closed form {expected}, V0 {v0}");
    assert!(
        se > 0.0 && se < 0.05 * expected,
        "standard error {se} implausible"
    );
    assert!(
        (cva - expected).abs() <= 3.0 * se,
        "{kind}: CVA {cva} differs from the closed form {expected} by more than 3 standard errors ({se})"
    );
    let (v, vse) = (f(&s, "value_t0"), f(&s, "value_t0_std_error"));
    assert!(
        (v - v0).abs() <= 3.0 * vse,
        "V0 {v} ± {vse} vs Black–Scholes {v0}"
    );
}

#[test]
fn long_european_call_cva_matches_closed_form() {
    check("portfolio[0].kind=call", &[]);
}

#[test]
fn long_european_put_cva_matches_closed_form() {
    check("portfolio[0].kind=put", &["--set", "simulation.seed=99"]);
}
