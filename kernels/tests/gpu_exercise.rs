//! The streaming exercise update (`engine_exercise_stream_*`, `EngineKernels::exercise`)
//! decides from the high words of the inner states (all that the regression basis reads:
//! `cva_kernels::basis::high_word`) and the payoffs the regression build stored
//! (`engine_exercises_high` in `engine.cu`). Here its cash flows, dates and discounted
//! cash flows are compared bitwise with an independent host evaluation of the decision
//! (the engine's arithmetic: `payoff > 0` and `payoff >= psi . beta`, the sum
//! `((0 + 1 beta_0) + psi_1 beta_1) + ...` of unfused products, psi of the prices'
//! high words; the mean of `y` where no coefficients apply), on inputs put on the
//! decision's edge.
//!
//! Hard cases, named in the output: in every outer path one inner path whose
//! continuation is set to its payoff plus a relative offset from 0 to +-2^-12 (the test
//! checks that the full prices would have decided some of them otherwise, so that a
//! kernel reading the low words into the basis fails it), states that are zero,
//! subnormal, infinite or NaN with a payload in the low word only, outer paths without
//! coefficients (the mean), with too few regression paths, and not alive; a flat (linear)
//! and a quadratic basis; a maximum call and a basket put; 45 inner paths (a partial
//! tile).
//!
//! GPU tests are `#[ignore = "needs a CUDA GPU"]` (CI has no GPU); run the test binary
//! with `--include-ignored` on the GPU machine. Every output is compared in full: the
//! cash flows and dates start from known values the kernel must keep where nothing is
//! exercised, and y (an input of the mean) is rewritten for every inner path.

mod common;
use common::stream;
use cudarc::driver::CudaSlice;
use cva_kernels::basis::BasisTables;
use cva_kernels::cuda::engine::{DeviceBasis, DevicePayoff, EngineKernels, StateView};
use cva_kernels::cuda::paths::states_to_planes;
use cva_kernels::cuda::regression::{GpuOptionKind, GpuPayoff, GpuUnderlying};
use cva_kernels::cuda::GpuReport;
use cva_kernels::families::SplitMix64;

/// The continuation `psi . beta` of prices `s`, each read through `read`, as
/// `engine_exercises` forms it.
fn continuation_of(basis: &BasisTables, s: &[f64], beta: &[f64], read: fn(f64) -> f64) -> f64 {
    let n = basis.len();
    let flat = basis.parent.iter().all(|&p| p == 0);
    let mut c = 0.0;
    c += 1.0 * beta[0];
    let mut psi = vec![1.0; n];
    for k in 1..n {
        let v = basis.var[k];
        let x = read(s[basis.assets[v]]) * basis.inv_spot[v];
        psi[k] = if flat { x } else { psi[basis.parent[k]] * x };
        c += psi[k] * beta[k];
    }
    c
}

/// The high word of `x` alone (its low 32 bits cleared), written out here rather than
/// taken from the crate.
fn high(x: f64) -> f64 {
    f64::from_bits(x.to_bits() & 0xffff_ffff_0000_0000)
}

/// The engine's continuation: the basis of the prices' high words.
fn continuation(basis: &BasisTables, s: &[f64], beta: &[f64]) -> f64 {
    continuation_of(basis, s, beta, high)
}

struct Case {
    name: &'static str,
    d: usize,
    basis: BasisTables,
    payoff: GpuPayoff,
}

fn cases() -> Vec<Case> {
    let spots5 = [1.0, 1.25, 0.8, 1.0, 2.0];
    let max_call = GpuPayoff {
        underlying: GpuUnderlying::Max(vec![0, 1, 2, 3, 4]),
        kind: GpuOptionKind::Call,
        strike: 1.0,
    };
    let basket_put = GpuPayoff {
        underlying: GpuUnderlying::Basket(vec![(0, 0.5), (1, 0.3), (2, 0.2)]),
        kind: GpuOptionKind::Put,
        strike: 1.05,
    };
    vec![
        Case {
            name: "max call, linear basis (flat, n = 6)",
            d: 5,
            basis: BasisTables::monomials(1, &[0, 1, 2, 3, 4], &spots5),
            payoff: max_call,
        },
        Case {
            name: "basket put, quadratic basis (n = 10)",
            d: 3,
            basis: BasisTables::monomials(2, &[0, 1, 2], &spots5[..3]),
            payoff: basket_put,
        },
    ]
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn streaming_exercise_decides_exactly_on_the_edge() {
    let Some(stream) = stream() else { return };
    let kernels = EngineKernels::new(&stream).expect("engine kernels");
    let (c, m) = (48usize, 45usize);
    let (date, next) = (5u32, 4u32);
    let discount: Vec<f64> = (0..=6).map(|i| (-0.01 * i as f64).exp()).collect();
    // Relative offsets 0, +-2^-52, +-2^-45, ..., +-2^-12.
    let offsets: Vec<f64> = std::iter::once(0.0)
        .chain(
            [52, 45, 36, 30, 24, 21, 18, 12]
                .iter()
                .flat_map(|&e| [2f64.powi(-e), -(2f64.powi(-e))]),
        )
        .collect();
    for (ci, case) in cases().iter().enumerate() {
        let (d, n) = (case.d, case.basis.len());
        let mut rng = SplitMix64::new(0x5eed_0000 + ci as u64);
        let mut states: Vec<f64> = (0..c * m * d).map(|_| 0.6 + 0.9 * rng.uniform()).collect();
        let mut beta = vec![0.0; c * n];
        for l in 0..c {
            for k in 1..n {
                beta[l * n + k] = 4.0 * rng.uniform() - 2.0;
            }
        }
        // Special states (asset 1 is in every payoff and basis here).
        let special = [
            0.0,
            f64::MIN_POSITIVE / 8.0,
            f64::INFINITY,
            f64::from_bits(0x7ff0_0000_0000_0001),
        ];
        for (k, &v) in special.iter().enumerate() {
            states[((3 + 7 * k) * m + 11 + k) * d + 1] = v;
        }
        let payoffs: Vec<f64> = (0..c * m)
            .map(|t| case.payoff.value(&states[t * d..(t + 1) * d]))
            .collect();
        // In every outer path, inner path p = (7 l) % m sits on the edge: beta_0 makes
        // its continuation its payoff (or, out of the money, 0.1), then moves it by the
        // offset of this outer path.
        let mut edge = Vec::new();
        for l in 0..c {
            let p = (7 * l) % m;
            let t = l * m + p;
            let s = &states[t * d..(t + 1) * d];
            let target = if payoffs[t] > 0.0 { payoffs[t] } else { 0.1 };
            let bl = &mut beta[l * n..(l + 1) * n];
            bl[0] = 0.0;
            let rest = continuation(&case.basis, s, bl);
            bl[0] = target - rest;
            let off = offsets[l % offsets.len()];
            bl[0] += off * target;
            edge.push((l, p, off));
        }
        let alive: Vec<u8> = (0..c).map(|l| u8::from(l != 5)).collect();
        let counts: Vec<u32> = (0..c)
            .map(|l| match l {
                9 => (n - 1) as u32, // too few regression paths: the mean
                13 => 0,             // no regression path: no part
                _ => m as u32,
            })
            .collect();
        let reports: Vec<GpuReport> = (0..c)
            .map(|l| GpuReport {
                residual: 0.0,
                method: if l == 17 { 3 } else { (l % 3) as u32 },
                status: u32::from(l == 21),
            })
            .collect();
        let y_in: Vec<f64> = (0..c * m).map(|_| 0.3 * rng.uniform()).collect();
        let cash_in: Vec<f64> = (0..c * m).map(|_| 0.5 * rng.uniform()).collect();
        let date_in: Vec<u32> = (0..c * m).map(|t| 6 - (t % 2) as u32).collect();

        // The host's exact decisions.
        let (mut cash_ref, mut date_ref, mut y_ref) =
            (cash_in.clone(), date_in.clone(), y_in.clone());
        let mut exercised = 0;
        for l in 0..c {
            let active = alive[l] != 0 && counts[l] > 0;
            let r = &reports[l];
            let ok = active && counts[l] as usize >= n && r.status == 0 && (r.method & 0xff) <= 2;
            let mean = if active && !ok {
                let mut sum = 0.0;
                for mm in 0..m {
                    if payoffs[l * m + mm] > 0.0 {
                        sum += y_in[l * m + mm];
                    }
                }
                sum / counts[l] as f64
            } else {
                0.0
            };
            for mm in 0..m {
                let t = l * m + mm;
                let p = payoffs[t];
                let ex = active && p > 0.0 && {
                    let cont = if ok {
                        continuation(
                            &case.basis,
                            &states[t * d..(t + 1) * d],
                            &beta[l * n..(l + 1) * n],
                        )
                    } else {
                        mean
                    };
                    p >= cont
                };
                if ex {
                    cash_ref[t] = p;
                    date_ref[t] = date;
                    exercised += 1;
                }
                y_ref[t] = cash_ref[t] * discount[(date_ref[t] - next) as usize];
            }
        }
        // The test's teeth: decisions the full prices would take otherwise.
        let mut wrong_if_full = 0;
        for &(l, p, _) in &edge {
            let t = l * m + p;
            let r = &reports[l];
            let ok =
                alive[l] != 0 && counts[l] as usize >= n && r.status == 0 && (r.method & 0xff) <= 2;
            if !ok || payoffs[t].is_nan() || payoffs[t] <= 0.0 {
                continue;
            }
            let s = &states[t * d..(t + 1) * d];
            let bl = &beta[l * n..(l + 1) * n];
            let engine = payoffs[t] >= continuation(&case.basis, s, bl);
            let full = payoffs[t] >= continuation_of(&case.basis, s, bl, |x| x);
            wrong_if_full += usize::from(engine != full);
        }

        // The device.
        let planes = states_to_planes(&states, m * d);
        let states_dev = stream.clone_htod(&planes).unwrap();
        let beta_dev = stream.clone_htod(&beta).unwrap();
        let reports_dev = stream.clone_htod(&reports).unwrap();
        let alive_dev = stream.clone_htod(&alive).unwrap();
        let counts_dev = stream.clone_htod(&counts).unwrap();
        let payoffs_dev = stream.clone_htod(&payoffs).unwrap();
        let discount_dev = stream.clone_htod(&discount).unwrap();
        let mut y_dev: CudaSlice<f64> = stream.clone_htod(&y_in).unwrap();
        let mut cash_dev = stream.clone_htod(&cash_in).unwrap();
        let mut date_dev = stream.clone_htod(&date_in).unwrap();
        let payoff_dev = DevicePayoff::new(&stream, &case.payoff).unwrap();
        let basis_dev = DeviceBasis::new(&stream, &case.basis).unwrap();
        let view = states_dev.slice(..);
        kernels
            .exercise::<f64>(
                StateView {
                    states: &view,
                    stride: m * d,
                    c,
                    m,
                    d,
                },
                &payoff_dev,
                true,
                &basis_dev,
                &beta_dev.slice(..),
                &reports_dev.slice(..),
                &alive_dev.slice(..),
                &counts_dev.slice(..),
                &payoffs_dev.slice(..),
                &discount_dev.slice(..),
                (date, Some(next)),
                &mut y_dev.slice_mut(..),
                &mut cash_dev.slice_mut(..),
                &mut date_dev.slice_mut(..),
            )
            .unwrap();
        let cash = stream.clone_dtoh(&cash_dev).unwrap();
        let dates = stream.clone_dtoh(&date_dev).unwrap();
        let y = stream.clone_dtoh(&y_dev).unwrap();
        let mut differ = 0;
        for t in 0..c * m {
            if cash[t].to_bits() != cash_ref[t].to_bits()
                || dates[t] != date_ref[t]
                || y[t].to_bits() != y_ref[t].to_bits()
            {
                differ += 1;
                eprintln!(
                    "{}: ({}, {}): cash {} / {}, date {} / {}, y {} / {}",
                    case.name,
                    t / m,
                    t % m,
                    cash[t],
                    cash_ref[t],
                    dates[t],
                    date_ref[t],
                    y[t],
                    y_ref[t]
                );
            }
        }
        println!(
            "{}: {} inner paths, {exercised} exercised, {} on the edge ({wrong_if_full} \
             that the full prices would decide otherwise), {differ} differences",
            case.name,
            c * m,
            edge.len()
        );
        assert_eq!(differ, 0, "{}", case.name);
        assert!(
            wrong_if_full > 0,
            "{}: no edge case tells the high words from the full prices",
            case.name
        );
        assert!(exercised > 0 && exercised < c * m, "{}", case.name);
    }
}
