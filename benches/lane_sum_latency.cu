// Microbenchmark of the eleventh session (benches/RESULTS.md, "Eleventh session: group sums
// on the FP64 tensor cores", calls 1-3): latency and throughput of f64 sums across lanes
// by shuffle butterflies, by shared memory, and by mma.sync on the FP64 tensor cores.
// Not part of the build. On a CUDA machine (sm_90 for the m16n8k* shapes):
//   nvcc -O3 -arch=sm_90 benches/lane_sum_latency.cu -o lane_sum_latency && ./lane_sum_latency
// Prints, per variant, a check of the sums against the host's (relative error), then
// cycles per reduction for one warp (latency) and per warp at 132 x 12 warps (throughput).
// Variant 8 (m16n8k8) uses a guessed fragment layout that the check shows to be wrong;
// variant 3 (shared memory; run in call 1 only, no longer called from main) keeps its 16
// loads in a local-memory array: both were measured and dropped. The kernels' own code is tc_segment_sum / tc_segment_sum2 in
// kernels/cuda/common.cu (variants 7 and 9 here).
#include <cstdio>
#include <cstdlib>
__device__ __forceinline__ void dmma(double& d0, double& d1, double a, double b) {
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
                 : "+d"(d0), "+d"(d1) : "d"(a), "d"(b));
}
__device__ __forceinline__ void dmma16x8x8(double& d0, double& d1, double& d2, double& d3, double a0,
                                           double a1, double a2, double a3, double b0, double b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+d"(d0), "+d"(d1), "+d"(d2), "+d"(d3)
                 : "d"(a0), "d"(a1), "d"(a2), "d"(a3), "d"(b0), "d"(b1));
}
__device__ __forceinline__ void dmma16x8x4(double& d0, double& d1, double& d2, double& d3, double a0,
                                           double a1, double b0) {
    asm volatile("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
                 : "+d"(d0), "+d"(d1), "+d"(d2), "+d"(d3)
                 : "d"(a0), "d"(a1), "d"(b0));
}
template <int V>
__device__ __forceinline__ void red(double& a, double& b, double* sm) {
    if (V == 1) {  // shuffles, 16 lanes, 2 values
#pragma unroll
        for (int o = 8; o >= 1; o >>= 1) {
            a += __shfl_xor_sync(0xffffffffu, a, o);
            b += __shfl_xor_sync(0xffffffffu, b, o);
        }
    } else if (V == 2) {  // DMMA quad sums of a and b, then 2 shuffle levels
        double a0 = 0, a1 = 0, b0 = 0, b1 = 0;
        dmma(a0, a1, a, 1.0);
        dmma(b0, b1, b, 1.0);
        a = a0; b = b0;
#pragma unroll
        for (int o = 4; o <= 8; o <<= 1) {
            a += __shfl_xor_sync(0xffffffffu, a, o);
            b += __shfl_xor_sync(0xffffffffu, b, o);
        }
    } else if (V == 3) {  // shared memory: store, syncwarp, 16 broadcast LDS.128, tree
        const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
        double2* s = reinterpret_cast<double2*>(sm) + w * 32;
        s[lane] = make_double2(a, b);
        __syncwarp();
        const double2* g = s + (lane & 16);
        double2 v[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) v[i] = g[i];
#pragma unroll
        for (int st = 8; st >= 1; st >>= 1)
#pragma unroll
            for (int i = 0; i < st; ++i) { v[i].x += v[i + st].x; v[i].y += v[i + st].y; }
        __syncwarp();
        a = v[0].x; b = v[0].y;
    } else if (V == 4) {  // shuffles, 32 lanes, 1 value
#pragma unroll
        for (int o = 16; o >= 1; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
    } else if (V == 5) {  // DMMA quad sum then 3 shuffle levels, 32 lanes, 1 value
        double a0 = 0, a1 = 0;
        dmma(a0, a1, a, 1.0);
        a = a0;
#pragma unroll
        for (int o = 4; o <= 16; o <<= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
    } else if (V == 6) {  // two DMMA stages, 16 lanes, 2 values
        const int lane = threadIdx.x & 31, r = lane >> 2, k = lane & 3;
        double a0 = 0, a1 = 0, b0 = 0, b1 = 0;
        dmma(a0, a1, 1.0, a);   // D[r][c] = S_c: lane holds S_2k, S_2k+1
        dmma(b0, b1, 1.0, b);
        double pa = a0 + a1, pb = b0 + b1;  // P_k
        const bool mine = (k >> 1) == (r >> 2);
        double c0 = 0, c1 = 0, e0 = 0, e1 = 0;
        dmma(c0, c1, mine ? pa : 0.0, 1.0);
        dmma(e0, e1, mine ? pb : 0.0, 1.0);
        a = c0; b = e0;
    } else if (V == 7) {  // two DMMA stages, 32 lanes, 1 value
        double a0 = 0, a1 = 0;
        dmma(a0, a1, 1.0, a);
        double p = a0 + a1;
        double c0 = 0, c1 = 0;
        dmma(c0, c1, p, 1.0);
        a = c0;
    } else if (V == 8) {  // m16n8k8 twice, 16 lanes, 2 values
        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
        double c0 = 0, c1 = 0, c2 = 0, c3 = 0;
        dmma16x8x8(c0, c1, c2, c3, 1.0, 0.0, 0.0, 1.0, a, b);  // a: S^a_{2t}, S^a_{2t+1}; b: rows g+8
        const double pa = c0 + c1, pb = c2 + c3;
        const bool mine = (t >> 1) == (g >> 2);
        double e0 = 0, e1 = 0, e2 = 0, e3 = 0;
        dmma16x8x8(e0, e1, e2, e3, mine ? pa : 0.0, 0.0, mine ? pb : 0.0, 0.0, 1.0, 1.0);
        a = e0; b = e2;
    } else if (V == 9) {  // 2 x m8n8k4 (B-mode quad sums) + m16n8k4 (A-mode selected), 16 lanes, 2 values
        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
        double a0 = 0, a1 = 0, b0 = 0, b1 = 0;
        dmma(a0, a1, 1.0, a);
        dmma(b0, b1, 1.0, b);
        const double pa = a0 + a1, pb = b0 + b1;
        const bool mine = (t >> 1) == (g >> 2);
        double e0 = 0, e1 = 0, e2 = 0, e3 = 0;
        dmma16x8x4(e0, e1, e2, e3, mine ? pa : 0.0, mine ? pb : 0.0, 1.0);
        a = e0; b = e2;
    }
}
template <int V>
__global__ void check(double* out) {
    const int lane = threadIdx.x & 31;
    double a = 2.0 + sin(lane * 1.3), b = 3.0 + cos(lane * 0.7);
    red<V>(a, b, nullptr);
    out[2 * lane] = a;
    out[2 * lane + 1] = b;
}
template <int V>
void check_run(const char* name, int values, int lanes) {
    double *d; cudaMalloc(&d, 64 * 8);
    check<V><<<1, 32>>>(d);
    double h[64]; cudaMemcpy(h, d, 64 * 8, cudaMemcpyDeviceToHost);
    double maxrel = 0;
    for (int l = 0; l < 32; ++l)
        for (int v = 0; v < values; ++v) {
            double ref = 0;
            for (int j = (lanes == 16 ? (l & 16) : 0); j < (lanes == 16 ? (l & 16) + 16 : 32); ++j)
                ref += v == 0 ? 2.0 + sin(j * 1.3) : 3.0 + cos(j * 0.7);
            double r = fabs(h[2 * l + v] - ref) / fabs(ref);
            if (r > maxrel) maxrel = r;
        }
    printf("check %-28s max rel err vs host sum %.2e (%s)\n", name, maxrel, cudaGetErrorString(cudaGetLastError()));
    cudaFree(d);
}
template <int V>
__global__ void bench(int iters, long long* cyc, double* out) {
    __shared__ double sm[4 * 32 * 2 * 8];
    const int lane = threadIdx.x & 31;
    double a = 1.0 + lane * 1e-3, b = 2.0 - lane * 1e-3;
    const double ca = 1.0 + lane * 1e-4, cb = 0.5 + lane * 1e-4;
    __syncwarp();
    long long t0 = clock64();
    for (int it = 0; it < iters; ++it) {
        red<V>(a, b, sm);
        a = fma(a, 1e-6, ca);
        b = fma(b, 1e-6, cb);
    }
    long long t1 = clock64();
    if (lane == 0) cyc[blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)] = t1 - t0;
    out[blockIdx.x * blockDim.x + threadIdx.x] = a + b;
}
template <int V>
void run(const char* mode, const char* name, int blocks, int threads, int iters) {
    long long* cyc; double* out;
    int nw = blocks * threads / 32;
    cudaMalloc(&cyc, nw * 8); cudaMalloc(&out, blocks * threads * 8);
    bench<V><<<blocks, threads>>>(iters, cyc, out);  // warm
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    cudaEventRecord(e0);
    bench<V><<<blocks, threads>>>(iters, cyc, out);
    cudaEventRecord(e1); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    long long* h = (long long*)malloc(nw * 8);
    cudaMemcpy(h, cyc, nw * 8, cudaMemcpyDeviceToHost);
    double mean = 0; for (int i = 0; i < nw; ++i) mean += h[i]; mean /= nw;
    double* ho = (double*)malloc(blocks * threads * 8);
    cudaMemcpy(ho, out, blocks * threads * 8, cudaMemcpyDeviceToHost);
    printf("%s %-28s blocks %4d threads %4d: %7.1f cycles/iter per warp, %8.3f ms, %.3e warp-iters/s, out[0] %.17g out[16] %.17g err %s\n",
           mode, name, blocks, threads, mean / iters, ms, (double)nw * iters / (ms * 1e-3), ho[0], ho[16],
           cudaGetErrorString(cudaGetLastError()));
    free(h); free(ho); cudaFree(cyc); cudaFree(out);
}
// Every timed variant in one configuration (mode: a label, L latency or T throughput).
void run_all(const char* mode, int blocks, int threads, int it) {
    run<0>(mode, "baseline (2 fma)", blocks, threads, it);
    run<1>(mode, "shfl 16-lane x2", blocks, threads, it);
    run<2>(mode, "dmma+shfl 16-lane x2", blocks, threads, it);
    run<4>(mode, "shfl 32-lane x1", blocks, threads, it);
    run<5>(mode, "dmma+shfl 32-lane x1", blocks, threads, it);
    run<6>(mode, "2 dmma stages 16-lane x2", blocks, threads, it);
    run<7>(mode, "2 dmma stages 32-lane x1", blocks, threads, it);
    run<8>(mode, "m16n8k8 x2 16-lane x2", blocks, threads, it);
    run<9>(mode, "2 m8n8k4 + m16n8k4 16-lane", blocks, threads, it);
}
int main() {
    const int it = 20000;
    check_run<1>("shfl 16-lane x2", 2, 16);
    check_run<2>("dmma+shfl 16-lane x2", 2, 16);
    check_run<6>("2 dmma stages 16-lane x2", 2, 16);
    check_run<8>("m16n8k8 x2 16-lane x2", 2, 16);
    check_run<9>("2 m8n8k4 + m16n8k4 16-lane", 2, 16);
    check_run<4>("shfl 32-lane x1", 1, 32);
    check_run<7>("2 dmma stages 32-lane x1", 1, 32);
    // latency: one warp; throughput: 132 SMs x 12 warps (3 blocks of 128)
    for (int rep = 0; rep < 2; ++rep) run_all("L", 1, 32, it);
    for (int rep = 0; rep < 2; ++rep) run_all("T", 396, 128, it);
    return 0;
}
