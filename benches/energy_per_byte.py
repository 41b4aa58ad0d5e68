# Energy per byte read from HBM against from L2 (benches/RESULTS.md, thirty-seventh session,
# calls 3 and 4; on the GPU machine: python3 benches/energy_per_byte.py [spin]): a CuPy
# kernel streams 16-byte loads over a buffer `reps` times (grid-stride, every element once
# per rep) and writes one word per thread; the NVML energy counter (100 ms updates) over
# runs of ~3 s. `spin`: only the SMs-occupied-but-idle baselines (no buffers allocated).
import sys, time, cupy as cp, pynvml as n
n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0)
src = r'''
extern "C" __global__ void rd(const double2* __restrict__ a, long long n2, int reps, double* out) {
  double s = 0.0;
  long long stride = (long long)gridDim.x * blockDim.x;
  for (int r = 0; r < reps; ++r)
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n2; i += stride) {
      double2 v = __ldcg(a + i); s += v.x + v.y; }
  out[(long long)blockIdx.x * blockDim.x + threadIdx.x] = s;
}
extern "C" __global__ void wr(double2* __restrict__ a, long long n2, int reps) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (int r = 0; r < reps; ++r)
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n2; i += stride)
      __stcg(a + i, make_double2((double)r, (double)i));
}
extern "C" __global__ void spin(long long cycles, int sleep, double* out) {
  long long t0 = clock64(); long long k = 0;
  while (clock64() - t0 < cycles) { if (sleep) __nanosleep(200); ++k; }
  out[(long long)blockIdx.x * blockDim.x + threadIdx.x] = (double)k;
}
extern "C" __global__ void fma64(int iters, double* out) {
  double x = threadIdx.x * 1e-3, y = 1.0000001, z = 0.9999999, w = blockIdx.x * 1e-6;
  for (int i = 0; i < iters; ++i) { x = fma(x, y, z); w = fma(w, z, y); x = fma(x, z, w); w = fma(w, y, x); }
  out[(long long)blockIdx.x * blockDim.x + threadIdx.x] = x + w;
}
'''
m = cp.RawModule(code=src)
rd, wr, f64, spin = m.get_function("rd"), m.get_function("wr"), m.get_function("fma64"), m.get_function("spin")
SM = cp.cuda.Device().attributes["MultiProcessorCount"]; B = 512; G = SM * 4
out = cp.zeros(G * B, dtype=cp.float64)
def energy(): return n.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0
def meas(name, f, nbytes):
    f(); cp.cuda.Device().synchronize()
    time.sleep(0.3)
    e0 = energy(); t0 = time.monotonic()
    k = 0
    while time.monotonic() - t0 < 3.0:
        f(); cp.cuda.Device().synchronize(); k += 1
    t1 = time.monotonic(); time.sleep(0.25); e1 = energy()
    # the counter lags ~100 ms: the 0.25 s tail at idle is charged at the idle power below
    dt = t1 - t0; E = e1 - e0 - 0.25 * IDLE
    print(f"{name}: {k} launches, {dt:.2f} s, {E:.0f} J, {E/dt:.0f} W" + (f", {nbytes*k/dt/1e12:.2f} TB/s, {E/(nbytes*k)*1e12:.1f} pJ/B" if nbytes else ""), flush=True)
    time.sleep(1.0)
time.sleep(1.0); e0 = energy(); time.sleep(3.0); IDLE = (energy() - e0) / 3.0
print(f"idle: {IDLE:.0f} W", flush=True)
if len(sys.argv) > 1 and sys.argv[1] == "spin":
    meas("spin, nanosleep (SMs occupied, ~idle)", lambda: spin((G,), (B,), (cp.int64(100_000_000), cp.int32(1), out)), 0)
    meas("spin, busy clock reads", lambda: spin((G,), (B,), (cp.int64(100_000_000), cp.int32(0), out)), 0)
    print("SM clock now:", n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))
    sys.exit(0)
big = cp.zeros(16 * 2**30 // 8, dtype=cp.float64)      # 16 GiB
small = cp.zeros(16 * 2**20 // 8, dtype=cp.float64)    # 16 MiB (L2 is 50 MB)
nb2, ns2 = big.size // 2, small.size // 2
meas("HBM read 16 GiB x 4", lambda: rd((G,), (B,), (big, cp.int64(nb2), cp.int32(4), out)), 4 * big.nbytes)
meas("L2 read 16 MiB x 4096", lambda: rd((G,), (B,), (small, cp.int64(ns2), cp.int32(4096), out)), 4096 * small.nbytes)
meas("HBM write 16 GiB x 4", lambda: wr((G,), (B,), (big, cp.int64(nb2), cp.int32(4))), 4 * big.nbytes)
meas("L2 write 16 MiB x 4096", lambda: wr((G,), (B,), (small, cp.int64(ns2), cp.int32(4096))), 4096 * small.nbytes)
meas("FP64 FMA", lambda: f64((G,), (B,), (cp.int32(200000), out)), 0)
print(f"FP64 FMAs per launch: {G*B*200000*4:.3e}")
