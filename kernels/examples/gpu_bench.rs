//! Checks the GPU solvers and times them against cuSOLVER.
//!
//! ```text
//! cargo run --release -p cva-kernels --example gpu_bench -- [check|quick|full] [REPORT.md]
//! ```
//! `check`: correctness only. `quick`: check, then n = 30 only. `full` (default): check,
//! then n in 4, 8, 16, 30, 32, 48, 64, f32 and f64, every organisation and the n*
//! sweeps, batch 2^20 (less where 10 GiB of matrices would be exceeded).
//!
//! The correctness check needs no CPU solver: it recomputes every reported residual on
//! the host with `relative_residual` (same arithmetic, so the values must be equal) and
//! checks statuses on systems with known answers (a NaN entry, an indefinite matrix,
//! random SPD Gram matrices). When the CPU reference `solve_batched` is available it
//! also compares statuses and solutions with it.

use cva_kernels::batch::relative_residual;
use cva_kernels::cuda::bench::BenchVariant;
use cva_kernels::cuda::{
    bench_solvers, probe, BenchConfig, GpuBatchSolver, GpuOptions, GpuReal, LdltOrganisation,
};
use cva_kernels::families::SplitMix64;
use cva_kernels::{
    solve_batched, Method, SolverParams, Status, Strategy, SymmetricBatch, SystemReport,
};
use std::process::ExitCode;

/// `batch` systems: 0 has a NaN entry, 1 is `-I` (indefinite), the others are Gram
/// matrices `G G^T / (2n)` of `n x 2n` uniform `G` plus `0.01 I`.
fn random_batch<T: GpuReal>(n: usize, batch: usize, seed: u64) -> (Vec<T>, Vec<T>) {
    let mut rng = SplitMix64::new(seed);
    let m = 2 * n;
    let mut a = vec![T::ZERO; batch * n * n];
    let mut b = vec![T::ZERO; batch * n];
    let mut g = vec![0.0f64; n * m];
    for s in 0..batch {
        for v in g.iter_mut() {
            *v = 2.0 * rng.uniform() - 1.0;
        }
        for c in 0..n {
            for r in 0..n {
                let mut acc = 0.0;
                for k in 0..m {
                    acc += g[r + k * n] * g[c + k * n];
                }
                let mut v = acc / m as f64;
                if r == c {
                    v += 0.01;
                }
                a[s * n * n + r + c * n] = T::from_f64(v);
            }
        }
        for i in 0..n {
            b[s * n + i] = T::from_f64(2.0 * rng.uniform() - 1.0);
        }
    }
    if batch > 0 {
        a[n * n - 1] = T::NAN; // (n-1, n-1): in the lower triangle
    }
    if batch > 1 {
        for c in 0..n {
            for r in 0..n {
                a[n * n + r + c * n] = T::from_f64(if r == c { -1.0 } else { 0.0 });
            }
        }
    }
    (a, b)
}

/// Returns the number of problems found.
fn check<T: GpuReal>(solver: &GpuBatchSolver) -> usize {
    // GPU_BENCH_CHECK_ALL: every n in 1..=64, tuned L D L^T and Householder + PCR only
    // (GPU_BENCH_CHECK_ALL=ldlt: tuned L D L^T only).
    let all_var = std::env::var("GPU_BENCH_CHECK_ALL").ok();
    let all = all_var.is_some();
    let hh = all_var.as_deref() != Some("ldlt");
    // GPU_BENCH_CHECK_SIZES=lo-hi: only n in lo..=hi (to split the check over processes).
    let (lo, hi) = std::env::var("GPU_BENCH_CHECK_SIZES")
        .ok()
        .and_then(|v| {
            let (a, b) = v.split_once('-')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .unwrap_or((1, 64));
    let sizes: Vec<usize> = if all {
        (lo..=hi).collect()
    } else {
        vec![1, 2, 3, 7, 16, 30, 31, 33, 63, 64]
    };
    let batch = 300;
    let params = SolverParams::default();
    let organisations: &[LdltOrganisation] = if all {
        &[LdltOrganisation::Auto]
    } else {
        &[
            LdltOrganisation::Auto,
            LdltOrganisation::Simd,
            LdltOrganisation::Collaborative,
            LdltOrganisation::Hybrid { nstar: 64 },
        ]
    };
    let variants_for = |n: usize| {
        let mut v: Vec<(Strategy, GpuOptions, String)> = Vec::new();
        for &o in organisations {
            v.push((
                Strategy::Ldlt,
                GpuOptions {
                    ldlt: o,
                    householder_nstar: None,
                    ..Default::default()
                },
                format!("ldlt {o:?}"),
            ));
        }
        let hh_nstars: &[Option<usize>] = if !hh {
            &[]
        } else if all {
            &[None]
        } else {
            &[None, Some(64), Some(n.next_power_of_two())]
        };
        for &nstar in hh_nstars {
            v.push((
                Strategy::HouseholderPcr,
                GpuOptions {
                    ldlt: LdltOrganisation::Auto,
                    householder_nstar: nstar,
                    ..Default::default()
                },
                format!("householder-pcr n*={nstar:?}"),
            ));
        }
        v
    };
    // Compile all in parallel first.
    let mut keys = Vec::new();
    for &n in &sizes {
        for (s, o, _) in &variants_for(n) {
            keys.push(solver.kernel_key::<T>(n, *s, o).expect("kernel key").0);
        }
    }
    let t0 = std::time::Instant::now();
    if let Err(e) = solver.modules().precompile(&keys) {
        println!("COMPILE ERROR: {e}");
        return 1;
    }
    println!(
        "{}: compiled {} modules in {:.1} s",
        T::NAME,
        keys.len(),
        t0.elapsed().as_secs_f64()
    );
    let mut problems = 0;
    for &n in &sizes {
        let (a, b) = random_batch::<T>(n, batch, 1000 + n as u64);
        let sb = SymmetricBatch::new(n, &a, &b);
        // CPU reference, if already implemented.
        let cpu = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut x = vec![T::NAN; batch * n];
            let mut r = vec![SystemReport::default(); batch];
            let s = solve_batched(&sb, &mut x, &mut r, Strategy::Ldlt, &params, Method::Ldlt);
            let mut xh = vec![T::NAN; batch * n];
            let mut rh = vec![SystemReport::default(); batch];
            solve_batched(
                &sb,
                &mut xh,
                &mut rh,
                Strategy::HouseholderPcr,
                &params,
                Method::Ldlt,
            );
            let _ = s;
            ((x, r), (xh, rh))
        }))
        .ok();
        for (strategy, options, name) in &variants_for(n) {
            let mut x = vec![T::NAN; batch * n];
            let mut reps = vec![SystemReport::default(); batch];
            if let Err(e) =
                solver.solve_batched_host(&sb, &mut x, &mut reps, *strategy, &params, options)
            {
                println!("n={n} {} {name}: ERROR {e}", T::NAME);
                problems += 1;
                continue;
            }
            let tol = 64.0 * n as f64 * T::EPSILON.to_f64();
            let (mut max_res, mut bad) = (0.0f64, Vec::new());
            for i in 0..batch {
                let r = reps[i];
                let xi = &x[i * n..(i + 1) * n];
                let expect = match (i, strategy) {
                    (0, _) => Status::NonFiniteInput,
                    (1, Strategy::Ldlt) => Status::NotPositiveDefinite,
                    _ => Status::Ok,
                };
                if r.status != expect {
                    bad.push(format!(
                        "sys {i}: status {:?} expected {expect:?}",
                        r.status
                    ));
                    continue;
                }
                if r.status != Status::Ok {
                    if xi.iter().any(|v| !v.is_nan()) || !r.residual.is_nan() {
                        bad.push(format!(
                            "sys {i}: failed system must have NaN x and residual"
                        ));
                    }
                    continue;
                }
                let host = relative_residual(
                    n,
                    &a[i * n * n..(i + 1) * n * n],
                    &b[i * n..(i + 1) * n],
                    xi,
                );
                if host.to_bits() != r.residual.to_bits() {
                    bad.push(format!(
                        "sys {i}: reported residual {:e} != host {:e}",
                        r.residual, host
                    ));
                }
                if host.is_nan() || host > tol {
                    bad.push(format!("sys {i}: residual {host:e} > {tol:e}"));
                }
                max_res = max_res.max(host);
            }
            let mut cpu_note = String::from("cpu reference n/a");
            if let Some(((xc, rc), (xhc, rhc))) = &cpu {
                let (xr, rr) = if *strategy == Strategy::Ldlt {
                    (xc, rc)
                } else {
                    (xhc, rhc)
                };
                let mut worst = 0.0f64;
                for i in 0..batch {
                    if rr[i].status != reps[i].status || rr[i].method != reps[i].method {
                        bad.push(format!(
                            "sys {i}: cpu {:?}/{:?} gpu {:?}/{:?}",
                            rr[i].method, rr[i].status, reps[i].method, reps[i].status
                        ));
                    }
                    if reps[i].status == Status::Ok {
                        let (mut d, mut m) = (0.0f64, 0.0f64);
                        for k in 0..n {
                            d = d.max((x[i * n + k].to_f64() - xr[i * n + k].to_f64()).abs());
                            m = m.max(xr[i * n + k].to_f64().abs());
                        }
                        worst = worst.max(d / m);
                    }
                }
                cpu_note = format!("max |x_gpu - x_cpu|/|x_cpu| {worst:.1e}");
            }
            println!(
                "n={n:2} {} {name:40} max residual {max_res:.2e} (bound {tol:.1e}) {cpu_note} {}",
                T::NAME,
                if bad.is_empty() {
                    "ok".to_string()
                } else {
                    format!(
                        "{} PROBLEMS: {}",
                        bad.len(),
                        bad[..bad.len().min(3)].join("; ")
                    )
                }
            );
            problems += usize::from(!bad.is_empty());
        }
    }
    problems
}

/// `one KIND N PREC NSTAR BATCH REPEATS`: launches one kernel (for a profiler):
/// KIND `ldlt` (n* = NSTAR, 0 = simd), `hh` or `dc` (divide and conquer, NSTAR unused),
/// PREC `f32` or `f64`.
fn one(solver: &GpuBatchSolver, args: &[String]) -> ExitCode {
    let get = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let n: usize = get(1).parse().unwrap_or(30);
    let nstar: usize = get(3).parse().unwrap_or(8);
    let batch: usize = get(4).parse().unwrap_or(1 << 18);
    let repeats: usize = get(5).parse().unwrap_or(3);
    let (strategy, options) = if get(0) == "dc" {
        (Strategy::DivideConquer, GpuOptions::default())
    } else if get(0) == "hh" {
        (
            Strategy::HouseholderPcr,
            GpuOptions {
                ldlt: LdltOrganisation::Auto,
                householder_nstar: Some(nstar),
                ..Default::default()
            },
        )
    } else {
        (
            Strategy::Ldlt,
            GpuOptions {
                ldlt: if nstar == 0 {
                    LdltOrganisation::Simd
                } else {
                    LdltOrganisation::Hybrid { nstar }
                },
                householder_nstar: None,
                ..Default::default()
            },
        )
    };
    fn go<T: GpuReal>(
        solver: &GpuBatchSolver,
        n: usize,
        batch: usize,
        repeats: usize,
        strategy: Strategy,
        options: GpuOptions,
    ) -> Result<(), cva_kernels::cuda::GpuError> {
        let (a, b) = random_batch::<T>(n, 64, 7);
        let mut a_all = Vec::with_capacity(batch * n * n);
        let mut b_all = Vec::with_capacity(batch * n);
        for i in 0..batch {
            let j = 2 + i % 62;
            a_all.extend_from_slice(&a[j * n * n..(j + 1) * n * n]);
            b_all.extend_from_slice(&b[j * n..(j + 1) * n]);
        }
        let sb = SymmetricBatch::new(n, &a_all, &b_all);
        let mut x = vec![T::NAN; batch * n];
        let mut r = vec![SystemReport::default(); batch];
        for _ in 0..repeats {
            let t = std::time::Instant::now();
            let s = solver.solve_batched_host(
                &sb,
                &mut x,
                &mut r,
                strategy,
                &SolverParams::default(),
                &options,
            )?;
            println!(
                "{} {:?} failures {} max residual {:e} ({:.3} s with copies)",
                T::NAME,
                strategy,
                s.failures(),
                s.max_residual,
                t.elapsed().as_secs_f64()
            );
        }
        // FNV-1a over the bits of x and of the reports: equal hashes, equal results.
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        let mut mix = |v: u64| {
            h ^= v;
            h = h.wrapping_mul(0x100_0000_01b3);
        };
        for v in &x {
            mix(v.to_f64().to_bits());
        }
        for rep in &r {
            mix(rep.residual.to_bits());
            mix(rep.method as u64);
        }
        println!("{} {:?} result hash {h:016x}", T::NAME, strategy);
        Ok(())
    }
    let r = if get(2) == "f32" {
        go::<f32>(solver, n, batch, repeats, strategy, options)
    } else {
        go::<f64>(solver, n, batch, repeats, strategy, options)
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpu_bench one: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("full");
    if let Err(e) = probe() {
        eprintln!("gpu_bench: {e}");
        return ExitCode::FAILURE;
    }
    let solver = match GpuBatchSolver::new(0) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("gpu_bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("device: {:?}", solver.device());
    if mode == "one" {
        return one(&solver, &args[2..]);
    }
    let problems = if std::env::var("GPU_BENCH_NO_CHECK").is_ok() {
        0
    } else {
        // GPU_BENCH_CHECK_PREC=f64 or f32: that precision only.
        let prec = std::env::var("GPU_BENCH_CHECK_PREC").unwrap_or_default();
        (if prec != "f32" {
            check::<f64>(&solver)
        } else {
            0
        }) + (if prec != "f64" {
            check::<f32>(&solver)
        } else {
            0
        })
    };
    println!("correctness: {problems} problem variant(s)");
    if mode == "check" {
        return if problems == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let mut cfg = BenchConfig::default();
    if mode == "quick" {
        cfg.sizes = vec![30];
    }
    if let Ok(s) = std::env::var("GPU_BENCH_SIZES") {
        cfg.sizes = s.split(',').filter_map(|v| v.parse().ok()).collect();
    }
    if std::env::var("GPU_BENCH_NO_SWEEP").is_ok() {
        cfg.variants.retain(|v| {
            !matches!(
                v,
                BenchVariant::LdltNstarSweep | BenchVariant::HouseholderNstarSweep
            )
        });
    }
    // GPU_BENCH_VARIANTS=dc: L D L^T (tuned), escalating and divide and conquer only;
    // dconly: divide and conquer alone; esc: L D L^T (tuned) and escalating; ldlt:
    // L D L^T (tuned) only; ldltsweep: the L D L^T n* sweep only; hh: the Householder + PCR n* sweep only; tuned: L D L^T and
    // Householder + PCR with their tuned n* only.
    match std::env::var("GPU_BENCH_VARIANTS").as_deref() {
        Ok("dc") => {
            cfg.variants = vec![
                BenchVariant::Ldlt(LdltOrganisation::Auto),
                BenchVariant::Escalating,
                BenchVariant::DivideConquer,
            ];
        }
        Ok("esc") => {
            cfg.variants = vec![
                BenchVariant::Ldlt(LdltOrganisation::Auto),
                BenchVariant::Escalating,
            ];
        }
        Ok("dconly") => cfg.variants = vec![BenchVariant::DivideConquer],
        Ok("ldlt") => cfg.variants = vec![BenchVariant::Ldlt(LdltOrganisation::Auto)],
        Ok("ldltsweep") => cfg.variants = vec![BenchVariant::LdltNstarSweep],
        Ok("hh") => cfg.variants = vec![BenchVariant::HouseholderNstarSweep],
        Ok("tuned") => {
            cfg.variants = vec![
                BenchVariant::Ldlt(LdltOrganisation::Auto),
                BenchVariant::HouseholderPcr(None),
            ];
        }
        _ => {}
    }
    let t0 = std::time::Instant::now();
    match bench_solvers(&solver, &cfg) {
        Ok(report) => {
            let md = report.to_markdown();
            println!("{md}");
            println!("bench took {:.1} s", t0.elapsed().as_secs_f64());
            if let Some(path) = args.get(2) {
                if let Err(e) = std::fs::write(path, &md) {
                    eprintln!("gpu_bench: writing {path}: {e}");
                }
            }
        }
        Err(e) => {
            eprintln!("gpu_bench: benchmark failed: {e}");
            return ExitCode::FAILURE;
        }
    }
    if problems == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
