//! The fused walk's solver (`walk_solve` in `cuda/walk.cu`: `L D L^T` by `2 x 2` pivot
//! blocks in Gauss–Jordan form, one step of iterative refinement where level 0's
//! acceptance test of the escalating strategy fails, the test again) against its CPU
//! mirror `cva_kernels::gj2`, bit for bit: the solution, the acceptance and the relative
//! residual of every system.
//!
//! Fresh random inputs per size: regression Gram matrices `(1/k) Σ ψ ψ^T` of features
//! `ψ = (1, s_1, .., s_{n-1})` with `s = e^{σ z}`, `σ` from 0.1 (basket29's spread) down
//! to 0.0003 (so collinear that most are rejected; at 0.01 most pass only after the
//! refinement step), and `b = (1/k) Σ ψ y`. Hard cases, named: the identity, a graded (badly scaled)
//! SPD matrix, a rank-deficient Gram matrix (two equal features), an indefinite matrix, a
//! NaN in `A`, and a system whose first pivot block is singular. The solutions are
//! poisoned with NaN before the run.
//!
//! GPU tests are `#[ignore = "needs a CUDA GPU"]` (CI has no GPU); run the test binary
//! with `--include-ignored` on the GPU machine.

mod common;
use common::stream;
use cva_kernels::cuda::walk::{GpuWalk, WalkShape};
use cva_kernels::families::SplitMix64;
use cva_kernels::gj2::gj2_solve_checked;
use cva_kernels::SolverParams;

fn normal(rng: &mut SplitMix64) -> f64 {
    let (u, v) = (rng.uniform().max(1e-300), rng.uniform());
    (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
}

/// A regression Gram system of size n from k paths: (A column-major full, b).
fn gram_system(n: usize, k: usize, spread: f64, rng: &mut SplitMix64) -> (Vec<f64>, Vec<f64>) {
    let (mut a, mut b) = (vec![0.0; n * n], vec![0.0; n]);
    let mut psi = vec![0.0; n];
    for _ in 0..k {
        psi[0] = 1.0;
        for v in psi.iter_mut().skip(1) {
            *v = (spread * normal(rng)).exp();
        }
        let y = 0.3 * rng.uniform();
        for c in 0..n {
            for r in 0..n {
                a[r + c * n] += psi[r] * psi[c];
            }
            b[c] += psi[c] * y;
        }
    }
    let inv = 1.0 / k as f64;
    a.iter_mut().for_each(|v| *v *= inv);
    b.iter_mut().for_each(|v| *v *= inv);
    (a, b)
}

/// The named hard cases of size n (n >= 4): (name, A, b).
fn hard_cases(n: usize, rng: &mut SplitMix64) -> Vec<(&'static str, Vec<f64>, Vec<f64>)> {
    let b: Vec<f64> = (0..n).map(|i| 1.0 + i as f64 * 0.25).collect();
    let mut out = Vec::new();
    let mut id = vec![0.0; n * n];
    (0..n).for_each(|i| id[i + i * n] = 1.0);
    out.push(("identity", id.clone(), b.clone()));
    let (g, gb) = gram_system(n, 4 * n, 0.1, rng);
    let mut graded = g.clone();
    for c in 0..n {
        for r in 0..n {
            graded[r + c * n] *=
                10f64.powi(r as i32 - n as i32 / 2) * 10f64.powi(c as i32 - n as i32 / 2);
        }
    }
    out.push(("graded SPD", graded, gb.clone()));
    // Two equal features: rows and columns 1 and 2 equal.
    let mut rank = g.clone();
    for r in 0..n {
        rank[r + 2 * n] = rank[r + n];
    }
    for c in 0..n {
        rank[2 + c * n] = rank[1 + c * n];
    }
    out.push(("rank-deficient Gram", rank, gb.clone()));
    let mut indefinite = id.clone();
    indefinite[3 + 3 * n] = -1.0;
    out.push(("indefinite", indefinite, b.clone()));
    let mut nan = g.clone();
    nan[n - 1] = f64::NAN;
    out.push(("NaN in A", nan, gb.clone()));
    // The first 2 x 2 block [[1, 1], [1, 1]] is singular.
    let mut first = id;
    first[1] = 1.0;
    first[n] = 1.0;
    out.push(("singular first pivot block", first, b));
    out
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn walk_solver_matches_the_cpu_mirror_bitwise() {
    let Some(stream) = stream() else { return };
    let params = SolverParams::default();
    let mut rng = SplitMix64::new(0x5eed_0009);
    for n in [2usize, 4, 8, 16, 30] {
        let shape = WalkShape {
            d: n.max(2) - 1,
            m: 300,
            n,
            itm_only: true,
            assets: (0..n - 1).collect(),
            inv_spot: vec![1.0; n - 1],
        };
        let walk = GpuWalk::new(&stream, &shape).expect("walk module");
        let mut names: Vec<String> = Vec::new();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for s in 0..400 {
            let k = n + 2 + (s * 7) % 290;
            let spread = [0.1, 0.01, 0.001, 0.0003][s % 4];
            let (sa, sb) = gram_system(n, k, spread, &mut rng);
            a.extend(sa);
            b.extend(sb);
            names.push(format!("random Gram of {k} paths, spread {spread}"));
        }
        if n >= 4 {
            for (name, sa, sb) in hard_cases(n, &mut rng) {
                a.extend(sa);
                b.extend(sb);
                names.push(name.to_string());
            }
        }
        let batch = names.len();
        let tol = params.tolerance::<f64>(n);
        let thr = params.escalation_condition::<f64>();
        let a_dev = stream.clone_htod(&a).unwrap();
        let b_dev = stream.clone_htod(&b).unwrap();
        let mut x_dev = stream.clone_htod(&vec![f64::NAN; batch * n]).unwrap();
        let mut out_dev = stream.clone_htod(&vec![f64::NAN; 4 * batch]).unwrap();
        walk.solve_batch(&a_dev, &b_dev, (tol, thr), &mut x_dev, &mut out_dev)
            .unwrap();
        let x = stream.clone_dtoh(&x_dev).unwrap();
        let out = stream.clone_dtoh(&out_dev).unwrap();
        let (mut accepted, mut refined) = (0, 0);
        for s in 0..batch {
            let mut xc = vec![f64::NAN; n];
            let r = gj2_solve_checked(
                n,
                &a[s * n * n..(s + 1) * n * n],
                &b[s * n..(s + 1) * n],
                &mut xc,
                &params,
            );
            let same = |p: f64, q: f64| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan());
            let xg = &x[s * n..(s + 1) * n];
            let name = &names[s];
            assert!(
                xg.iter().zip(&xc).all(|(&p, &q)| same(p, q)),
                "n = {n}, system {s} ({name}): x differs\n gpu {xg:?}\n cpu {xc:?}"
            );
            assert_eq!(
                out[4 * s] == 1.0,
                r.accepted,
                "n = {n}, system {s} ({name}): acceptance"
            );
            assert!(
                same(out[4 * s + 1], r.residual),
                "n = {n}, system {s} ({name}): residual gpu {} cpu {}",
                out[4 * s + 1],
                r.residual
            );
            accepted += usize::from(r.accepted);
            refined += usize::from(r.refined);
            if s >= 400 {
                println!(
                    "n = {n}: {name}: accepted {}, residual {:.3e}",
                    r.accepted, r.residual
                );
            }
        }
        println!("n = {n}: {batch} systems bitwise equal, {accepted} accepted, {refined} refined");
        // Each path of the solver is taken: accepted at once, refined, rejected.
        assert!(refined > 0 && accepted > refined / 2, "n = {n}");
        if n >= 4 {
            assert!(accepted < batch, "n = {n}: the rejected hard cases");
        }
    }
}
