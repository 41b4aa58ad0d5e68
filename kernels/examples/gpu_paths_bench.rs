//! Times GPU path generation and the fused regression build.
//!
//! ```text
//! cargo run --release -p cva-kernels --example gpu_paths_bench -- [REPORT.md]
//! ```
//! Market: 29 correlated assets (equicorrelation 0.3), 300 inner paths of one step from
//! the outer states at date 1 (2^19 outer paths, 36.5 GB of f64 states), and of 8 steps
//! for 2^16 outer paths (the same 36.5 GB). Regression:
//! basket put on the 29 assets struck at the basket's spot level, linear basis
//! (n = 30), in-the-money paths only (about half) and all 300 paths; f64 and f32;
//! batch 65,536 (one launch) and 2^20 (two launches of 2^19 over the same states, so
//! every state is still read from device memory: 36.5 GB is far beyond L2), and the
//! engine's shape at 100,000 outer paths: launches of 50,000, with the outer-path stride
//! of one date's states in the engine's `[l][s][mm][i]` buffer (5 dates) or packed.
//! Variants: the f64 tensor-core kernel (TC; stage buffers of 32 paths S, warps = regressions
//! per block W) and the tile kernel (tiles: paths per chunk P, stage buffers S, FMA,
//! prefetch of the next path's tile-row values pf; the only kernel of f32 builds).
//! `GPU_PATHS_BENCH_QUICK=1`: f64 only, no batch 65,536, the TC variants and tiles P16
//! only. CUDA events, 2 warm-up runs, median of 10.
//!
//! Floors per regression: bytes = states (m d 8) + y (m 8) + the payoffs stored (m 8) +
//! lower triangle of A and b in the working precision + the count, at the measured copy
//! bandwidth; arithmetic = m (n+1)(n+2)/2 multiply-adds (b as row n of the augmented matrix), each a multiply
//! and an add unless fused, at the device's FP64 / FP32 lane rate; for the tensor-core
//! kernel (m / 4) x 10 DMMAs of 256 fused multiply-adds at twice the FP64 lane rate.

use cudarc::driver::sys::{CUdevice_attribute, CUevent_flags};
use cudarc::driver::{CudaSlice, CudaStream};
use cva_kernels::cuda::paths::{GpuPaths, MarketSteps};
use cva_kernels::cuda::regression::{
    BasisTables, GpuOptionKind, GpuPayoff, GpuRegression, GpuUnderlying, RegressionConfig,
    RegressionSpec,
};
use cva_kernels::cuda::{probe, GpuError, GpuReal};
use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Arc;

const D: usize = 29;
const M: usize = 300;
const STATE_PATHS: usize = 1 << 19;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median seconds of `f` between two events (2 warm-up calls, 10 timed).
fn time(
    stream: &Arc<CudaStream>,
    mut f: impl FnMut() -> Result<(), GpuError>,
) -> Result<f64, GpuError> {
    let ctx = stream.context();
    for _ in 0..2 {
        f()?;
    }
    stream.synchronize()?;
    let mut t = Vec::new();
    for _ in 0..10 {
        let start = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        let end = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        start.record(stream)?;
        f()?;
        end.record(stream)?;
        end.synchronize()?;
        t.push(start.elapsed_ms(&end)? as f64 * 1e-3);
    }
    Ok(median(&mut t))
}

fn copy_bandwidth(stream: &Arc<CudaStream>) -> Result<f64, GpuError> {
    let len = 1usize << 28; // f64: 2 GiB
    let src: CudaSlice<f64> = stream.clone_htod(&vec![1.5f64; len])?;
    let mut dst: CudaSlice<f64> = stream.alloc_zeros(len)?;
    let t = time(stream, || Ok(stream.memcpy_dtod(&src, &mut dst)?))?;
    Ok(2.0 * (len * 8) as f64 / t)
}

struct Row {
    precision: &'static str,
    batch: usize,
    itm: bool,
    variant: String,
    rate: f64,
    itm_fraction: f64,
    gbs: f64,
    info: String,
}

#[allow(clippy::too_many_arguments)]
/// `GPU_PATHS_BENCH_QUICK=1`: f64 only, fewer variants, no batch 65,536.
fn quick() -> bool {
    std::env::var_os("GPU_PATHS_BENCH_QUICK").is_some_and(|v| v != "0")
}

fn bench_regression<T: GpuReal>(
    stream: &Arc<CudaStream>,
    spec: &RegressionSpec,
    config: RegressionConfig,
    variant: &str,
    states: &CudaSlice<f64>,
    y: &CudaSlice<f64>,
    rows: &mut Vec<Row>,
) -> Result<(), GpuError> {
    let kernel = GpuRegression::<T>::new(stream, spec, config)?;
    let info = kernel.launch_info().clone();
    let n = info.n;
    let es = if T::IS_F64 { 8 } else { 4 };
    let half = STATE_PATHS;
    // (batch, outer-path stride in states, launch size): the bench's shapes, then the
    // engine's at 100,000 outer paths (chunks of 50,000, states `[l][s][mm][i]` of 5
    // dates, so one outer path's states of a date every 5 m d doubles).
    let shapes = [
        (1usize << 16, M * D, half, ""),
        (1 << 20, M * D, half, ""),
        (50_000, M * D, 50_000, " engine batch"),
        (50_000, 5 * M * D, 50_000, " engine batch+stride"),
    ];
    for (batch, stride, launch, shape) in shapes {
        if quick() && batch == 1 << 16 {
            continue;
        }
        let mut a: CudaSlice<T> = stream.alloc_zeros(batch * n * n)?;
        let mut b: CudaSlice<T> = stream.alloc_zeros(batch * n)?;
        let mut c: CudaSlice<u32> = stream.alloc_zeros(batch)?;
        let mut p: CudaSlice<f64> = stream.alloc_zeros(batch * M)?;
        let mut run = || -> Result<(), GpuError> {
            let mut done = 0;
            while done < batch {
                let part = (batch - done).min(launch);
                kernel.build(
                    &states.slice(..),
                    stride,
                    &y.slice(..),
                    part,
                    &mut a.slice_mut(done * n * n..),
                    &mut b.slice_mut(done * n..),
                    &mut c.slice_mut(done..),
                    &mut p.slice_mut(done * M..),
                )?;
                done += part;
            }
            Ok(())
        };
        let t = time(stream, &mut run)?;
        let counts = stream.clone_dtoh(&c)?;
        let entered: u64 = counts.iter().map(|&x| x as u64).sum();
        let bytes = (M * D * 8 + 2 * M * 8 + (n * (n + 1) / 2 + n) * es + 4) as f64 * batch as f64;
        rows.push(Row {
            precision: T::NAME,
            batch,
            itm: spec.itm_only,
            variant: format!("{variant}{shape}"),
            rate: batch as f64 / t,
            itm_fraction: entered as f64 / (batch * M) as f64,
            gbs: bytes / t * 1e-9,
            info: format!(
                "{} G={} P={} S={} threads={} smem={} regs={} local={} blocks/SM={}",
                if info.tensor_cores {
                    format!("TC K={}", info.tensor_core_step)
                } else {
                    "tiles".to_string()
                },
                info.regressions_per_block,
                info.paths_per_chunk,
                info.stages,
                info.block_threads,
                info.shared_bytes,
                info.registers,
                info.local_bytes,
                info.blocks_per_sm
            ),
        });
        let r = rows.last().unwrap();
        println!(
            "{} batch {} {} {}: {:.2} M regressions/s, {:.0} GB/s, entering {:.3}  [{}]",
            r.precision,
            r.batch,
            if r.itm { "itm" } else { "all" },
            r.variant,
            r.rate * 1e-6,
            r.gbs,
            r.itm_fraction,
            r.info
        );
    }
    Ok(())
}

fn run(report: Option<String>) -> Result<(), GpuError> {
    probe()?;
    let ctx = cudarc::driver::CudaContext::new(0)?;
    let stream = ctx.default_stream();
    let name = ctx.name()?;
    let sms = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as f64;
    let clock_khz = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)? as f64;
    // Hopper lanes per SM and clock: 64 FP64, 128 FP32.
    let fp64_lanes = sms * 64.0 * clock_khz * 1e3;
    let fp32_lanes = sms * 128.0 * clock_khz * 1e3;
    let bw = copy_bandwidth(&stream)?;
    println!(
        "{name}: {sms} SMs, {:.0} MHz, copy {:.0} GB/s",
        clock_khz * 1e-3,
        bw * 1e-9
    );

    // Market: 29 assets, equicorrelation 0.3, dt = 1/12.
    let dt: f64 = 1.0 / 12.0;
    let spots: Vec<f64> = (0..D).map(|i| 90.0 + i as f64).collect();
    let sig: Vec<f64> = (0..D).map(|i| 0.15 + 0.005 * i as f64).collect();
    let drift: Vec<f64> = sig.iter().map(|s| (0.03 - 0.5 * s * s) * dt).collect();
    let vol: Vec<f64> = sig.iter().map(|s| s * dt.sqrt()).collect();
    let rho = 0.3;
    let mut factor = vec![0.0; D * D];
    for j in 0..D {
        let mut diag: f64 = 1.0;
        for k in 0..j {
            diag -= factor[j * D + k] * factor[j * D + k];
        }
        let ljj = diag.sqrt();
        factor[j * D + j] = ljj;
        for i in j + 1..D {
            let mut s = rho;
            for k in 0..j {
                s -= factor[i * D + k] * factor[j * D + k];
            }
            factor[i * D + j] = s / ljj;
        }
    }
    let market = MarketSteps {
        spots: &spots,
        drift: &drift,
        vol: &vol,
        factor: Some(&factor),
    };
    let gen = GpuPaths::new(&stream, &market, 2026)?;

    // Outer paths: 2^19 x 1 step; inner paths: 300 x 1 step from date 1.
    let mut outer: CudaSlice<f64> = stream.alloc_zeros(STATE_PATHS * 2 * D)?;
    let t_outer = time(&stream, || {
        gen.outer_paths(0, STATE_PATHS, 1, &mut outer.slice_mut(..))
    })?;
    let mut states: CudaSlice<f64> = stream.alloc_zeros(STATE_PATHS * M * D)?;
    // 8 steps first: the regressions below read the 1-step states.
    let outer8 = STATE_PATHS / 8;
    let t_inner8 = time(&stream, || {
        gen.inner_paths(
            1,
            1,
            &outer.slice(D..),
            2 * D,
            outer8,
            M,
            8,
            &mut states.slice_mut(..),
        )
    })?;
    let t_inner = time(&stream, || {
        gen.inner_paths(
            1,
            1,
            &outer.slice(D..),
            2 * D,
            STATE_PATHS,
            M,
            1,
            &mut states.slice_mut(..),
        )
    })?;
    let normals = (STATE_PATHS * M * D) as f64;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## GPU path generation and fused regression build ({name})\n"
    );
    let _ = writeln!(
        out,
        "Copy bandwidth {:.0} GB/s (read + write); {} SMs at {:.0} MHz: FP64 {:.1} T lane-ops/s, FP32 {:.1} T.\n",
        bw * 1e-9,
        sms,
        clock_khz * 1e-3,
        fp64_lanes * 1e-12,
        fp32_lanes * 1e-12
    );
    let _ = writeln!(
        out,
        "Paths (29 correlated assets, f64): outer 2^19 x 1 step {:.2} ms; inner 2^19 x 300 x 1 step {:.1} ms = {:.2} G normals+steps/s, {:.0} GB/s written.\n",
        t_outer * 1e3,
        t_inner * 1e3,
        normals / t_inner * 1e-9,
        normals * 8.0 / t_inner * 1e-9
    );
    let _ = writeln!(
        out,
        "Paths, 8 steps: inner 2^16 x 300 x 8 steps {:.1} ms = {:.2} G normals+steps/s, {:.0} GB/s written.\n",
        t_inner8 * 1e3,
        normals / t_inner8 * 1e-9,
        normals * 8.0 / t_inner8 * 1e-9
    );
    println!("{out}");

    // Discounted cash flows: a non-zero pattern.
    let y_host: Vec<f64> = (0..STATE_PATHS * M)
        .map(|e| 0.5 + (e % 97) as f64 * 0.125)
        .collect();
    let y = stream.clone_htod(&y_host)?;
    drop(y_host);

    let all: Vec<usize> = (0..D).collect();
    let level = spots.iter().sum::<f64>() / D as f64;
    let mut rows = Vec::new();
    for itm_only in [true, false] {
        let spec = RegressionSpec {
            basis: BasisTables::monomials(1, &all, &spots),
            payoff: GpuPayoff {
                underlying: GpuUnderlying::Basket(
                    all.iter().map(|&i| (i, 1.0 / D as f64)).collect(),
                ),
                kind: GpuOptionKind::Put,
                strike: level,
            },
            itm_only,
            assets: D,
            inner_paths: M,
            payoff_plane: false,
        };
        // (name, config, in the quick set)
        let variants = [
            ("TC", RegressionConfig::default(), true),
            ("TC S3", RegressionConfig::tensor_cores(3, None), true),
            ("TC S4", RegressionConfig::tensor_cores(4, None), true),
            ("TC S2 W7", RegressionConfig::tensor_cores(2, Some(7)), true),
            (
                "TC S2 W14",
                RegressionConfig::tensor_cores(2, Some(14)),
                true,
            ),
            ("TC S3 W3", RegressionConfig::tensor_cores(3, Some(3)), true),
            (
                "tiles P16",
                RegressionConfig::tiles(16, 2, false, false),
                true,
            ),
            (
                "tiles P16 fma",
                RegressionConfig::tiles(16, 2, true, false),
                false,
            ),
            (
                "tiles P16 S4",
                RegressionConfig::tiles(16, 4, false, false),
                false,
            ),
            (
                "tiles P32",
                RegressionConfig::tiles(32, 2, false, false),
                false,
            ),
            (
                "tiles P8",
                RegressionConfig::tiles(8, 2, false, false),
                false,
            ),
            (
                "tiles P16 pf",
                RegressionConfig::tiles(16, 2, false, true),
                false,
            ),
        ];
        for (v, cfg, in_quick) in variants {
            if quick() && !in_quick {
                continue;
            }
            bench_regression::<f64>(&stream, &spec, cfg, v, &states, &y, &mut rows)?;
            // f32 builds always run on the tile kernel.
            if !quick() && !cfg.tensor_cores {
                bench_regression::<f32>(&stream, &spec, cfg, v, &states, &y, &mut rows)?;
            }
        }
    }

    let madds = 31.0 * 32.0 / 2.0; // (n+1)(n+2)/2 multiply-adds per path, n = 30
    let _ = writeln!(
        out,
        "| precision | batch | paths entering | variant | M regressions/s | GB/s | entering fraction | bandwidth floor M/s | arithmetic ceiling M/s | kernel |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let es = if r.precision == "f64" { 8 } else { 4 };
        let bytes = (M * D * 8 + 2 * M * 8 + (30 * 31 / 2 + 30) * es + 4) as f64;
        let lanes = if r.precision == "f64" {
            fp64_lanes
        } else {
            fp32_lanes
        };
        let ops = if r.variant.contains("fma") || r.variant.starts_with("TC") {
            1.0
        } else {
            2.0
        };
        // Tensor cores: 10 DMMAs of 8 x 8 x 4 per 4 paths (every 4-path step counted),
        // at twice the FP64 lane rate.
        let ceiling = if r.variant.starts_with("TC") {
            2.0 * lanes / (M as f64 / 4.0 * 10.0 * 256.0)
        } else {
            lanes / (r.itm_fraction * M as f64 * madds * ops)
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.2} | {:.0} | {:.3} | {:.1} | {:.0} | {} |",
            r.precision,
            r.batch,
            if r.itm { "in the money" } else { "all 300" },
            r.variant,
            r.rate * 1e-6,
            r.gbs,
            r.itm_fraction,
            bw / bytes * 1e-6,
            ceiling * 1e-6,
            r.info
        );
    }
    let _ = writeln!(
        out,
        "\nReference (GPU.md, same H100): bmm on a stored Psi then Cholesky, batch 65,536: 7.1 M/s f64, 10.6 M/s f32. Target build + solve: 50 M/s f64."
    );
    println!("{out}");
    if let Some(path) = report {
        std::fs::write(&path, &out).map_err(|e| GpuError::Invalid(format!("{path}: {e}")))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(std::env::args().nth(1)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpu_paths_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
