# Power sampler (benches/RESULTS.md, "Thirty-seventh session"): samples the instant power,
# the energy counter and the SM clock of GPU 0 every ~1 ms until killed (SIGTERM) or for
# argv[2] seconds; writes CSV lines to argv[1]: t_s (CLOCK_MONOTONIC), power_W,
# energy_J (the board's counter), sm_MHz. Needs pynvml (nvidia-ml-py, on the GPU machine's image).
# NVML updates all three only every ~100 ms on the H200 (driver 580): use the energy
# counter over long runs, not the samples, to compare runs.
import sys, time, signal, pynvml as n
n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0)
out = open(sys.argv[1], "w"); dur = float(sys.argv[2]) if len(sys.argv) > 2 else 1e9
stop = False
def s(*a):
    global stop; stop = True
signal.signal(signal.SIGTERM, s)
FI = getattr(n, "NVML_FI_DEV_POWER_INSTANT", 186)
t0 = time.monotonic()
while not stop and time.monotonic() - t0 < dur:
    t = time.monotonic()
    try:
        p = n.nvmlDeviceGetFieldValues(h, [FI])[0]
        pw = p.value.uiVal / 1000.0 if p.nvmlReturn == 0 else -1
    except Exception:
        pw = -2
    e = n.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0
    c = n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)
    out.write(f"{t:.4f},{pw:.1f},{e:.3f},{c}\n")
    time.sleep(0.001)
out.close()
