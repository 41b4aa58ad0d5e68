//! Closed-form check: for a long European option (maturity T), discounted exposure is a
//! martingale, so CVA = (1 - R) V0 (1 - e^{-λT}) for a flat hazard rate λ.

mod common;
use common::*;

fn check(kind: &str, extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["--set", kind];
    args.extend_from_slice(extra);
    let s = run_json(&scenario("european_call.yaml"), dir.path(), &args);
    check_european_closed_form(&s, kind.ends_with("call"), kind);
}

#[test]
fn long_european_call_cva_matches_closed_form() {
    check("portfolio[0].kind=call", &[]);
}

#[test]
fn long_european_put_cva_matches_closed_form() {
    check("portfolio[0].kind=put", &["--set", "simulation.seed=99"]);
}
