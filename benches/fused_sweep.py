# Timing prototype of the fused backward sweep (benches/fused_sweep.cu; benches/RESULTS.md,
# fortieth session). On the GPU machine, from the repository root:
#   python3 benches/fused_sweep.py [OUTER ...]        (default 100000)
# Variants through FUSED_SWEEP_DEFINES, e.g. "SW_SOLVE=0 SW_GRAM=0"; FUSED_SWEEP_KERNEL=2
# runs the second version (fused_sweep2). Prints, per outer
# count, the median time of the sweep over 5 runs (CUDA events, after a warm-up), the
# mean item value at date 0 (an American max-call price on 300 inner paths) and the share
# of exercise decisions.
import math, os, sys
import cupy as cp

D, DATES, M = 29, 10, 300
RATE, SIGMA, Q, T = 0.1, 0.1, 0.1, 1.0
dt = T / DATES
drift = (RATE - Q - 0.5 * SIGMA * SIGMA) * dt
vol = SIGMA * math.sqrt(dt)
seed = 29

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
defs = [kv.split("=") for kv in os.environ.get("FUSED_SWEEP_DEFINES", "").split()]
src = "".join(f"#define {k} {v}\n" for k, v in defs)
src += f"#define SW_DF {float.hex(math.exp(-RATE * dt))}\n"
src += (f"#define PATHS_D {D}\n#define PATHS_FACTOR 0\n#define PATHS_BLOCK 64\n"
        f"#define PATHS_KEY0 {seed & 0xffffffff:#010x}u\n#define PATHS_KEY1 {seed >> 32:#010x}u\n")
src += "__constant__ double C_DRIFT[%d] = {%s};\n" % (D, ", ".join([float.hex(drift)] * D))
src += "__constant__ double C_VOL[%d] = {%s};\n" % (D, ", ".join([float.hex(vol)] * D))
src += open(os.path.join(root, "kernels/cuda/rcp.cu")).read()
src += open(os.path.join(root, "kernels/cuda/paths.cu")).read()
src += open(os.path.join(root, "benches/fused_sweep.cu")).read()
opts = ("--fmad=false", "--prec-div=true", "--prec-sqrt=true", "--ftz=false", "--std=c++17")
mod = cp.RawModule(code=src, options=opts)
version = os.environ.get("FUSED_SWEEP_KERNEL", "1")
if version == "2":
    k = mod.get_function("fused_sweep2")
    THREADS = 352
    SMEM = (32 * 308 + 32 * 33 + 32 + 16) * 8 + 32 * 16
else:
    k = mod.get_function("fused_sweep")
    THREADS = 320
    SMEM = (300 * 36 + 32 * 33 + 32 + THREADS // 32) * 8 + 32 * 16
k.max_dynamic_shared_size_bytes = SMEM
sms = cp.cuda.Device().attributes["MultiProcessorCount"]
print(f"fused_sweep (version {version}): {k.num_regs} registers, {k.local_size_bytes} B local, "
      f"{SMEM} B shared, {sms} SMs", flush=True)

for outer in [int(a) for a in sys.argv[1:]] or [100000]:
    start = cp.ones(outer * DATES * D, dtype=cp.float64)
    values = cp.full(outer * DATES, cp.nan, dtype=cp.float64)
    counter = cp.zeros(1, dtype=cp.uint32)
    stats = cp.zeros(1, dtype=cp.uint64)
    grid = 2 * sms
    def run():
        counter.fill(0)
        stats.fill(0)
        values.fill(cp.nan)
        k((grid,), (THREADS,), (cp.int64(outer), start, values, counter, stats),
          shared_mem=SMEM)
    run()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(5):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record()
        run()
        e1.record()
        e1.synchronize()
        times.append(cp.cuda.get_elapsed_time(e0, e1) / 1e3)
    v = values.reshape(DATES, outer)
    bad = int(cp.isnan(values).sum())
    regressions = outer * sum(DATES - i - 1 for i in range(DATES))
    med = sorted(times)[2]
    print(f"outer {outer}: sweep {med:.4f} s (runs {' '.join(f'{t:.4f}' for t in times)}), "
          f"{regressions / med / 1e6:.1f} M regressions/s; date-0 value {float(v[0].mean()):.6f} "
          f"(sd {float(v[0].std()):.2e}), date-9 {float(v[9].mean()):.6f}; "
          f"exercise share {int(stats[0]) / (regressions * M):.3f}; NaN items {bad}", flush=True)
