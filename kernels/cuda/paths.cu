// Path generation on the GPU, draw for draw the CPU engine's (src/rng.rs, src/model.rs).
//
// Random numbers: Philox4x32-10 keyed by the 64-bit seed (low word first), counter
// [block, inner_path, date, outer_path] with inner_path = 0xffffffff for an outer path;
// uniforms (u + 0.5) / 2^32; Box-Muller in double: r = sqrt(-2 ln u1),
// (z0, z1) = (r cos(2 pi u2), r sin(2 pi u2)); four normals per Philox block, in order.
// A path's normals are drawn in one run: step s, asset i uses draw s * d + i.
//
// Dynamics: exact GBM step S_i <- S_i * exp(drift_i + vol_i * w_i), w = C z with C the
// row-major lower-triangular correlation factor (w = z when there is none); the sum
// w_i = sum_{k<=i} C_ik z_k runs from 0.0 in increasing k, as on the CPU.
//
// Compiled by NVRTC with --fmad=false --prec-div=true --prec-sqrt=true: every +, *, /,
// sqrt rounds as in Rust; log, sin, cos and exp are CUDA's (within an ulp or two of
// the CPU's libm), so normals and states agree to a few ulps, raw Philox words bitwise.
//
// Per-thread scratch lives in dynamic shared memory, column `threadIdx.x` of a
// [2 d][blockDim.x] array of doubles: rows 0..d the state, rows d..2d the step's normals
// (the second half only when a correlation factor is given).

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define OUTER_STREAM 0xFFFFFFFFu

struct U32x4 {
    unsigned x, y, z, w;
};

__device__ __forceinline__ U32x4 philox4x32_10(U32x4 c, unsigned k0, unsigned k1) {
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        const unsigned hi0 = __umulhi(PHILOX_M0, c.x), lo0 = PHILOX_M0 * c.x;
        const unsigned hi1 = __umulhi(PHILOX_M1, c.z), lo1 = PHILOX_M1 * c.z;
        U32x4 n;
        n.x = hi1 ^ c.y ^ k0;
        n.y = lo1;
        n.z = hi0 ^ c.w ^ k1;
        n.w = lo0;
        c = n;
    }
    return c;
}

__device__ __forceinline__ double uniform_open(unsigned u) {
    return ((double)u + 0.5) * (1.0 / 4294967296.0);
}

__device__ __forceinline__ void box_muller(double u1, double u2, double* z0, double* z1) {
    const double r = sqrt(-2.0 * log(u1));
    const double a = 6.283185307179586476925286766559 * u2;
    double s, c;
    sincos(a, &s, &c);
    *z0 = r * c;
    *z1 = r * s;
}

// The normal stream of one (outer path, date, inner path), consumed in order.
struct NormalStream {
    unsigned key0, key1, inner, date, outer, block;
    int pos;
    double b0, b1, b2, b3;
};

__device__ __forceinline__ void stream_init(NormalStream& s, unsigned long long seed, unsigned outer,
                                            unsigned date, unsigned inner) {
    s.key0 = (unsigned)seed;
    s.key1 = (unsigned)(seed >> 32);
    s.inner = inner;
    s.date = date;
    s.outer = outer;
    s.block = 0;
    s.pos = 4;
    s.b0 = s.b1 = s.b2 = s.b3 = 0.0;
}

__device__ __forceinline__ void stream_block(const NormalStream& s, unsigned block, double* z0,
                                             double* z1, double* z2, double* z3) {
    U32x4 c;
    c.x = block;
    c.y = s.inner;
    c.z = s.date;
    c.w = s.outer;
    const U32x4 r = philox4x32_10(c, s.key0, s.key1);
    box_muller(uniform_open(r.x), uniform_open(r.y), z0, z1);
    box_muller(uniform_open(r.z), uniform_open(r.w), z2, z3);
}

__device__ __forceinline__ double stream_next(NormalStream& s) {
    if (s.pos == 4) {
        stream_block(s, s.block, &s.b0, &s.b1, &s.b2, &s.b3);
        s.block += 1;
        s.pos = 0;
    }
    const int p = s.pos++;
    return p == 0 ? s.b0 : p == 1 ? s.b1 : p == 2 ? s.b2 : s.b3;
}

// One exact GBM step of the state x[i * ld] (i < d); z is scratch with the same stride.
__device__ __forceinline__ void gbm_step(double* x, double* z, int ld, int d,
                                         const double* __restrict__ drift,
                                         const double* __restrict__ vol,
                                         const double* __restrict__ factor, NormalStream& ns) {
    if (factor != 0) {
        for (int i = 0; i < d; ++i) z[i * ld] = stream_next(ns);
        for (int i = 0; i < d; ++i) {
            double acc = 0.0;
            const double* row = factor + (long long)i * d;
            for (int k = 0; k <= i; ++k) acc = acc + row[k] * z[k * ld];
            x[i * ld] = x[i * ld] * exp(drift[i] + vol[i] * acc);
        }
    } else {
        for (int i = 0; i < d; ++i) {
            const double w = stream_next(ns);
            x[i * ld] = x[i * ld] * exp(drift[i] + vol[i] * w);
        }
    }
}

// Raw Philox4x32-10 blocks: out[4 q..4 q+4] = philox(ctr[4 q..], key[2 q..]).
extern "C" __global__ void philox_blocks(const unsigned* __restrict__ ctr,
                                         const unsigned* __restrict__ key,
                                         unsigned* __restrict__ out, long long count) {
    const long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= count) return;
    U32x4 c;
    c.x = ctr[4 * q];
    c.y = ctr[4 * q + 1];
    c.z = ctr[4 * q + 2];
    c.w = ctr[4 * q + 3];
    const U32x4 r = philox4x32_10(c, key[2 * q], key[2 * q + 1]);
    out[4 * q] = r.x;
    out[4 * q + 1] = r.y;
    out[4 * q + 2] = r.z;
    out[4 * q + 3] = r.w;
}

// The first `count` normals of the stream (seed, outer, date, inner): thread q writes
// draws 4q..4q+3 (block q).
extern "C" __global__ void normal_draws(unsigned long long seed, unsigned outer, unsigned date,
                                        unsigned inner, double* __restrict__ out,
                                        long long count) {
    const long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (4 * q >= count) return;
    NormalStream s;
    stream_init(s, seed, outer, date, inner);
    double z[4];
    stream_block(s, (unsigned)q, &z[0], &z[1], &z[2], &z[3]);
#pragma unroll
    for (int k = 0; k < 4; ++k)
        if (4 * q + k < count) out[4 * q + k] = z[k];
}

// Outer paths first_path .. first_path + paths of `steps` steps from the spots:
// out[(l * (steps + 1) + k) * d + i] = S^i at date k of path l (k = 0: the spots).
extern "C" __global__ void outer_paths(unsigned long long seed, unsigned first_path, long long paths,
                                       int steps, int d, const double* __restrict__ spots,
                                       const double* __restrict__ drift,
                                       const double* __restrict__ vol,
                                       const double* __restrict__ factor,
                                       double* __restrict__ out) {
    extern __shared__ double scratch[];
    const int ld = blockDim.x;
    double* x = scratch + threadIdx.x;
    double* z = scratch + (long long)d * ld + threadIdx.x;
    const long long l = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= paths) return;
    NormalStream ns;
    stream_init(ns, seed, first_path + (unsigned)l, 0u, OUTER_STREAM);
    double* o = out + l * (long long)(steps + 1) * d;
    for (int i = 0; i < d; ++i) {
        x[i * ld] = spots[i];
        o[i] = spots[i];
    }
    for (int k = 1; k <= steps; ++k) {
        gbm_step(x, z, ld, d, drift, vol, factor, ns);
        for (int i = 0; i < d; ++i) o[(long long)k * d + i] = x[i * ld];
    }
}

// Inner paths of `outer` outer paths (global indices first_outer + l) from their states
// at exposure date `date`: path (l, mm), mm < inner, starts at start[l * start_stride + i]
// and uses the stream (seed, first_outer + l, date, mm). Its state after step s + 1
// (date `date + s + 1`, s < steps) is out[((l * steps + s) * inner + mm) * d + i]:
// the CPU engine's layout [l][s][mm][i].
extern "C" __global__ void inner_paths(unsigned long long seed, unsigned first_outer,
                                       unsigned date, long long outer, int inner, int steps,
                                       int d, const double* __restrict__ start,
                                       long long start_stride, const double* __restrict__ drift,
                                       const double* __restrict__ vol,
                                       const double* __restrict__ factor,
                                       double* __restrict__ out) {
    extern __shared__ double scratch[];
    const int ld = blockDim.x;
    double* x = scratch + threadIdx.x;
    double* z = scratch + (long long)d * ld + threadIdx.x;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= outer * inner) return;
    const long long l = t / inner;
    const int mm = (int)(t - l * inner);
    NormalStream ns;
    stream_init(ns, seed, first_outer + (unsigned)l, date, (unsigned)mm);
    for (int i = 0; i < d; ++i) x[i * ld] = start[l * start_stride + i];
    double* o = out + (l * steps * (long long)inner + mm) * d;
    for (int s = 0; s < steps; ++s) {
        gbm_step(x, z, ld, d, drift, vol, factor, ns);
        double* os = o + (long long)s * inner * d;
        for (int i = 0; i < d; ++i) os[i] = x[i * ld];
    }
}
