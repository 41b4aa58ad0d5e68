// Common prelude of every kernel module of the batched symmetric solver.
//
// Compiled by NVRTC (no host headers: no <stdint.h>, no <cmath>); the Rust side
// (kernels/src/cuda/module.rs) prepends the defines below and concatenates this file
// with one kernel file:
//
//   REAL_F64   1 for double, 0 for float; entry points get the suffix _f64 / _f32
//   N          system size (1..64), compile-time so that every loop over rows and
//              columns unrolls and register arrays are indexed by constants
//   NSTAR      communicating threads per system (the paper's n*), 1..64
//
// Numerics are set by the compile options (--fmad=false --prec-div=true
// --prec-sqrt=true --ftz=false): plain IEEE + - * / and sqrt, as in the CPU code.

#if REAL_F64
typedef double real;
#define REAL_MAX 1.7976931348623157e308
#define REAL_MIN_POSITIVE 2.2250738585072014e-308
#define ENTRY(name) name##_f64
__device__ __forceinline__ real real_nan() { return __longlong_as_double(0x7ff8000000000000ULL); }
#else
typedef float real;
#define REAL_MAX 3.40282347e38f
#define REAL_MIN_POSITIVE 1.17549435e-38f
#define ENTRY(name) name##_f32
__device__ __forceinline__ real real_nan() { return __int_as_float(0x7fc00000); }
#endif

// Per-system report, mirrored by `GpuReport` in kernels/src/cuda/solver.rs
// (#[repr(C)]: f64, u32, u32; 16 bytes).
struct GpuReport {
    double residual;
    unsigned int method;
    unsigned int status;
};

// Codes of `Method` and `Status` (kernels/src/batch/mod.rs), in declaration order.
#define METHOD_LDLT 0u
#define METHOD_HOUSEHOLDER_PCR 1u
#define STATUS_OK 0u
#define STATUS_NOT_POSITIVE_DEFINITE 1u
#define STATUS_FAILED 2u
#define STATUS_NON_FINITE_INPUT 3u

__device__ __forceinline__ bool finite(real v) { return fabs(v) <= REAL_MAX; }

// Writes the report of system `sys`: the residual (NaN where there is no solution), the
// method and the status.
__device__ __forceinline__ void store_report(GpuReport* __restrict__ rep, long long sys, bool no_solution,
                                             double res, unsigned method, unsigned status) {
    GpuReport rp;
    rp.residual = no_solution ? __longlong_as_double(0x7ff8000000000000ULL) : res;
    rp.method = method;
    rp.status = status;
    rep[sys] = rp;
}

// Sums over aligned segments of W = 8, 16 or 32 lanes on the FP64 tensor cores (sm_80
// or later; every lane of the warp takes part), through prelude.cu's mma_m8n8k4_f64.
// With ones as A and the lanes' values as B, lane l receives the sums of the lane quads
// 2t and 2t + 1, t = l % 4, added into the sum of the octet of lanes 8t .. 8t + 7
// (tc_octet_sum); a second step with those octet sums as A (0 for the octets outside the
// lane's segment) and ones as B gives every lane its segment's sum. The tensor core adds
// its four products in order as fused multiply-adds, so each sum is a fixed chain of
// roundings: deterministic, in another order than a shuffle butterfly.
// Latency on the H100: a 32-lane sum 175 -> 70 cycles (benches/RESULTS.md, eleventh
// session).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define TC_SUMS 1
// Sum of x over the octet of lanes 8 (l % 4) .. 8 (l % 4) + 7.
__device__ __forceinline__ double tc_octet_sum(double x) {
    double d0 = 0, d1 = 0;
    mma_m8n8k4_f64(d0, d1, 1.0, x);
    return d0 + d1;
}
// Whether the octet of tc_octet_sum lies in this lane's segment of W lanes.
template <int W>
__device__ __forceinline__ bool tc_own_octet() {
    const int lane = threadIdx.x & 31, lane0 = lane & ~(W - 1), o = 8 * (lane & 3);
    return o >= lane0 && o < lane0 + W;
}
// Sum of x over this lane's segment of W lanes.
template <int W>
__device__ __forceinline__ double tc_segment_sum(double x) {
    static_assert(W == 8 || W == 16 || W == 32, "segments of 8, 16 or 32 lanes");
    const double p = tc_octet_sum(x);
    double d0 = 0, d1 = 0;
    mma_m8n8k4_f64(d0, d1, tc_own_octet<W>() ? p : 0.0, 1.0);
    return d0;
}
// Sums of a and of b over this lane's segment of W lanes.
template <int W>
__device__ __forceinline__ void tc_segment_sum2(double& a, double& b) {
    static_assert(W == 8 || W == 16 || W == 32, "segments of 8, 16 or 32 lanes");
    const double pa = tc_octet_sum(a), pb = tc_octet_sum(b);
    const bool own = tc_own_octet<W>();
#if __CUDA_ARCH__ >= 900
    // Second step for both at once: m16n8k4, A rows l/4 (a) and l/4 + 8 (b).
    double d0 = 0, d1 = 0, d2 = 0, d3 = 0;
    asm("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
        : "+d"(d0), "+d"(d1), "+d"(d2), "+d"(d3)
        : "d"(own ? pa : 0.0), "d"(own ? pb : 0.0), "d"(1.0));
    a = d0;
    b = d2;
#else
    double d0 = 0, d1 = 0, e0 = 0, e1 = 0;
    mma_m8n8k4_f64(d0, d1, own ? pa : 0.0, 1.0);
    mma_m8n8k4_f64(e0, e1, own ? pb : 0.0, 1.0);
    a = d0;
    b = e0;
#endif
}
#else
#define TC_SUMS 0
#endif

// Positions of a kernel that walks a batch or a list (the escalation's lists, whose
// lengths are counters written on the device, never read on the host): the positions
// p < listed_total(capacity, count, k0) are the systems listed_system(idx, k0, p).
// count null: all `capacity` positions; else min(capacity, *count - k0), at least 0.
__device__ __forceinline__ long long listed_total(long long capacity, const unsigned int* count, long long k0) {
    if (!count) return capacity;
    const long long left = (long long)*count - k0;
    return left < 0 ? 0 : (left < capacity ? left : capacity);
}
// idx null: system k0 + p of the batch; else the listed system idx[k0 + p].
__device__ __forceinline__ long long listed_system(const unsigned int* idx, long long k0, long long p) {
    return idx ? (long long)idx[k0 + p] : k0 + p;
}

#ifdef N
// Column-major packed lower triangle: column c starts at packed_col(c); entry
// (r, c), r >= c, is at packed_col(c) + r - c.
__host__ __device__ constexpr int packed_col(int c) { return c * N - (c * (c - 1)) / 2; }
// Row-major packed lower triangle with diagonal: row r starts at packed_row(r).
__host__ __device__ constexpr int packed_row(int r) { return (r * (r + 1)) / 2; }
// Record of one system between the two kernels of divide and conquer
// (householder_pcr.cu's householder_tridiag writes it, stedc.cu's divide_conquer reads
// it), TRI_STRIDE reals, for P A P = Q T Q^T with P the reversal permutation (so that
// A = (P Q P)(P T P)(P Q P)^T, P T P the CPU's T): d (N, the diagonal of T), e (N:
// e[i] = T(i+1, i) for i < N-1; e[N-1] = 1 when the input held a non-finite entry, else
// 0), tau (N, tau[N-1] = 0), y = Q^T P b (N), V (N x N, reflector k in
// V[k N .. k N + N - 1], row-indexed: v_k(r) = 0 for r <= k, v_k(k + 1) = 1; reflector
// N - 1 unused), so that Q = H_0 H_1 ... H_{N-2}, H_k = I - tau_k v_k v_k^T.
constexpr int TRI_STRIDE = N * N + 4 * N;

#endif  // N

#ifdef NSTAR
// ---------------------------------------------------------------------------------
// Thread organisation: a *group* of NSTAR threads owns one system. Groups of at most
// 32 threads sit in aligned lane segments of width GW (the next power of two), so a
// warp holds SPW = 32 / GW systems and a group synchronises with __syncwarp and
// reduces with xor-shuffles inside its segment. A group of more than 32 threads is a
// whole block of 64 threads (one system per block, __syncthreads).
// Thread t of a group owns the rows t, t + NSTAR, t + 2 NSTAR, ... (R slots).
// ---------------------------------------------------------------------------------
__host__ __device__ constexpr int next_pow2(int v) { return v <= 1 ? 1 : 2 * next_pow2((v + 1) / 2); }
__host__ __device__ constexpr int ceil_log2(int v) { return v <= 1 ? 0 : 1 + ceil_log2((v + 1) / 2); }
constexpr int R = (N + NSTAR - 1) / NSTAR;
constexpr int GW = NSTAR > 32 ? 64 : next_pow2(NSTAR);
constexpr int SPW = GW >= 32 ? 1 : 32 / GW;
__host__ __device__ constexpr int row_min(int s) { return s * NSTAR; }
__host__ __device__ constexpr int row_max(int s) { return (s * NSTAR + NSTAR - 1) < (N - 1) ? (s * NSTAR + NSTAR - 1) : (N - 1); }

// Thread t of a group writes its rows of x (NaN where there is no solution) into
// X[sys * N ..], streaming stores.
__device__ __forceinline__ void store_group_solution(real* __restrict__ X, long long sys, int t,
                                                     const real (&x)[R], bool no_solution) {
#pragma unroll
    for (int s = 0; s < R; ++s) {
        int i = t + s * NSTAR;
        if (t < NSTAR && i < N) __stcs(X + sys * N + i, no_solution ? real_nan() : x[s]);
    }
}

__device__ __forceinline__ void group_sync() {
#if NSTAR > 32
    __syncthreads();
#else
    __syncwarp();
#endif
}

struct Group {
    int t;        // thread index inside the group, 0..GW-1 (rows only for t < NSTAR)
    int lane0;    // first lane of the group's segment inside its warp
    int index;    // group index inside the block
    long long sys;  // system index
    unsigned mask;  // lanes of this group's segment (NSTAR <= 32)
};

__device__ __forceinline__ Group make_group() {
    Group g;
#if NSTAR > 32
    g.t = threadIdx.x;
    g.lane0 = 0;
    g.index = 0;
    g.sys = blockIdx.x;
    g.mask = 0xffffffffu;
#else
    int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    g.t = lane % GW;
    g.lane0 = lane - g.t;
    g.index = warp * SPW + lane / GW;
    g.sys = (long long)blockIdx.x * ((blockDim.x >> 5) * SPW) + g.index;
    g.mask = GW >= 32 ? 0xffffffffu : (((1u << GW) - 1u) << g.lane0);
#endif
    return g;
}

// Value of `v` held by thread `src` of the group (src compile-time in practice).
// Only for NSTAR <= 32.
__device__ __forceinline__ real group_bcast(real v, const Group& g, int src) {
    return __shfl_sync(0xffffffffu, v, g.lane0 + src);
}

// Sum and max over the group's threads (threads without rows contribute 0).
// `scratch`: 8 reals of static shared memory per block, used only when NSTAR > 32.
__device__ __forceinline__ void group_sum2(real& a, real& b, real* scratch) {
#pragma unroll
    for (int off = (GW > 32 ? 16 : GW / 2); off >= 1; off >>= 1) {
        a += __shfl_xor_sync(0xffffffffu, a, off);
        b += __shfl_xor_sync(0xffffffffu, b, off);
    }
#if NSTAR > 32
    int w = threadIdx.x >> 5;
    __syncthreads();
    if ((threadIdx.x & 31) == 0) { scratch[2 * w] = a; scratch[2 * w + 1] = b; }
    __syncthreads();
    a = scratch[0] + scratch[2];
    b = scratch[1] + scratch[3];
#endif
}

__device__ __forceinline__ void group_max4(real& a, real& b, real& c, real& d, real* scratch) {
#pragma unroll
    for (int off = (GW > 32 ? 16 : GW / 2); off >= 1; off >>= 1) {
        a = fmax(a, __shfl_xor_sync(0xffffffffu, a, off));
        b = fmax(b, __shfl_xor_sync(0xffffffffu, b, off));
        c = fmax(c, __shfl_xor_sync(0xffffffffu, c, off));
        d = fmax(d, __shfl_xor_sync(0xffffffffu, d, off));
    }
#if NSTAR > 32
    int w = threadIdx.x >> 5;
    __syncthreads();
    if ((threadIdx.x & 31) == 0) {
        scratch[4 * w] = a; scratch[4 * w + 1] = b; scratch[4 * w + 2] = c; scratch[4 * w + 3] = d;
    }
    __syncthreads();
    a = fmax(scratch[0], scratch[4]);
    b = fmax(scratch[1], scratch[5]);
    c = fmax(scratch[2], scratch[6]);
    d = fmax(scratch[3], scratch[7]);
#endif
}

// True if any thread of the group has `p` set.
__device__ __forceinline__ bool group_any(bool p, const Group& g, int* iscratch) {
#if NSTAR > 32
    __syncthreads();
    if (threadIdx.x == 0) iscratch[0] = 0;
    __syncthreads();
    if (p) iscratch[0] = 1;
    __syncthreads();
    return iscratch[0] != 0;
#else
    return (__ballot_sync(0xffffffffu, p) & g.mask) != 0u;
#endif
}

// Asynchronous global -> shared copy of one element (prelude.cu): the data travels
// without registers and the copy overlaps the work on the previous system.
__device__ __forceinline__ void cp_async_elem(real* dst, const real* src) {
#if REAL_F64
    async_copy8(dst, src);
#else
    async_copy4(dst, src);
#endif
}

// Starts copying the lower triangle of the column-major n x n matrix at gA into the
// packed column-major array sA (column by column, coalesced), and b into sB. Nothing is
// copied for an inactive system (past the end of the batch).
__device__ __forceinline__ void prefetch_system(const real* __restrict__ gA, const real* __restrict__ gB,
                                                real* sA, real* sB, const Group& g, bool active) {
    if (!active || g.t >= NSTAR) return;
    // Row g.t of every column from one base pointer each, so that every copy's addresses
    // are those bases plus constants (a 64-bit index per copy otherwise).
    const real* ga = gA + g.t;
    real* sa = sA + g.t;
#pragma unroll
    for (int c = 0; c < N; ++c) {
#pragma unroll
        for (int q = 0; q < (N + NSTAR - 1) / NSTAR; ++q) {
            int dr = g.t + q * NSTAR;
            if (q * NSTAR < N - c && dr < N - c) cp_async_elem(sa + packed_col(c) + q * NSTAR, ga + c * N + c + q * NSTAR);
        }
    }
#pragma unroll
    for (int q = 0; q < (N + NSTAR - 1) / NSTAR; ++q) {
        int i = g.t + q * NSTAR;
        if (i < N) cp_async_elem(sB + i, gB + i);
    }
}

// Relative residual ||A x - b||_inf / (||A||_inf ||x||_inf + ||b||_inf) of the group's
// system, with the arithmetic of `relative_residual` (kernels/src/batch/residual.rs):
// per row, the sums over columns in ascending order in the working precision, the
// final quotient in double. A is the packed lower triangle sA, x is in shared sx,
// this thread's rows' b and x in registers. NaN if some x_i or row residual is not
// finite/NaN, 0 if the denominator is 0. The column loop is unrolled UNROLL times (0:
// fully); the same sums in the same order either way.
template <int UNROLL = 0>
__device__ __forceinline__ double group_residual(const real* sA, const real* sx, const real* b, const real* x,
                                                 const Group& g, real* scratch, int* iscratch) {
    real r_max = 0, a_max = 0, x_max = 0, b_max = 0;
    bool nan_row = false;
#pragma unroll
    for (int s = 0; s < R; ++s) {
        int i = g.t + s * NSTAR;
        if (g.t < NSTAR && i < N) {
            real acc = 0, row = 0;
            int oi = i * N - (i * (i - 1)) / 2;  // packed_col(i)
            auto term = [&](int c) {
                real aic = (i >= c) ? sA[packed_col(c) + i - c] : sA[oi + c - i];
                acc += aic * sx[c];
                row += fabs(aic);
            };
            if constexpr (UNROLL > 0) {
#pragma unroll UNROLL
                for (int c = 0; c < N; ++c) term(c);
            } else {
#pragma unroll
                for (int c = 0; c < N; ++c) term(c);
            }
            real ri = fabs(b[s] - acc);
            if (isnan(ri) || !finite(x[s])) nan_row = true;
            r_max = fmax(r_max, ri);
            a_max = fmax(a_max, row);
            x_max = fmax(x_max, fabs(x[s]));
            b_max = fmax(b_max, fabs(b[s]));
        }
    }
    bool any_nan = group_any(nan_row, g, iscratch);
    group_max4(r_max, a_max, x_max, b_max, scratch);
    if (any_nan) return __longlong_as_double(0x7ff8000000000000ULL);
    double den = (double)a_max * (double)x_max + (double)b_max;
    return den == 0.0 ? 0.0 : (double)r_max / den;
}
#endif  // NSTAR
