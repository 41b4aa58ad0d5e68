//! GPU solvers against the CPU reference `solve_batched` on the same inputs.
//!
//! The GPU tests are `#[ignore = "needs a CUDA GPU"]`: CI has no GPU and reports them
//! as ignored. On the GPU machine run the test binary with `--include-ignored`.
//!
//! Every test draws fresh random SPD batches for each size (Gram matrices
//! `G G^T / (2n) + 0.01 I` of uniform `n x 2n` `G`, condition number about 40), plus
//! one system with a NaN entry and one indefinite system (`-I`); outputs are poisoned
//! with NaN (reports with all-ones bytes) before the solve, so unwritten entries show.

use cudarc::driver::{CudaSlice, DevicePtrMut};
use cva_kernels::batch::relative_residual;
use cva_kernels::cuda::{
    probe, GpuBatchSolver, GpuError, GpuOptions, GpuReal, GpuReport, LdltOrganisation,
};
use cva_kernels::families::SplitMix64;
use cva_kernels::{
    solve_batched, Method, SolverParams, Status, Strategy, SymmetricBatch, SystemReport,
};

const SIZES: [usize; 10] = [1, 2, 3, 7, 16, 30, 31, 33, 63, 64];
const BATCH: usize = 257;

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
                let acc: f64 = (0..m).map(|k| g[r + k * n] * g[c + k * n]).sum();
                let v = acc / m as f64 + if r == c { 0.01 } else { 0.0 };
                a[s * n * n + r + c * n] = T::from_f64(v);
            }
        }
        for i in 0..n {
            b[s * n + i] = T::from_f64(2.0 * rng.uniform() - 1.0);
        }
    }
    // System 3: NaN in the lower triangle. System 5: -I (indefinite).
    a[3 * n * n + (n - 1)] = T::NAN;
    for c in 0..n {
        for r in 0..n {
            a[5 * n * n + r + c * n] = T::from_f64(if r == c { -1.0 } else { 0.0 });
        }
    }
    (a, b)
}

/// Solves with the device API on NaN-poisoned outputs and returns (x, reports).
fn solve_on_device<T: GpuReal>(
    solver: &GpuBatchSolver,
    n: usize,
    a: &[T],
    b: &[T],
    strategy: Strategy,
    options: &GpuOptions,
) -> (Vec<T>, Vec<GpuReport>) {
    let stream = solver.stream();
    let batch = b.len() / n;
    let a_dev = stream.clone_htod(a).unwrap();
    let b_dev = stream.clone_htod(b).unwrap();
    let mut x_dev: CudaSlice<T> = stream.clone_htod(&vec![T::NAN; batch * n]).unwrap();
    let mut r_dev: CudaSlice<GpuReport> = stream.alloc_zeros(batch).unwrap();
    {
        let (ptr, _sync) = r_dev.device_ptr_mut(stream);
        // SAFETY: fills the `batch * 16` bytes of `r_dev` with 0xff (NaN residual,
        // invalid method and status codes).
        unsafe {
            cudarc::driver::result::memset_d8_async(
                ptr,
                0xff,
                batch * std::mem::size_of::<GpuReport>(),
                stream.cu_stream(),
            )
        }
        .unwrap();
    }
    solver
        .solve_batched_gpu(
            n,
            &a_dev.as_view(),
            &b_dev.as_view(),
            &mut x_dev.as_view_mut(),
            &mut r_dev.as_view_mut(),
            strategy,
            &SolverParams::default(),
            options,
        )
        .unwrap_or_else(|e| panic!("n = {n}: {e}"));
    let x = stream.clone_dtoh(&x_dev).unwrap();
    let r = stream.clone_dtoh(&r_dev).unwrap();
    stream.synchronize().unwrap();
    (x, r)
}

fn compare_with_cpu<T: GpuReal>(strategy: Strategy, options: GpuOptions, seed: u64) {
    let solver = GpuBatchSolver::new(0).expect("a CUDA device");
    let params = SolverParams::default();
    let eps = T::EPSILON.to_f64();
    solver
        .prepare::<T>(&SIZES, strategy, &options)
        .unwrap_or_else(|e| panic!("{e}"));
    for n in SIZES {
        let (a, b) = random_batch::<T>(n, BATCH, seed ^ (n as u64 * 7919));
        let batch = SymmetricBatch::new(n, &a, &b);
        let mut x_cpu = vec![T::NAN; BATCH * n];
        let mut r_cpu = vec![SystemReport::default(); BATCH];
        solve_batched(
            &batch,
            &mut x_cpu,
            &mut r_cpu,
            strategy,
            &params,
            Method::Ldlt,
        );
        let (x, reps) = solve_on_device(&solver, n, &a, &b, strategy, &options);
        let bound = 4.0 * params.tolerance::<T>(n);
        let mut worst_dx = 0.0f64;
        for i in 0..BATCH {
            let g = reps[i].to_system_report();
            let c = r_cpu[i];
            let xi = &x[i * n..(i + 1) * n];
            let ctx = format!("{} n = {n} system {i} {strategy}", T::NAME);
            assert_eq!(g.status, c.status, "{ctx}: status");
            assert_eq!(g.method, c.method, "{ctx}: method");
            if g.status != Status::Ok {
                assert!(xi.iter().all(|v| v.is_nan()), "{ctx}: x must be NaN");
                assert!(g.residual.is_nan(), "{ctx}: residual must be NaN");
                continue;
            }
            let host = relative_residual(
                n,
                &a[i * n * n..(i + 1) * n * n],
                &b[i * n..(i + 1) * n],
                xi,
            );
            assert_eq!(
                host.to_bits(),
                g.residual.to_bits(),
                "{ctx}: reported residual {:e} vs recomputed {host:e}",
                g.residual
            );
            assert!(
                host <= bound,
                "{ctx}: residual {host:e} above {bound:e} (cpu {:e})",
                c.residual
            );
            let xc = &x_cpu[i * n..(i + 1) * n];
            let (mut d, mut m) = (0.0f64, 0.0f64);
            for k in 0..n {
                d = d.max((xi[k].to_f64() - xc[k].to_f64()).abs());
                m = m.max(xc[k].to_f64().abs());
            }
            let dx = d / m;
            worst_dx = worst_dx.max(dx);
            assert!(
                dx <= 1e3 * n as f64 * eps,
                "{ctx}: |x_gpu - x_cpu| / |x_cpu| = {dx:e}"
            );
        }
        eprintln!(
            "{} n = {n:2} {strategy}: max |x_gpu - x_cpu|/|x_cpu| = {worst_dx:.1e}",
            T::NAME
        );
    }
}

/// Runs on CI too: probing never panics, and without a device the solver reports
/// `NoDevice` instead of panicking.
#[test]
fn probe_never_panics() {
    match probe() {
        Ok(count) => assert!(count > 0),
        Err(e) => {
            assert!(matches!(e, GpuError::NoDevice { .. }), "{e}");
            let s = GpuBatchSolver::new(0);
            assert!(matches!(s, Err(GpuError::NoDevice { .. })));
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn ldlt_f64_matches_cpu() {
    compare_with_cpu::<f64>(Strategy::Ldlt, GpuOptions::default(), 11);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn ldlt_f32_matches_cpu() {
    compare_with_cpu::<f32>(Strategy::Ldlt, GpuOptions::default(), 12);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn ldlt_every_organisation_matches_cpu() {
    for ldlt in [
        LdltOrganisation::Simd,
        LdltOrganisation::Collaborative,
        LdltOrganisation::Hybrid { nstar: 64 },
    ] {
        let options = GpuOptions {
            ldlt,
            householder_nstar: None,
        };
        compare_with_cpu::<f64>(Strategy::Ldlt, options, 13);
        compare_with_cpu::<f32>(Strategy::Ldlt, options, 14);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn householder_pcr_f64_matches_cpu() {
    compare_with_cpu::<f64>(Strategy::HouseholderPcr, GpuOptions::default(), 21);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn householder_pcr_f32_matches_cpu() {
    compare_with_cpu::<f32>(Strategy::HouseholderPcr, GpuOptions::default(), 22);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn householder_pcr_every_nstar_matches_cpu() {
    let options = |nstar| GpuOptions {
        ldlt: LdltOrganisation::Auto,
        householder_nstar: Some(nstar),
    };
    compare_with_cpu::<f64>(Strategy::HouseholderPcr, options(64), 23);
    compare_with_cpu::<f32>(Strategy::HouseholderPcr, options(32), 24);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn unsupported_strategies_are_errors() {
    let solver = GpuBatchSolver::new(0).expect("a CUDA device");
    for s in [Strategy::DivideConquer, Strategy::Escalating] {
        let r = solver.kernel_key::<f64>(30, s, &GpuOptions::default());
        assert!(matches!(r, Err(GpuError::Unsupported(_))));
    }
}
