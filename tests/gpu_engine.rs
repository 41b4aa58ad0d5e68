//! The GPU backend of `cva run` against the CPU backend (same seed, f64) on every shipped
//! scenario, and the European closed form on the GPU. Needs a CUDA GPU: ignored on CI,
//! run with `--include-ignored` on the GPU machine.

mod common;
use common::{check_european_closed_form, cva, cva_env, f, run_json, run_json_env, scenario};
use polars::prelude::*;
use std::path::Path;

fn epe(dir: &Path) -> Vec<f64> {
    let file = std::fs::File::open(dir.join("exposure.parquet")).unwrap();
    let df = ParquetReader::new(file).finish().unwrap();
    df.column("epe")
        .unwrap()
        .f64()
        .unwrap()
        .into_no_null_iter()
        .collect()
}

fn read_frame(path: &Path) -> DataFrame {
    ParquetReader::new(std::fs::File::open(path).unwrap())
        .finish()
        .unwrap()
}

fn u64_column(df: &DataFrame, name: &str) -> Vec<u64> {
    df.column(name)
        .unwrap()
        .u64()
        .unwrap()
        .into_no_null_iter()
        .collect()
}

/// `solver_stats.parquet` of both backends: the same columns and steps; prints the
/// steps whose counts differ (a flipped exercise decision can move a few systems).
/// Returns the number of differing counts.
fn compare_solver_stats(file: &str, gpu: &Path, cpu: &Path) -> usize {
    let (g, c) = (
        read_frame(&gpu.join("solver_stats.parquet")),
        read_frame(&cpu.join("solver_stats.parquet")),
    );
    assert_eq!(g.get_column_names(), c.get_column_names(), "{file}");
    assert_eq!(g.height(), c.height(), "{file}: solver_stats rows");
    let mut differing = 0;
    for name in g.get_column_names() {
        let name = name.as_str();
        if name.starts_with("residual") {
            continue;
        }
        let (a, b) = (u64_column(&g, name), u64_column(&c, name));
        for (row, (x, y)) in a.iter().zip(&b).enumerate() {
            if x != y {
                differing += 1;
                println!("  {file} solver_stats row {row} {name}: gpu {x} cpu {y}");
            }
        }
    }
    let gr: Vec<f64> = g
        .column("residual_max")
        .unwrap()
        .f64()
        .unwrap()
        .into_no_null_iter()
        .collect();
    let nonzero = gr.iter().filter(|&&v| v > 0.0).count();
    println!(
        "{file}: solver_stats {} steps, {differing} differing counts, {nonzero} steps with a positive residual_max on the GPU",
        g.height()
    );
    differing
}

/// Runs `file` with `outer` outer paths on the GPU and on the CPU (f64), and checks
/// that the CVAs agree to 5% of the standard error and that `solver_stats.parquet`
/// has the same columns and steps.
fn gpu_matches_cpu(file: &str, outer: usize) {
    gpu_matches_cpu_with(file, outer, &[]);
}

/// [`gpu_matches_cpu`] with more command-line arguments for both runs.
fn gpu_matches_cpu_with(file: &str, outer: usize, extra: &[&str]) {
    gpu_matches_cpu_at(&scenario(file), file, outer, extra);
}

/// [`gpu_matches_cpu_with`] for the scenario file at `sc`, named `file` in messages.
fn gpu_matches_cpu_at(sc: &Path, file: &str, outer: usize, extra: &[&str]) {
    gpu_matches_cpu_within(sc, file, outer, extra, 0.05);
}

/// [`gpu_matches_cpu_at`] with the CVAs within `tolerance` standard errors (the value at
/// t_0 within 0.05 of its own).
fn gpu_matches_cpu_within(sc: &Path, file: &str, outer: usize, extra: &[&str], tolerance: f64) {
    let set = format!("simulation.outer_paths={outer}");
    let mut runs = Vec::new();
    let mut dirs = Vec::new();
    for backend in ["gpu", "cpu"] {
        let dir = tempfile::tempdir().unwrap();
        let mut args = vec![
            "--set",
            set.as_str(),
            "--set",
            "simulation.precision=f64",
            "--backend",
            backend,
        ];
        args.extend_from_slice(extra);
        let s = run_json(sc, dir.path(), &args);
        assert_eq!(s["backend"].as_str(), Some(backend), "{s}");
        let profile = epe(dir.path());
        runs.push((s, profile));
        dirs.push(dir);
    }
    compare_solver_stats(file, dirs[0].path(), dirs[1].path());
    let ((g, ge), (c, ce)) = (&runs[0], &runs[1]);
    let (cva_g, cva_c, se) = (f(g, "cva"), f(c, "cva"), f(c, "cva_std_error"));
    let (v_g, v_c, v_se) = (
        f(g, "value_t0"),
        f(c, "value_t0"),
        f(c, "value_t0_std_error"),
    );
    assert_eq!(g["value_t0_method"], c["value_t0_method"]);
    println!(
        "{file}: value at t0 ({}) gpu {v_g} cpu {v_c} (std error {v_se})",
        c["value_t0_method"]
    );
    println!(
        "{file} ({outer} outer paths): CVA gpu {cva_g} cpu {cva_c} (std error {se}); \
         wall gpu {:.3} s cpu {:.3} s; device {}; systems gpu {} cpu {}; failures gpu {} cpu {}; \
         outer exercises gpu {} cpu {}",
        f(g, "wall_seconds"),
        f(c, "wall_seconds"),
        g["device"],
        g["systems_solved"],
        c["systems_solved"],
        g["solver_failures"],
        c["solver_failures"],
        g["outer_exercises"],
        c["outer_exercises"],
    );
    let mut worst = (0usize, 0.0f64);
    for (k, (a, b)) in ge.iter().zip(ce).enumerate() {
        let rel = if *b == 0.0 && *a == 0.0 {
            0.0
        } else {
            (a - b).abs() / b.abs().max(1e-300)
        };
        println!("  date {k}: EPE gpu {a:.10e} cpu {b:.10e} relative difference {rel:.3e}");
        if rel > worst.1 {
            worst = (k, rel);
        }
    }
    println!(
        "{file}: largest relative EPE difference {:.3e} at date {}",
        worst.1, worst.0
    );
    assert_eq!(ge.len(), ce.len());
    assert!(
        (cva_g - cva_c).abs() <= tolerance * se,
        "{file}: CVA on the GPU {cva_g} differs from the CPU's {cva_c} by more than {tolerance} of the standard error {se}"
    );
    assert!(
        (v_g - v_c).abs() <= 0.05 * v_se,
        "{file}: value at t0 on the GPU {v_g} differs from the CPU's {v_c} by more than 5% of its standard error {v_se}"
    );
}

/// The streaming exercise kernel (the default) and the warp-per-outer-path kernel
/// (`CVA_GPU_EXERCISE_STREAM=0`) do the same operations per inner path: the same CVA,
/// outer exercises, EPE profile and solver statistics, bit for bit, in f64 and f32, with
/// three geometries of the streaming kernel (the default 2,8,2 among them), and a fifth
/// run repeating the first. The
/// residual quantile columns are compared bit for bit too: they differed from run to run
/// until the ninth session (the host read the residuals' page-locked copy before the
/// asynchronous copy had finished; `GpuEngine::chunk` now waits for it), so the repeat
/// also checks that a run is reproducible.
#[test]
#[ignore = "needs a CUDA GPU"]
fn streaming_exercise_equals_warp_per_path_kernel_bitwise() {
    for (file, precision) in [
        ("american_put.yaml", "f64"),
        ("basket29.yaml", "f64"),
        ("netting_set.yaml", "f32"),
    ] {
        let sc = scenario(file);
        let prec = format!("simulation.precision={precision}");
        let mut out = Vec::new();
        for exercise in ["0", "2,8,2", "2,4,2", "1,2,3", "0"] {
            let dir = tempfile::tempdir().unwrap();
            let args = [
                "--set",
                "simulation.outer_paths=3000",
                "--set",
                prec.as_str(),
                "--backend",
                "gpu",
            ];
            let s = run_json_env(
                &sc,
                dir.path(),
                &args,
                &[("CVA_GPU_EXERCISE_STREAM", exercise)],
            );
            // The count columns of solver_stats.parquet, and the residual columns as bits.
            let stats = read_frame(&dir.path().join("solver_stats.parquet"));
            let (mut counts, mut residuals) = (Vec::new(), Vec::new());
            for name in stats.get_column_names() {
                let name = name.as_str();
                if name.starts_with("residual") {
                    let bits: Vec<u64> = stats
                        .column(name)
                        .unwrap()
                        .f64()
                        .unwrap()
                        .iter()
                        .map(|v| v.map_or(u64::MAX, f64::to_bits))
                        .collect();
                    residuals.push((name.to_string(), bits));
                } else {
                    counts.push(u64_column(&stats, name));
                }
            }
            out.push((
                (
                    f(&s, "cva").to_bits(),
                    s["outer_exercises"].as_u64(),
                    epe(dir.path())
                        .iter()
                        .map(|v| v.to_bits())
                        .collect::<Vec<_>>(),
                    counts,
                ),
                residuals,
            ));
        }
        for (i, name) in [
            "streaming 2,8,2",
            "streaming 2,4,2",
            "streaming 1,2,3",
            "old kernel again",
        ]
        .iter()
        .enumerate()
        {
            assert_eq!(out[0].0, out[i + 1].0, "{file} {precision}: {name} differs");
            for ((col, a), (_, b)) in out[0].1.iter().zip(&out[i + 1].1) {
                let differing: Vec<String> = a
                    .iter()
                    .zip(b)
                    .enumerate()
                    .filter(|(_, (x, y))| x != y)
                    .map(|(row, (x, y))| {
                        format!(
                            "row {row}: {:e} against {:e}",
                            f64::from_bits(*y),
                            f64::from_bits(*x)
                        )
                    })
                    .collect();
                assert!(
                    differing.is_empty(),
                    "{file} {precision} {name}: {col} differs: {}",
                    differing.join("; ")
                );
            }
        }
        println!(
            "{file} {precision}: CVA {} and solver statistics (residual quantiles included) the same bits in all five runs",
            f64::from_bits(out[0].0 .0)
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_matches_cpu_on_american_put() {
    gpu_matches_cpu("american_put.yaml", 200);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_matches_cpu_on_basket29() {
    gpu_matches_cpu("basket29.yaml", 300);
}

/// Antithetic inner paths (the fixed path kernel's lane pairs sharing their normals):
/// independent assets (basket29) and a correlated market (the netting set).
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_matches_cpu_with_antithetic_inner_paths() {
    let anti = ["--set", "simulation.antithetic=true"];
    gpu_matches_cpu_with("basket29.yaml", 300, &anti);
    gpu_matches_cpu_with("netting_set.yaml", 300, &anti);
}

/// With the inner stage at t_0 (`simulation.value_t0=nested`): the longest date's inner
/// paths and regressions on both backends.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_matches_cpu_with_an_inner_stage_at_t0() {
    let nested = ["--set", "simulation.value_t0=nested"];
    gpu_matches_cpu_with("basket29.yaml", 300, &nested);
    gpu_matches_cpu_with("netting_set.yaml", 300, &nested);
}

/// No inner stage at all: one exposure date (`t_1 = T`), so every value is a payoff at
/// maturity and `V_0` their discounted mean (the chunk buffers hold no inner paths).
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_matches_cpu_without_an_inner_stage() {
    let one_date = ["--set", "dates.exposure_dates=1"];
    gpu_matches_cpu_with("european_call.yaml", 1000, &one_date);
    gpu_matches_cpu_with("american_put.yaml", 1000, &one_date);
}

/// Each solver strategy on its own (not only the escalating default) and every inner
/// path in the regressions (`itm_only=false`): the American put (n = 4) with `L D L^T`,
/// Householder + PCR and divide and conquer, and basket29 (n = 30, ill-conditioned) with
/// the last two, whose systems the escalating default never sends there at this size.
/// Householder + PCR sums in another order on the GPU than on the CPU (not bitwise), so
/// an outer exercise decision near its tie can go the other way and change that outer
/// path's later exposures: on the put (cubic basis, every path in the regressions) one
/// outer path of 200 did (140 outer exercises against 139), and the CVAs differed by 0.22
/// standard errors (forty-third session). Its bound on the put is half a standard error.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_matches_cpu_with_each_solver_strategy() {
    for strategy in ["ldlt", "householder-pcr", "divide-conquer"] {
        let solver = format!("simulation.solver={strategy}");
        let all = [
            "--set",
            solver.as_str(),
            "--set",
            "simulation.itm_only=false",
        ];
        let tolerance = if strategy == "householder-pcr" {
            0.5
        } else {
            0.05
        };
        let put = "american_put.yaml";
        gpu_matches_cpu_within(&scenario(put), put, 200, &all, tolerance);
        if strategy != "ldlt" {
            gpu_matches_cpu_with("basket29.yaml", 300, &["--set", solver.as_str()]);
        }
    }
}

/// The solver's parameters set in the scenario reach the GPU solve as they reach the
/// CPU's: a low `escalation_condition` sends the American put's ill-conditioned systems
/// (cubic basis, every path in the regression) straight to divide and conquer (134,195 of
/// 134,196 on the CPU), where a low `condition_threshold` truncates more (271,819
/// eigenvalues discarded); `residual_tolerance` is set too, though with nearly every
/// system sent past `L D L^T` it decides little here.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_matches_cpu_with_the_solver_parameters_set() {
    let set = [
        "--set",
        "simulation.itm_only=false",
        "--set",
        "simulation.escalation_condition=1.0e3",
        "--set",
        "simulation.condition_threshold=1.0e3",
        "--set",
        "simulation.residual_tolerance=1.0e-10",
    ];
    gpu_matches_cpu_with("american_put.yaml", 200, &set);
}

/// Writes `wideD.yaml` into `dir`: `d` assets equicorrelated at 0.3 (vols 0.15-0.24,
/// spots 1), 6 dates to 1 year, an American put on the equally weighted basket and a
/// short European call on the best of the `d`; linear basis, 120 inner paths, 400 outer
/// paths (the tests override some of it).
fn equicorrelated_basket_scenario(dir: &Path, d: usize) -> std::path::PathBuf {
    let names: Vec<String> = (0..d).map(|i| format!("A{i:02}")).collect();
    let mut yaml = format!("name: wide{d}\nmarket:\n  rate: 0.03\n  assets:\n");
    for (i, name) in names.iter().enumerate() {
        let vol = 0.15 + 0.01 * (i % 10) as f64;
        yaml += &format!(
            "    - {{name: {name}, spot: 1.0, volatility: {vol}, dividend_yield: 0.04}}\n"
        );
    }
    yaml += "  correlation:\n";
    for i in 0..d {
        let row: Vec<&str> = (0..d).map(|j| if i == j { "1.0" } else { "0.3" }).collect();
        yaml += &format!("    - [{}]\n", row.join(", "));
    }
    let weight = 1.0 / d as f64;
    let weights: Vec<String> = names.iter().map(|n| format!("{n}: {weight}")).collect();
    yaml += &format!(
        "dates:\n  horizon: 1.0\n  exposure_dates: 6\nportfolio:\n  \
         - {{name: basket_put, style: american, kind: put, underlying: {{basket: {{{}}}}}, \
         strike: 1.0, maturity: 1.0, quantity: 1.0}}\n  \
         - {{name: best_of_call, style: european, kind: call, underlying: {{max: [{}]}}, \
         strike: 1.3, maturity: 0.5, quantity: -0.5}}\n\
         counterparty:\n  hazard_rate: 0.02\n  recovery_rate: 0.4\n\
         simulation:\n  outer_paths: 400\n  inner_paths: 120\n  basis: linear\n  \
         itm_only: true\n  precision: f64\n  solver: escalating\n  seed: {d}\n",
        weights.join(", "),
        names.join(", ")
    );
    let sc = dir.join(format!("wide{d}.yaml"));
    std::fs::write(&sc, yaml).unwrap();
    sc
}

/// A market wider than the fixed path kernels take (40 correlated assets: the generic
/// kernels, with the correlation factor read at run time) and a regression of n = 41
/// (linear basis): the basket put's in-the-money paths are sometimes fewer than n (the
/// mean of the cash flows instead).
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_matches_cpu_on_a_market_of_40_assets() {
    let dir = tempfile::tempdir().unwrap();
    let sc = equicorrelated_basket_scenario(dir.path(), 40);
    gpu_matches_cpu_at(&sc, "wide40", 400, &[]);
}

/// A chained basis near the solvers' largest size: all monomials of degree <= 2 in 9
/// assets, n = 55 of at most 64 (the build's products of two states, the exercise's
/// chained basis values), on the fixed path kernels.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_matches_cpu_with_a_quadratic_basis_of_55() {
    let dir = tempfile::tempdir().unwrap();
    let sc = equicorrelated_basket_scenario(dir.path(), 9);
    let extra = [
        "--set",
        "simulation.basis={monomials: 2}",
        "--set",
        "simulation.inner_paths=200",
    ];
    gpu_matches_cpu_at(&sc, "wide9 quadratic", 300, &extra);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_matches_cpu_on_european_call() {
    gpu_matches_cpu("european_call.yaml", 1000);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_matches_cpu_on_netting_set() {
    gpu_matches_cpu("netting_set.yaml", 300);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_matches_cpu_in_f32() {
    // f32 regression. In f32 the cubic basis of this scenario is ill-conditioned: the
    // memory rule sends almost every system to the truncated divide and conquer (70,672
    // of 71,439 on the CPU), whose GPU solutions agree with the CPU's within
    // `condition_threshold * n * eps` relative (the bound of the solver tests), not
    // bitwise. That flips exercise decisions near the boundary, along the inner and the
    // outer paths, more or less at random: over seeds 2001 and 1-7, with and without the
    // inner stage at t_0, |CVA gpu - cpu| was 0.007-0.82 standard errors (median 0.19;
    // benches/RESULTS.md, forty-first session, call 2), so the f32 bound is one standard
    // error. Issue 5's 0.05 holds in f64 (the `gpu_matches_cpu_*` tests).
    let sc = scenario("american_put.yaml");
    let mut runs = Vec::new();
    for backend in ["gpu", "cpu"] {
        let dir = tempfile::tempdir().unwrap();
        let args = [
            "--set",
            "simulation.outer_paths=100",
            "--set",
            "simulation.precision=f32",
            "--backend",
            backend,
        ];
        runs.push(run_json(&sc, dir.path(), &args));
    }
    let (g, c) = (&runs[0], &runs[1]);
    println!(
        "american_put f32: CVA gpu {} cpu {} (std error {})",
        f(g, "cva"),
        f(c, "cva"),
        f(c, "cva_std_error")
    );
    assert!((f(g, "cva") - f(c, "cva")).abs() <= f(c, "cva_std_error"));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn long_european_call_cva_matches_closed_form_on_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let s = run_json(
        &scenario("european_call.yaml"),
        dir.path(),
        &["--backend", "gpu"],
    );
    assert_eq!(s["backend"].as_str(), Some("gpu"));
    check_european_closed_form(&s, true, "GPU");
}

/// Netted values with ties, zeros (both signs), negatives and a NaN: `dates` x `m0`.
fn awkward_netted(m0: usize, dates: usize, seed: u64) -> Vec<f64> {
    let mut state = seed;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut v = Vec::with_capacity(m0 * dates);
    for k in 0..dates {
        for l in 0..m0 {
            let u = next();
            let x = match k % 6 {
                // Continuous, both signs.
                0 => 2.0 * u - 0.7,
                // Few distinct values: ties at every order statistic.
                1 => (u * 8.0).floor() * 0.25 - 0.5,
                // Mostly zero, a few positive.
                2 => {
                    if u < 0.97 {
                        if l % 2 == 0 {
                            0.0
                        } else {
                            -0.0
                        }
                    } else {
                        u
                    }
                }
                // All non-positive.
                3 => -u,
                // Heavy tail.
                4 => (1.0 / (1.0 - 0.999 * u)).ln() * 1e3 - 50.0,
                _ => u * 1e-300,
            };
            v.push(x);
        }
    }
    if dates > 1 && m0 > 2 {
        v[m0 + 1] = f64::NAN;
    }
    v
}

fn close(a: f64, b: f64, rel: f64, scale: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= rel * scale.max(b.abs())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn exposure_statistics_on_the_gpu_match_the_host() {
    use cva::exposure::estimate;
    use cva::gpu_engine::estimate_on_device;
    use cva::scenario::ValueT0;
    use cva_kernels::cuda::engine::driver::CudaContext;
    use cva_kernels::cuda::engine::EngineKernels;
    let ctx = CudaContext::new(0).unwrap();
    let stream = ctx.default_stream();
    let kernels = EngineKernels::new(&stream).unwrap();
    let mut sc = cva::scenario::Scenario::load(&scenario("basket29.yaml"), &[]).unwrap();
    let dates = sc.exposure_dates + 1;
    for (m0, q, seed) in [
        (1usize, 0.95, 1u64),
        (2, 0.95, 2),
        (3, 0.5, 3),
        (1000, 0.95, 4),
        (1001, 0.0, 5),
        (4097, 1.0, 6),
        (100_003, 0.95, 7),
        (100_003, 0.99, 8),
        (777_777, 0.9, 9),
    ] {
        for value_t0 in [ValueT0::DiscountedT1, ValueT0::Nested] {
            sc.simulation.pfe_quantile = q;
            sc.simulation.value_t0 = value_t0;
            let netted = awkward_netted(m0, dates, seed);
            let host = estimate(&sc, &netted, m0);
            let dev = stream.clone_htod(&netted).unwrap();
            let gpu = estimate_on_device(&kernels, &sc, &dev.as_view(), m0).unwrap();
            let mut worst = 0.0f64;
            for (g, h) in gpu.profile.iter().zip(&host.profile) {
                let k = h.date_index;
                assert_eq!(g.date_index, k);
                assert_eq!(g.time, h.time);
                assert_eq!(g.discount_factor, h.discount_factor);
                assert_eq!(g.default_probability, h.default_probability);
                // The order statistics are exact: the PFE is the host's, bit for bit
                // (up to the sign of a zero).
                assert!(
                    g.pfe == h.pfe || (g.pfe.is_nan() && h.pfe.is_nan()),
                    "m0 {m0} q {q} date {k}: PFE gpu {} host {}",
                    g.pfe,
                    h.pfe
                );
                // Sums in another order: rounding only (relative to the mean |P|).
                let scale = netted[k * m0..(k + 1) * m0]
                    .iter()
                    .filter(|v| !v.is_nan())
                    .map(|v| v.abs())
                    .sum::<f64>()
                    / m0 as f64;
                for (name, a, b) in [
                    ("ee", g.ee, h.ee),
                    ("epe", g.epe, h.epe),
                    ("ene", g.ene, h.ene),
                    ("discounted_epe", g.discounted_epe, h.discounted_epe),
                    ("cva_contribution", g.cva_contribution, h.cva_contribution),
                ] {
                    assert!(
                        close(a, b, 1e-12, scale),
                        "m0 {m0} date {k} {name}: gpu {a} host {b}"
                    );
                    if !a.is_nan() && a != b {
                        worst = worst.max((a - b).abs() / scale.max(b.abs()));
                    }
                }
            }
            for (name, a, b, rel) in [
                ("cva", gpu.cva, host.cva, 1e-12),
                ("cva_std_error", gpu.cva_std_error, host.cva_std_error, 1e-9),
                ("value_t0", gpu.value_t0, host.value_t0, 1e-12),
                (
                    "value_t0_std_error",
                    gpu.value_t0_std_error,
                    host.value_t0_std_error,
                    1e-9,
                ),
            ] {
                assert!(close(a, b, rel, 0.0), "m0 {m0}: {name} gpu {a} host {b}");
            }
            println!(
                "m0 {m0} q {q} {}: CVA gpu {:e} host {:e} (SE {:e} / {:e}); V0 {:e} / {:e}; \
             PFE equal on {dates} dates; largest relative sum difference {worst:.2e}",
                value_t0.name(),
                gpu.cva,
                host.cva,
                gpu.cva_std_error,
                host.cva_std_error,
                gpu.value_t0,
                host.value_t0
            );
        }
    }
}

#[test]
fn backend_gpu_without_a_gpu_is_a_clear_error() {
    // Only meaningful where there is no GPU (CI); on the GPU machine it is skipped.
    if cva_kernels::cuda::probe().is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let o = cva(&[
        "run",
        scenario("european_call.yaml").to_str().unwrap(),
        "--backend",
        "gpu",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("backend gpu: not available"), "{err}");
    assert!(!dir.path().join("summary.parquet").exists());
    // auto falls back to the CPU with a one-line message.
    let o = cva(&[
        "run",
        scenario("european_call.yaml").to_str().unwrap(),
        "--backend",
        "auto",
        "--set",
        "simulation.outer_paths=200",
        "--no-report",
        "--json",
    ]);
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("backend auto: running on the CPU"), "{err}");
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["backend"].as_str(), Some("cpu"));
}

/// Out of memory in the middle of a chunk is retried with chunks of half the size. The
/// test hook `CVA_GPU_TEST_OOM_ABOVE=1000` makes every chunk of more than 1,000 outer
/// paths fail with the driver's out-of-memory error once its second date's inner paths
/// are queued (work of both streams in flight): 3,000 outer paths fail as one chunk and
/// as two of 1,500, then run as four of 750. The terminal says so, and the CVA, the EPE
/// profile and every column of solver_stats.parquet are the same bits as the run in one
/// chunk (each path's arithmetic does not depend on the chunking; basket29's steps all
/// start at L D L^T, so the memory rule carries nothing between chunks).
#[test]
#[ignore = "needs a CUDA GPU"]
fn out_of_memory_in_a_chunk_is_retried_with_smaller_chunks() {
    let sc = scenario("basket29.yaml");
    let mut runs = Vec::new();
    for hook in [None, Some("1000")] {
        let dir = tempfile::tempdir().unwrap();
        let args = [
            "run",
            sc.to_str().unwrap(),
            "--json",
            "--out",
            dir.path().to_str().unwrap(),
            "--backend",
            "gpu",
            "--set",
            "simulation.outer_paths=3000",
            "--set",
            "simulation.precision=f64",
        ];
        let env: Vec<(&str, &str)> = hook
            .map(|t| vec![("CVA_GPU_TEST_OOM_ABOVE", t)])
            .unwrap_or_default();
        let o = cva_env(&args, &env);
        let stderr = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "cva {args:?} failed: {stderr}");
        let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let retries: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("out of memory"))
            .collect();
        match hook {
            None => assert!(retries.is_empty(), "{stderr}"),
            Some(_) => assert_eq!(
                retries,
                [
                    "GPU: out of memory in a chunk of 3000 outer paths; retrying with 1500",
                    "GPU: out of memory in a chunk of 1500 outer paths; retrying with 750",
                ],
                "{stderr}"
            ),
        }
        let stats = read_frame(&dir.path().join("solver_stats.parquet"));
        runs.push((f(&s, "cva").to_bits(), epe(dir.path()), stats));
    }
    let (one, retried) = (&runs[0], &runs[1]);
    assert_eq!(one.0, retried.0, "CVA");
    assert_eq!(
        one.1.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        retried.1.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        "EPE"
    );
    assert!(
        one.2.equals_missing(&retried.2),
        "solver_stats.parquet differs:\n{}\n{}",
        one.2,
        retried.2
    );
    println!(
        "basket29 3,000 outer paths: CVA {} in one chunk and in four after two out-of-memory retries",
        f64::from_bits(one.0)
    );
}

/// The payoff plane (a portfolio of one American position: the path kernel stores the
/// states' high words and the payoffs, not the low words; `CVA_GPU_PAYOFF_PLANE=0` stores
/// the low words and lets the build form the payoffs) gives the same bits: the CVA, the
/// value at t_0, the outer exercises and the EPE profile, on basket29 in f64 (the
/// tensor-core build) and f32 (the tile build).
#[test]
#[ignore = "needs a CUDA GPU"]
fn payoff_plane_gives_the_bits_of_the_low_words() {
    let sc = scenario("basket29.yaml");
    for precision in ["f64", "f32"] {
        let prec = format!("simulation.precision={precision}");
        let mut out = Vec::new();
        for plane in ["1", "0"] {
            let dir = tempfile::tempdir().unwrap();
            let args = [
                "--set",
                "simulation.outer_paths=2000",
                "--set",
                prec.as_str(),
                "--backend",
                "gpu",
            ];
            let s = run_json_env(&sc, dir.path(), &args, &[("CVA_GPU_PAYOFF_PLANE", plane)]);
            let bits = ["cva", "value_t0"].map(|k| f(&s, k).to_bits());
            out.push((bits, s["outer_exercises"].clone(), epe(dir.path())));
        }
        println!(
            "basket29 {precision}: CVA {} with the plane, {} without; outer exercises {} / {}",
            f64::from_bits(out[0].0[0]),
            f64::from_bits(out[1].0[0]),
            out[0].1,
            out[1].1
        );
        assert_eq!(out[0].0, out[1].0, "{precision}: CVA and value at t0");
        assert_eq!(out[0].1, out[1].1, "{precision}: outer exercises");
        let same = out[0]
            .2
            .iter()
            .zip(&out[1].2)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same && out[0].2.len() == out[1].2.len(), "{precision}: EPE");
    }
}

/// The fused walk (`cuda/walk.cu`, `CVA_GPU_WALK=1`) against the pipeline
/// (`CVA_GPU_WALK=0`) on the same paths of `file` with `extra` arguments: the same
/// regressions, solved by another elimination of the same `L D L^T` and accepted by the
/// same test, so the CVA agrees far within 0.05 of its standard error and every system is
/// solved at level 0 in both; the largest relative EPE difference is printed. That the
/// walk ran: its steps are booked to the build phase, so the run's solve phase is the
/// pipeline's batched solves alone, none here (less than a fifth of the pipeline run's;
/// about 1/50 measured).
fn walk_matches_the_pipeline(sc: &Path, file: &str, outer: usize, extra: &[&str]) {
    let set = format!("simulation.outer_paths={outer}");
    let mut runs = Vec::new();
    for walk in ["1", "0"] {
        let dir = tempfile::tempdir().unwrap();
        let mut args = vec!["--set", set.as_str(), "--backend", "gpu"];
        args.extend_from_slice(extra);
        let s = run_json_env(sc, dir.path(), &args, &[("CVA_GPU_WALK", walk)]);
        let stats = read_frame(&dir.path().join("solver_stats.parquet"));
        let systems: u64 = u64_column(&stats, "systems").iter().sum();
        let ldlt: u64 = u64_column(&stats, "method_ldlt").iter().sum();
        runs.push((s, epe(dir.path()), systems, ldlt));
    }
    let ((w, we, ws, wl), (p, pe, ps, pl)) = (&runs[0], &runs[1]);
    let (cw, cp, se) = (f(w, "cva"), f(p, "cva"), f(p, "cva_std_error"));
    let worst = we
        .iter()
        .zip(pe)
        .map(|(a, b)| if a == b { 0.0 } else { (a - b).abs() / b.abs() })
        .fold(0.0, f64::max);
    println!(
        "{file}: walk CVA {cw} pipeline {cp} (std error {se}); largest relative EPE \
         difference {worst:.3e}; systems {ws} / {ps}, ldlt {wl} / {pl}; wall {} s / {} s",
        f(w, "wall_seconds"),
        f(p, "wall_seconds")
    );
    assert!(
        (cw - cp).abs() <= 0.05 * se,
        "{file}: CVA {cw} vs {cp}, std error {se}"
    );
    let (sw, sp) = (f(w, "solve_seconds"), f(p, "solve_seconds"));
    assert!(
        sw < 0.2 * sp,
        "{file}: solve phase {sw} s with the walk, {sp} s without"
    );
    assert_eq!(ws, ps, "{file}: systems");
    assert!(*ws > 0, "{file}: no system solved");
    assert_eq!(wl, ws, "{file}: the walk's systems all at L D L^T");
    assert_eq!(pl, ps, "{file}: the pipeline's systems all at L D L^T");
    assert_eq!(we.len(), pe.len());
    assert!(worst < 1e-3, "{file}: EPE differs by {worst:.3e}");
}

/// basket29 as shipped: the walk's own shape (d = 29, n = 30, 300 inner paths; the basis
/// reads assets 0..28 with 1 / S_0 = 1, compiled without tables).
#[test]
#[ignore = "needs a CUDA GPU"]
fn walk_matches_the_pipeline_on_basket29() {
    walk_matches_the_pipeline(&scenario("basket29.yaml"), "basket29.yaml", 3000, &[]);
}

/// An American put on a basket of three correlated assets with spots 36, 40 and 44 (the
/// walk's 1 / S_0 table; n = 4), every path in the regression (`itm_only = false`) and 12
/// exposure dates, with `inner` inner paths: the scenario file in `dir` (put3.yaml). With
/// `fourth_asset`, the market also has an asset D outside the basket (put4.yaml: state rows
/// of d = 4 words, the basis still over A, B, C).
fn basket_put(dir: &Path, inner: usize, fourth_asset: bool) -> std::path::PathBuf {
    let (name, d, corr) = if fourth_asset {
        (
            "put4",
            "    - {name: D, spot: 50.0, volatility: 0.2, dividend_yield: 0.0}\n",
            "    - [1.0, 0.3, 0.3, 0.2]\n    - [0.3, 1.0, 0.3, 0.2]\n    - [0.3, 0.3, 1.0, 0.2]\n    \
            - [0.2, 0.2, 0.2, 1.0]\n",
        )
    } else {
        (
            "put3",
            "",
            "    - [1.0, 0.3, 0.3]\n    - [0.3, 1.0, 0.3]\n    - [0.3, 0.3, 1.0]\n",
        )
    };
    let yaml = format!(
        "name: {name}\nmarket:\n  rate: 0.06\n  assets:\n    \
        - {{name: A, spot: 36.0, volatility: 0.2, dividend_yield: 0.0}}\n    \
        - {{name: B, spot: 40.0, volatility: 0.25, dividend_yield: 0.0}}\n    \
        - {{name: C, spot: 44.0, volatility: 0.3, dividend_yield: 0.0}}\n{d}  \
        correlation:\n{corr}\
        dates:\n  horizon: 1.0\n  exposure_dates: 12\nportfolio:\n  \
        - {{name: basket_put, style: american, kind: put, \
        underlying: {{basket: {{A: 0.3333333333333333, B: 0.3333333333333333, C: 0.3333333333333333}}}}, \
        strike: 40.0, maturity: 1.0, quantity: 1.0}}\n\
        counterparty:\n  hazard_rate: 0.02\n  recovery_rate: 0.4\n\
        simulation:\n  outer_paths: 1000\n  inner_paths: {inner}\n  basis: linear\n  \
        itm_only: false\n  precision: f64\n  solver: escalating\n  seed: 7\n"
    );
    let sc = dir.join(format!("{name}.yaml"));
    std::fs::write(&sc, yaml).unwrap();
    sc
}

/// The three-asset put with 300 inner paths (ten chunks of 32, the last of 12).
#[test]
#[ignore = "needs a CUDA GPU"]
fn walk_matches_the_pipeline_on_a_three_asset_put() {
    let dir = tempfile::tempdir().unwrap();
    let sc = basket_put(dir.path(), 300, false);
    walk_matches_the_pipeline(&sc, "put3.yaml", 1000, &[]);
}

/// The three-asset put with 80 inner paths: three chunks, so the walk's second warp has one
/// chunk fewer than the first (its third group slot is past the last path).
#[test]
#[ignore = "needs a CUDA GPU"]
fn walk_matches_the_pipeline_with_an_odd_chunk_count() {
    let dir = tempfile::tempdir().unwrap();
    let sc = basket_put(dir.path(), 80, false);
    walk_matches_the_pipeline(&sc, "put3.yaml", 1000, &[]);
}

/// The three-asset put in a market of four assets (D is not in the basket: the state rows
/// have d = 4 words, the basis reads assets 0..2) with 34 inner paths: a last chunk of 2
/// paths, and m not a multiple of 4, so the walk's L2 prefetch of the next walk skips the
/// cash flows' dates (their 16-byte pieces) and takes the rest.
#[test]
#[ignore = "needs a CUDA GPU"]
fn walk_matches_the_pipeline_with_a_tail_of_two_paths() {
    let dir = tempfile::tempdir().unwrap();
    let sc = basket_put(dir.path(), 34, true);
    walk_matches_the_pipeline(&sc, "put4.yaml", 1000, &[]);
}

/// A residual tolerance no solve meets makes the walk flag every outer path with a
/// system to solve: the pipeline then runs all their steps from the cash flows the walk
/// left untouched (the escalation to divide and conquer included), and the run gives the
/// bits of the pipeline alone (`CVA_GPU_WALK=0`): CVA, value at t_0, outer exercises, EPE
/// profile and the solver statistics' counts.
#[test]
#[ignore = "needs a CUDA GPU"]
fn walk_with_every_path_flagged_gives_the_pipelines_bits() {
    let sc = scenario("basket29.yaml");
    let mut out = Vec::new();
    for walk in ["1", "0"] {
        let dir = tempfile::tempdir().unwrap();
        let args = [
            "--set",
            "simulation.outer_paths=1000",
            "--set",
            "simulation.residual_tolerance=1.0e-300",
            "--backend",
            "gpu",
        ];
        let s = run_json_env(&sc, dir.path(), &args, &[("CVA_GPU_WALK", walk)]);
        let stats = read_frame(&dir.path().join("solver_stats.parquet"));
        let counts: Vec<Vec<u64>> = stats
            .get_column_names()
            .iter()
            .filter(|n| !n.as_str().starts_with("residual"))
            .map(|n| u64_column(&stats, n.as_str()))
            .collect();
        let bits = ["cva", "value_t0"].map(|k| f(&s, k).to_bits());
        let profile: Vec<u64> = epe(dir.path()).iter().map(|v| v.to_bits()).collect();
        out.push((bits, s["outer_exercises"].clone(), profile, counts));
    }
    println!(
        "basket29, tolerance 1e-300: CVA {} with the walk, {} without",
        f64::from_bits(out[0].0[0]),
        f64::from_bits(out[1].0[0])
    );
    assert_eq!(out[0].0, out[1].0, "CVA and value at t0");
    assert_eq!(out[0].1, out[1].1, "outer exercises");
    assert_eq!(out[0].2, out[1].2, "EPE");
    assert_eq!(out[0].3, out[1].3, "solver statistics");
}
