// Build and run on the GPU machine (benches/RESULTS.md, round 4):
//   nvcc -arch=sm_90 -O3 -fmad=false -prec-div=true -o rcp_check rcp_rn_fast_check.cu && ./rcp_check
// Checks rcp_rn_fast_f64 / _f32 (kernels/cuda/rcp.cu, used by kernels/cuda/ldlt.cu) against IEEE
// 1 / x: f32 exhaustively over [2^-120, 2^120], f64 on 2^33 pseudo-random inputs over
// [2^-1000, 2^1001), one in eight with a mantissa next to all zeros or all ones. Also
// counts for a variant with a final rounding test (rcp64 / rcp32 below: the neighbour of
// y towards 1 / x is taken iff |1 - x y| > |x (y_n - y) / 2|, both sides exact).
#include <cstdio>
#include <cstdint>
__device__ __forceinline__ double rcp64(double d) {
    double y;
    asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(y) : "d"(d));
    double e = fma(-d, y, 1.0);
    e = fma(e, e, e);
    y = fma(y, e, y);
    e = fma(-d, y, 1.0);
    y = fma(y, e, y);
    const double r = fma(-d, y, 1.0);
    const long long yb = __double_as_longlong(y);
    const double yn = __longlong_as_double(r > 0.0 ? yb + 1 : yb - 1);
    const double h = (yn - y) * 0.5;
    return fabs(r) > fabs(d * h) ? yn : y;
}
__device__ __forceinline__ float rcp32(float d) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(d));
    const float e = fmaf(-d, y, 1.0f);
    y = fmaf(y, e, y);
    const float r = fmaf(-d, y, 1.0f);
    const int yb = __float_as_int(y);
    const float yn = __int_as_float(r > 0.0f ? yb + 1 : yb - 1);
    const float h = (yn - y) * 0.5f;
    return fabsf(r) > fabsf(d * h) ? yn : y;
}
// The shipped sequences: rcp_rn_fast_f64 / _f32 of kernels/cuda/rcp.cu (what
// kernels/cuda/ldlt.cu's rcp_rn_fast calls).
#include "../kernels/cuda/rcp.cu"
__global__ void k32(unsigned long long* bad, unsigned long long* bad_nc, unsigned lo, unsigned hi) {
    unsigned long long nb = 0, nnc = 0;
    for (unsigned long long u = lo + blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; u <= hi; u += (unsigned long long)gridDim.x * blockDim.x) {
        float d = __int_as_float((int)u);
        float q = 1.0f / d;
        if (__float_as_int(rcp32(d)) != __float_as_int(q)) nb++;
        if (__float_as_int(rcp_rn_fast_f32(d)) != __float_as_int(q)) nnc++;
    }
    atomicAdd(bad, nb); atomicAdd(bad_nc, nnc);
}
__device__ unsigned long long mix(unsigned long long x) {
    x += 0x9e3779b97f4a7c15ULL; x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL; return x ^ (x >> 31);
}
__global__ void k64(unsigned long long* bad, unsigned long long* bad_nc, unsigned long long count, unsigned long long seed) {
    unsigned long long nb = 0, nnc = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < count; i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long m = mix(i ^ seed);
        // exponent in [-1000, 1000], random mantissa; every 8th: near a power of two
        long long ex = (long long)((m >> 52) % 2001) - 1000;  // [2^-1000, 2^1001)
        unsigned long long mant = m & 0xfffffffffffffULL;
        if ((i & 7) == 0) mant = (m & 1) ? (mant & 0xff) : (0xfffffffffffffULL - (mant & 0xff));
        double d = __longlong_as_double((long long)(((unsigned long long)(ex + 1023) << 52) | mant));
        double q = 1.0 / d;
        if (__double_as_longlong(rcp64(d)) != __double_as_longlong(q)) nb++;
        if (__double_as_longlong(rcp_rn_fast_f64(d)) != __double_as_longlong(q)) nnc++;
    }
    atomicAdd(bad, nb); atomicAdd(bad_nc, nnc);
}
int main() {
    unsigned long long *c; cudaMalloc(&c, 32); cudaMemset(c, 0, 32);
    unsigned lo = ((127 - 120) << 23), hi = ((127 + 120) << 23);
    k32<<<132 * 16, 256>>>(c, c + 1, lo, hi);
    unsigned long long n64 = 1ULL << 33;
    k64<<<132 * 16, 256>>>(c + 2, c + 3, n64, 12345);
    unsigned long long h[4]; cudaMemcpy(h, c, 32, cudaMemcpyDeviceToHost);
    cudaError_t e = cudaGetLastError();
    printf("status %s\n", cudaGetErrorString(e));
    printf("f32 exhaustive [2^-120, 2^120] (%u inputs): with final correction: mismatches %llu; shipped sequence: %llu\n", hi - lo + 1, h[0], h[1]);
    printf("f64 random %llu inputs in [2^-1000, 2^1001): with final correction: mismatches %llu; shipped sequence: %llu\n", n64, h[2], h[3]);
    return (h[1] || h[3]) ? 1 : 0;
}
