//! `simulation.value_t0`: the inner stage at `t_0` is optional, and it changes only the
//! value at `t_0` and the profile's `t_0` row. The CVA sums the exposures at
//! `t_1 .. t_N` (Abbas-Turki & Graillat 2016, formula (2); their nested simulation runs
//! the inner stage at `t_1 .. t_{N-1}`).

mod common;
use common::*;
use cva::engine::{simulate, NestedSimulation, NoProgress};
use cva::exposure::{estimate, CvaEstimate};
use cva::scenario::{Scenario, ValueT0};

fn run(name: &str, sets: &[&str], value_t0: ValueT0) -> (Scenario, NestedSimulation, CvaEstimate) {
    let mut sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    sets.push(format!("simulation.value_t0={}", value_t0.name()));
    let sc = Scenario::load(&scenario(name), &sets).unwrap();
    assert_eq!(sc.simulation.value_t0, value_t0);
    let sim = simulate::<f64>(&sc, &NoProgress, None);
    let est = estimate(&sc, &sim.netted_values, sim.outer_paths);
    (sc, sim, est)
}

/// The netting set (European and American positions, correlated assets, a hazard curve):
/// the default and the nested run share every bit after `t_0`. (In f64 the escalation's
/// memory rule takes the same path here in both runs; in f32 it need not, see
/// `ValueT0`.)
#[test]
fn the_inner_stage_at_t0_changes_only_the_value_at_t0() {
    let sets = ["simulation.outer_paths=96", "simulation.inner_paths=60"];
    let (sc, plain, e) = run("netting_set.yaml", &sets, ValueT0::DiscountedT1);
    let (_, nested, en) = run("netting_set.yaml", &sets, ValueT0::Nested);
    let (m0, n) = (plain.outer_paths, sc.exposure_dates);

    // The CVA, the values at t_1..t_N and their rows: the same bits.
    assert_eq!(e.cva.to_bits(), en.cva.to_bits());
    assert_eq!(e.cva_std_error.to_bits(), en.cva_std_error.to_bits());
    for k in 1..=n {
        let (a, b) = (
            &plain.netted_values[k * m0..][..m0],
            &nested.netted_values[k * m0..][..m0],
        );
        assert!(
            a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "values at t_{k} differ"
        );
        assert_eq!(e.profile[k], en.profile[k], "row {k}");
    }
    assert_eq!(plain.outer_exercises, nested.outer_exercises);

    // The regressions: the nested run's steps at t_0 are extra, the rest equal.
    assert!(plain.steps.iter().all(|s| s.exposure_date >= 1));
    let at0: Vec<_> = nested
        .steps
        .iter()
        .filter(|s| s.exposure_date == 0)
        .collect();
    // Two American positions maturing at t_16: exercise dates 1..15 from t_0, each.
    assert_eq!(at0.len(), 15);
    let later: Vec<_> = nested
        .steps
        .iter()
        .filter(|s| s.exposure_date >= 1)
        .collect();
    assert_eq!(later.len(), plain.steps.len());
    for (a, b) in plain.steps.iter().zip(later) {
        assert_eq!(
            (a.exposure_date, a.exercise_date),
            (b.exposure_date, b.exercise_date)
        );
        assert_eq!(a.summary.systems, b.summary.systems);
        assert_eq!(a.residuals, b.residuals);
    }

    // Default: V_0 = e^{-r t_1} E[P_1] with the standard error of that mean.
    let p1 = &plain.netted_values[m0..2 * m0];
    let mean = p1.iter().sum::<f64>() / m0 as f64;
    let var = p1.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (m0 - 1) as f64;
    let d1 = (-sc.market.rate * sc.time(1)).exp();
    assert!((e.value_t0 - d1 * mean).abs() <= 1e-12 * mean.abs());
    assert!(
        (e.value_t0_std_error - d1 * (var / m0 as f64).sqrt()).abs() <= 1e-9 * e.value_t0_std_error
    );
    // Its t_0 row: the deterministic exposure V_0.
    let r0 = &e.profile[0];
    assert_eq!(r0.date_index, 0);
    assert_eq!(r0.ee, e.value_t0);
    assert_eq!(r0.epe, e.value_t0.max(0.0));
    assert_eq!(r0.ene, e.value_t0.min(0.0));
    assert_eq!(r0.pfe, e.value_t0.max(0.0));
    assert_eq!(r0.cva_contribution, 0.0);

    // Nested: the mean of the inner estimates at t_0, which spread over the outer paths.
    let p0 = &nested.netted_values[..m0];
    let mean0 = p0.iter().sum::<f64>() / m0 as f64;
    assert!((en.value_t0 - mean0).abs() <= 1e-12 * mean0.abs());
    assert!(en.value_t0_std_error > 0.0);
    assert!(en.profile[0].pfe > en.profile[0].epe);
    println!(
        "V_0: discounted t_1 {} ± {}, nested {} ± {}",
        e.value_t0, e.value_t0_std_error, en.value_t0, en.value_t0_std_error
    );
}

/// For a European call both estimators are unbiased: each within 4 standard errors of
/// Black–Scholes. The default one's error holds the spread of the outer paths' values at
/// t_1 as well as the inner noise, so it is the larger of the two.
#[test]
fn both_values_at_t0_of_a_european_call_match_black_scholes() {
    let sets = ["simulation.outer_paths=400", "simulation.inner_paths=200"];
    let bs = black_scholes(true, 100.0, 100.0, 0.05, 0.0, 0.2, 1.0);
    let (_, _, e) = run("european_call.yaml", &sets, ValueT0::DiscountedT1);
    let (_, _, en) = run("european_call.yaml", &sets, ValueT0::Nested);
    println!(
        "V_0: discounted t_1 {} ± {}, nested {} ± {}, Black-Scholes {bs}",
        e.value_t0, e.value_t0_std_error, en.value_t0, en.value_t0_std_error
    );
    for x in [&e, &en] {
        assert!((x.value_t0 - bs).abs() <= 4.0 * x.value_t0_std_error);
    }
    assert!(e.value_t0_std_error > en.value_t0_std_error);
}
