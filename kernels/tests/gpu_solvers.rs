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

// 32: the f64 Householder kernel's rolled form with v in the shared A (HH_VSH), also divide
// and conquer's first kernel there.
const SIZES: [usize; 11] = [1, 2, 3, 7, 16, 30, 31, 32, 33, 63, 64];
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
    compare_scaled_with_cpu::<T>(strategy, options, seed, 1.0);
}

/// As `compare_with_cpu`, with `A` and `b` multiplied by `scale` (a power of two).
fn compare_scaled_with_cpu<T: GpuReal>(
    strategy: Strategy,
    options: GpuOptions,
    seed: u64,
    scale: f64,
) {
    let solver = GpuBatchSolver::new(0).expect("a CUDA device");
    let params = SolverParams::default();
    let eps = T::EPSILON.to_f64();
    solver
        .prepare::<T>(&SIZES, strategy, &options)
        .unwrap_or_else(|e| panic!("{e}"));
    let prepared = solver.modules().len();
    for n in SIZES {
        let (mut a, mut b) = random_batch::<T>(n, BATCH, seed ^ (n as u64 * 7919));
        if scale != 1.0 {
            for v in a.iter_mut().chain(b.iter_mut()) {
                *v = T::from_f64(v.to_f64() * scale);
            }
        }
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
    assert_compiled_by_prepare(&solver, prepared, &format!("{} {strategy}", T::NAME));
}

/// No solve since `prepare` left `prepared` modules compiled a kernel of its own.
fn assert_compiled_by_prepare(solver: &GpuBatchSolver, prepared: usize, what: &str) {
    assert_eq!(
        solver.modules().len(),
        prepared,
        "{what}: a solve compiled a kernel that prepare did not"
    );
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
            ..Default::default()
        };
        compare_with_cpu::<f64>(Strategy::Ldlt, options, 13);
        compare_with_cpu::<f32>(Strategy::Ldlt, options, 14);
    }
}

/// Pivots outside the range of the branch-free reciprocal (cuda/ldlt.cu, `RCP_KEY_LO`
/// and `RCP_KEY_HI`: [2^-1000, 2^1001) in f64, [2^-100, 2^101) in f32) take the exact
/// redo of the factorization. (f32 is not scaled further down: entries that become
/// subnormal change the matrix too much for a comparison of statuses.)
#[test]
#[ignore = "needs a CUDA GPU"]
fn ldlt_extreme_scales_match_cpu() {
    for scale in [2f64.powi(1005), 2f64.powi(-1005)] {
        compare_scaled_with_cpu::<f64>(Strategy::Ldlt, GpuOptions::default(), 15, scale);
    }
    for scale in [2f64.powi(105), 2f64.powi(-105)] {
        compare_scaled_with_cpu::<f32>(Strategy::Ldlt, GpuOptions::default(), 16, scale);
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
        ..Default::default()
    };
    compare_with_cpu::<f64>(Strategy::HouseholderPcr, options(64), 23);
    compare_with_cpu::<f32>(Strategy::HouseholderPcr, options(32), 24);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_strategy_has_a_kernel() {
    let solver = GpuBatchSolver::new(0).expect("a CUDA device");
    for s in Strategy::ALL {
        let r = solver.kernel_key::<f64>(30, s, &GpuOptions::default());
        assert!(!matches!(r, Err(GpuError::Unsupported(_))), "{s}");
    }
}

/// The hard batch of the divide-and-conquer and escalation tests, `5 * per` systems:
/// random SPD Gram matrices (`k < per`), the paper family
/// ([`cva_kernels::families::paper_family`], equicorrelation 0.5), indefinite
/// symmetric matrices (`G diag(±1) G^T / 2n`), singular Gram matrices `G G^T / n` of
/// rank `n / 2` (rank 0 for `n = 1`), and one system with a NaN entry (system 3).
fn hard_batch<T: GpuReal>(n: usize, per: usize, seed: u64) -> (Vec<T>, Vec<T>) {
    let (mut a, mut b) = random_batch::<T>(n, per, seed);
    // random_batch makes system 5 = -I; keep it (indefinite).
    let (pa, pb) = cva_kernels::families::paper_family::<T>(n, per, 0.5, seed ^ 0xabc);
    a.extend_from_slice(&pa);
    b.extend_from_slice(&pb);
    let mut rng = SplitMix64::new(seed ^ 0x1234_5678);
    for kind in 0..2 {
        for _ in 0..per {
            let m = if kind == 0 { 2 * n } else { n / 2 };
            let g: Vec<f64> = (0..n * m).map(|_| 2.0 * rng.uniform() - 1.0).collect();
            for c in 0..n {
                for r in 0..n {
                    let mut acc = 0.0;
                    for k in 0..m {
                        let sign = if kind == 0 && k % 3 == 0 { -1.0 } else { 1.0 };
                        acc += sign * g[r + k * n] * g[c + k * n];
                    }
                    a.push(T::from_f64(acc / (m.max(1) as f64)));
                }
            }
            for _ in 0..n {
                b.push(T::from_f64(2.0 * rng.uniform() - 1.0));
            }
        }
    }
    (a, b)
}

/// `strategy` on the GPU against `solve_batched` on the CPU, on [`hard_batch`].
/// Divide and conquer follows the CPU's method with another operation order (see
/// `cuda/stedc.cu`): status, method and discarded counts must be equal; solutions and
/// residuals must agree within the bounds stated at the checks below (the count of
/// bit-identical solutions is printed). Escalation runs the GPU L D L^T kernel (another
/// summation order than the CPU, which also settles systems on its own pivot ratio), so
/// a system whose residual, growth or pivot ratio lies within rounding of the tolerance
/// or threshold may take another level, and so may an indefinite system whose
/// Householder + PCR answer (PCR does not pivot) swings with the last bits of T: such
/// differences are printed and must stay under 2% of the systems; statuses must match.
fn compare_hard<T: GpuReal>(strategy: Strategy, start: Method, seed: u64) {
    let solver = GpuBatchSolver::new(0).expect("a CUDA device");
    let params = SolverParams::default();
    let eps = T::EPSILON.to_f64();
    let options = GpuOptions {
        start,
        ..Default::default()
    };
    let per = 40;
    for n in SIZES {
        let (a, b) = hard_batch::<T>(n, per, seed ^ (n as u64 * 7919));
        let batch = SymmetricBatch::new(n, &a, &b);
        let count = batch.batch;
        let mut x_cpu = vec![T::NAN; count * n];
        let mut r_cpu = vec![SystemReport::default(); count];
        solve_batched(&batch, &mut x_cpu, &mut r_cpu, strategy, &params, start);
        let (x, reps) = solve_on_device(&solver, n, &a, &b, strategy, &options);
        let (mut identical, mut method_diffs, mut worst_dx) = (0usize, 0usize, 0.0f64);
        let mut worst_res = 0.0f64;
        let mut per_method = [0usize; 3];
        for i in 0..count {
            let g = reps[i].to_system_report();
            let c = r_cpu[i];
            let xi = &x[i * n..(i + 1) * n];
            let ctx = format!("{} n = {n} system {i} {strategy} start {start:?}", T::NAME);
            per_method[g.method as usize] += 1;
            assert_eq!(g.status, c.status, "{ctx}: status (gpu {g:?}, cpu {c:?})");
            if g.method != c.method {
                method_diffs += 1;
                eprintln!("{ctx}: method differs: gpu {g:?} cpu {c:?}");
                assert_eq!(strategy, Strategy::Escalating, "{ctx}: method");
                continue;
            }
            if strategy == Strategy::DivideConquer || g.method == Method::DivideConquer {
                assert_eq!(g.discarded, c.discarded, "{ctx}: discarded");
            }
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
            if g.method != Method::DivideConquer || g.discarded == 0 {
                // Nothing discarded: a backward-stable solve (Householder and divide
                // and conquer are), so the residual tolerance of the other methods.
                let bound = params.tolerance::<T>(n);
                assert!(host <= bound, "{ctx}: residual {host:e} above {bound:e}");
            } else {
                // Truncated solves of singular systems have residuals of O(1) (the
                // components of b along the discarded eigenvectors), the same on both
                // sides up to rounding: O(n eps) relative, with a margin of 1e3; the
                // part of the kept components is O(n eps) absolute, below the same bound.
                let diff = (host - c.residual).abs();
                let bound = 1e3 * n as f64 * eps * c.residual.max(1.0);
                worst_res = worst_res.max(diff / (n as f64 * eps * c.residual.max(1.0)));
                assert!(
                    diff <= bound,
                    "{ctx}: residual {host:e} vs cpu {:e}",
                    c.residual
                );
            }
            let xc = &x_cpu[i * n..(i + 1) * n];
            if xi
                .iter()
                .zip(xc)
                .all(|(p, q)| p.to_f64().to_bits() == q.to_f64().to_bits())
            {
                identical += 1;
            }
            let (mut d, mut m) = (0.0f64, 0.0f64);
            for k in 0..n {
                d = d.max((xi[k].to_f64() - xc[k].to_f64()).abs());
                m = m.max(xc[k].to_f64().abs());
            }
            let dx = if m > 0.0 { d / m } else { d };
            worst_dx = worst_dx.max(dx);
            // Divide and conquer: x = A_k^+ b with the kept condition number at most
            // the threshold, so two backward-stable computations differ by at most
            // about threshold * n * eps relative.
            let limit = if g.method == Method::DivideConquer {
                params.condition_threshold * n as f64 * eps
            } else {
                1e3 * n as f64 * eps
            };
            assert!(dx <= limit, "{ctx}: |x_gpu - x_cpu| / |x_cpu| = {dx:e}");
        }
        eprintln!(
            "{} n = {n:2} {strategy} start {start:?}: methods {per_method:?}, {identical}/{count} \
             x bit-identical to the CPU, max rel. diff {worst_dx:.1e}, {method_diffs} method differences, \
             truncated residual difference up to {worst_res:.1e} n eps max(r, 1)",
            T::NAME
        );
        assert!(method_diffs * 50 <= count, "too many method differences");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn divide_conquer_f64_matches_cpu() {
    compare_hard::<f64>(Strategy::DivideConquer, Method::Ldlt, 31);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn divide_conquer_f32_matches_cpu() {
    compare_hard::<f32>(Strategy::DivideConquer, Method::Ldlt, 32);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn escalating_f64_matches_cpu() {
    for start in Method::ALL {
        compare_hard::<f64>(Strategy::Escalating, start, 41);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn escalating_f32_matches_cpu() {
    for start in Method::ALL {
        compare_hard::<f32>(Strategy::Escalating, start, 42);
    }
}

/// Eigenvalues and eigenvectors of the GPU `stedc` against the CPU `stedc` on random
/// tridiagonal matrices, glued Wilkinson-like matrices with tiny couplings (splits and
/// deflation) and near-diagonal matrices with repeated diagonal entries (deflation of
/// close poles). Bounds (relative to `max |λ|`, in units of `eps` of the working
/// precision): eigenvalues within `8 n` of the CPU's (both backward stable: each is
/// within `O(n eps ||T||)` of the exact ones); `||T Z - Z Λ||_max <= 16 n` and
/// `||Z^T Z - I||_max <= 16 n` (divide and conquer with Gu–Eisenstat's `ẑ` is
/// backward stable with numerically orthogonal eigenvectors; LAPACK's tests use
/// `O(n eps)` thresholds alike). Eigenvectors are not compared entry by entry (not
/// unique for close eigenvalues); the count of bit-identical decompositions is printed.
fn stedc_matches_cpu<T: GpuReal>(seed: u64) {
    let solver = GpuBatchSolver::new(0).expect("a CUDA device");
    let stream = solver.stream();
    let mut rng = SplitMix64::new(seed);
    for n in SIZES {
        let count = 60;
        let mut d = vec![T::ZERO; count * n];
        let mut e = vec![T::ZERO; count * n];
        for k in 0..count {
            for i in 0..n {
                d[k * n + i] = T::from_f64(match k % 3 {
                    0 => 2.0 * rng.uniform() - 1.0,
                    1 => (i as f64 - (n / 2) as f64).abs(),
                    _ => 1.0,
                });
                if i + 1 < n {
                    e[k * n + i] = T::from_f64(match k % 3 {
                        0 => 2.0 * rng.uniform() - 1.0,
                        1 => {
                            if i % 7 == 6 {
                                1e-20
                            } else {
                                1.0
                            }
                        }
                        _ => 1e-3 * rng.uniform(),
                    });
                }
            }
        }
        let d_dev = stream.clone_htod(&d).unwrap();
        let e_dev = stream.clone_htod(&e).unwrap();
        let mut l_dev: CudaSlice<T> = stream.clone_htod(&vec![T::NAN; count * n]).unwrap();
        let mut z_dev: CudaSlice<T> = stream.clone_htod(&vec![T::NAN; count * n * n]).unwrap();
        solver
            .stedc_batched_gpu(
                n,
                &d_dev.as_view(),
                &e_dev.as_view(),
                &mut l_dev.as_view_mut(),
                &mut z_dev.as_view_mut(),
            )
            .unwrap();
        let lambda = stream.clone_dtoh(&l_dev).unwrap();
        let z = stream.clone_dtoh(&z_dev).unwrap();
        stream.synchronize().unwrap();
        let mut ws = cva_kernels::stedc::StedcWorkspace::<T>::new(n);
        let (mut identical, mut worst) = (0usize, 0.0f64);
        let (mut worst_res, mut worst_orth) = (0.0f64, 0.0f64);
        let eps = T::EPSILON.to_f64();
        for k in 0..count {
            let mut dc = d[k * n..(k + 1) * n].to_vec();
            let mut ec = e[k * n..k * n + n.saturating_sub(1)].to_vec();
            let mut zc = vec![T::ZERO; n * n];
            cva_kernels::stedc::stedc(n, &mut dc, &mut ec, &mut zc, n, &mut ws).unwrap();
            let lg = &lambda[k * n..(k + 1) * n];
            let zg = &z[k * n * n..(k + 1) * n * n];
            let scale = dc
                .iter()
                .fold(0.0f64, |m, v| m.max(v.to_f64().abs()))
                .max(1e-300);
            for i in 0..n {
                let diff = (lg[i].to_f64() - dc[i].to_f64()).abs() / scale;
                worst = worst.max(diff);
                assert!(
                    diff <= 8.0 * n as f64 * T::EPSILON.to_f64(),
                    "{} n = {n} matrix {k}: eigenvalue {i}: gpu {} cpu {}",
                    T::NAME,
                    lg[i],
                    dc[i]
                );
            }
            // Residual T Z - Z Λ and orthogonality Z^T Z - I of the GPU decomposition,
            // in f64 from the inputs (T = tridiag(e, d, e)).
            let tn = (0..n).fold(0.0f64, |m, i| {
                let mut row = d[k * n + i].to_f64().abs();
                if i > 0 {
                    row += e[k * n + i - 1].to_f64().abs();
                }
                if i + 1 < n {
                    row += e[k * n + i].to_f64().abs();
                }
                m.max(row)
            });
            let zz = |r: usize, c: usize| zg[r + c * n].to_f64();
            for (c, lc) in lg.iter().enumerate() {
                let l = lc.to_f64();
                for r in 0..n {
                    let mut tz = d[k * n + r].to_f64() * zz(r, c);
                    if r > 0 {
                        tz += e[k * n + r - 1].to_f64() * zz(r - 1, c);
                    }
                    if r + 1 < n {
                        tz += e[k * n + r].to_f64() * zz(r + 1, c);
                    }
                    let res = (tz - l * zz(r, c)).abs() / tn.max(1e-300);
                    worst_res = worst_res.max(res / eps);
                    assert!(
                        res <= 16.0 * n as f64 * eps,
                        "{} n = {n} matrix {k}: |T Z - Z L|[{r}, {c}] = {res:e} ||T||",
                        T::NAME
                    );
                }
                for c2 in 0..=c {
                    let dot: f64 = (0..n).map(|r| zz(r, c) * zz(r, c2)).sum();
                    let orth = (dot - if c == c2 { 1.0 } else { 0.0 }).abs();
                    worst_orth = worst_orth.max(orth / eps);
                    assert!(
                        orth <= 16.0 * n as f64 * eps,
                        "{} n = {n} matrix {k}: |Z^T Z - I|[{c}, {c2}] = {orth:e}",
                        T::NAME
                    );
                }
            }
            if lg
                .iter()
                .zip(&dc)
                .all(|(p, q)| p.to_f64().to_bits() == q.to_f64().to_bits())
                && zg
                    .iter()
                    .zip(&zc)
                    .all(|(p, q)| p.to_f64().to_bits() == q.to_f64().to_bits())
            {
                identical += 1;
            }
        }
        eprintln!(
            "{} n = {n:2} stedc: {identical}/{count} decompositions bit-identical to the CPU, \
             max eigenvalue difference {worst:.1e} (relative to max |lambda|), \
             residual {worst_res:.1} eps ||T||, orthogonality {worst_orth:.1} eps",
            T::NAME
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn stedc_f64_matches_cpu() {
    stedc_matches_cpu::<f64>(51);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn stedc_f32_matches_cpu() {
    stedc_matches_cpu::<f32>(52);
}

/// Each system's answer must be a function of that system alone, whatever its slot in
/// the batch: escalation appends the systems that need the next level to its lists with
/// one atomic per system (the order changes from run to run), and the kernels pack
/// several systems per warp or block. [`hard_batch`] (`per = 100`, every level taken)
/// is solved twice in its own order, once shuffled, and once with
/// `GpuOptions::host_list_lengths` flipped (escalation: the list lengths read on the host
/// and the empty levels skipped); every system must get the same bits of `x` and the
/// same report in all four (NaN-poisoned outputs). A difference names the strategy,
/// start, size and system.
fn order_independent<T: GpuReal>(
    solver: &GpuBatchSolver,
    strategy: Strategy,
    start: Method,
    seed: u64,
) {
    let options = GpuOptions {
        start,
        ..Default::default()
    };
    solver
        .prepare::<T>(&SIZES, strategy, &options)
        .expect("kernels compile");
    let prepared = solver.modules().len();
    let bits = |v: T| {
        let f = v.to_f64();
        if f.is_nan() {
            u64::MAX
        } else {
            f.to_bits()
        }
    };
    for n in SIZES {
        let (a, b) = hard_batch::<T>(n, 100, seed ^ (n as u64 * 104_729));
        let count = b.len() / n;
        // Fisher-Yates: slot i of the shuffled batch holds system perm[i].
        let mut rng = SplitMix64::new(seed ^ 0x5eed ^ n as u64);
        let mut perm: Vec<usize> = (0..count).collect();
        for i in (1..count).rev() {
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            perm.swap(i, j);
        }
        let mut pa = Vec::with_capacity(a.len());
        let mut pb = Vec::with_capacity(b.len());
        for &s in &perm {
            pa.extend_from_slice(&a[s * n * n..(s + 1) * n * n]);
            pb.extend_from_slice(&b[s * n..(s + 1) * n]);
        }
        let (x0, r0) = solve_on_device(solver, n, &a, &b, strategy, &options);
        let (x1, r1) = solve_on_device(solver, n, &a, &b, strategy, &options);
        let (xp, rp) = solve_on_device(solver, n, &pa, &pb, strategy, &options);
        // The escalation's list lengths read on the host (empty levels skipped) instead
        // of staying on the device: the same work, so the same bits.
        let host_lengths = GpuOptions {
            host_list_lengths: !options.host_list_lengths,
            ..options
        };
        let (xh, rh) = solve_on_device(solver, n, &a, &b, strategy, &host_lengths);
        let mut methods = [0usize; 3];
        for (slot, &s) in perm.iter().enumerate() {
            let ctx = format!("{} n = {n} system {s} {strategy} start {start:?}", T::NAME);
            let g0 = r0[s].to_system_report();
            methods[g0.method as usize] += 1;
            for (what, g, x) in [
                ("repeat", r1[s].to_system_report(), &x1[s * n..(s + 1) * n]),
                (
                    "host list lengths",
                    rh[s].to_system_report(),
                    &xh[s * n..(s + 1) * n],
                ),
                (
                    "shuffled",
                    rp[slot].to_system_report(),
                    &xp[slot * n..(slot + 1) * n],
                ),
            ] {
                assert_eq!(
                    (g.method, g.status, g.discarded, g.residual.to_bits()),
                    (g0.method, g0.status, g0.discarded, g0.residual.to_bits()),
                    "{ctx}: report of the {what} solve {g:?} against {g0:?}"
                );
                for k in 0..n {
                    assert_eq!(
                        bits(x[k]),
                        bits(x0[s * n + k]),
                        "{ctx}: x[{k}] of the {what} solve"
                    );
                }
            }
        }
        eprintln!(
            "{} n = {n:2} {strategy} start {start:?}: {count} systems, methods {methods:?}, \
             the same bits in the repeat, in the shuffled order and with the list lengths read on the host",
            T::NAME
        );
    }
    assert_compiled_by_prepare(
        solver,
        prepared,
        &format!("{} {strategy} start {start:?}", T::NAME),
    );
}

/// `prepare` compiles every kernel a strategy launches (`GpuBatchSolver::kernel_keys`,
/// which the engine's start-up compiles too): a fresh solver, prepared for escalation or
/// divide and conquer alone, solves hard batches that reach every level of escalation
/// (and in f64 the Householder tridiagonalization before divide and conquer) without a
/// compile (`order_independent` counts the modules). Before the forty-second session the
/// engine left the f64 tridiagonalization to its first use, a compile in the middle of
/// a run (3.5-4 s of basket29's first divide-and-conquer runs on an H200).
#[test]
#[ignore = "needs a CUDA GPU"]
fn prepare_compiles_every_kernel_a_strategy_launches() {
    for strategy in [Strategy::Escalating, Strategy::DivideConquer] {
        let solver = GpuBatchSolver::new(0).expect("a CUDA device");
        order_independent::<f64>(&solver, strategy, Method::Ldlt, 61);
        let solver = GpuBatchSolver::new(0).expect("a CUDA device");
        order_independent::<f32>(&solver, strategy, Method::Ldlt, 62);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_strategy_is_independent_of_batch_order() {
    // One solver (one module cache): escalation reuses the kernels of the single-method
    // strategies, compiled per size in parallel.
    let solver = GpuBatchSolver::new(0).expect("a CUDA device");
    for strategy in Strategy::ALL {
        let starts: &[Method] = if strategy == Strategy::Escalating {
            &Method::ALL
        } else {
            &[Method::Ldlt]
        };
        for &start in starts {
            order_independent::<f64>(&solver, strategy, start, 51);
            order_independent::<f32>(&solver, strategy, start, 52);
        }
    }
}
