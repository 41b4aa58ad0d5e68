// A timing prototype of the fused backward sweep (benches/RESULTS.md, fortieth session):
// no stored inner states. Not part of the engine. Appended by benches/fused_sweep.py to
// the fixed path module's source (defines, C_DRIFT, C_VOL, kernels/cuda/paths.cu), so
// the random numbers (Philox4x32-10, Box-Muller in f32) and the exp are the engine's.
//
// One thread block of SW_THREADS threads per work item (outer path l, exposure date i),
// thread t < SW_M the inner path t; blocks are persistent and take items from a counter.
// Per item, with K = SW_DATES - i steps to maturity:
//   forward:  X_a += drift_a + vol_a z (log-prices in registers, no exp), K steps;
//             S_a = S0_a exp(X_a) at maturity; y = payoff.
//   backward: for j = K - 1 .. 1: the normals of step j again, S_a *= exp(-(drift_a +
//             vol_a z)) (the state one step earlier; not bitwise the forward one);
//             psi row [1, S, y] (zero when out of the money) into shared memory;
//             Gram of the augmented rows on the tensor cores (one 8 x 8 tile per warp);
//             L D L^T of the 30 x 30 matrix and the two substitutions by warp 0;
//             the exercise from the thread's own row.
//   the item's value: the mean of the discounted cash flows.
// SW_SOLVE 0 skips the factorization (beta = the right-hand side; a timing variant).
// SW_GRAM 0 skips the Gram (a timing variant).
// SW_BACKWARD 0 skips the backward steps (the forward pass and the maturity alone).
// SW_EXP 0 replaces the backward step's exp by its argument plus one (a timing variant).
// SW_MIN_BLOCKS: blocks per SM for __launch_bounds__ (2: 96 registers).

#ifndef SW_M
#define SW_M 300
#endif
#ifndef SW_DATES
#define SW_DATES 10
#endif
#ifndef SW_SOLVE
#define SW_SOLVE 1
#endif
#ifndef SW_GRAM
#define SW_GRAM 1
#endif
#ifndef SW_BACKWARD
#define SW_BACKWARD 1
#endif
#ifndef SW_EXP
#define SW_EXP 1
#endif
#ifndef SW_MIN_BLOCKS
#define SW_MIN_BLOCKS 2
#endif
#define SW_THREADS 320
#define SW_N 30          // basis functions: 1, S_1 .. S_29
#define SW_PS 36         // psi row stride in doubles: the fragments' loads conflict-free
#define SW_GS 33         // Gram row stride
#define SW_STRIKE 1.0
#ifndef SW_DF
#define SW_DF 1.0  // e^{-r dt}, defined by the driver
#endif

static_assert(PATHS_D == 29, "the prototype is written for basket29");

// Pick the draw at position O + k (k static) of the two blocks p (0..3) and c (4..7).
__device__ __forceinline__ float sw_pick(int o, float a, float b, float c, float d) {
    const float lo = (o & 1) ? b : a;
    const float hi = (o & 1) ? d : c;
    return (o & 2) ? hi : lo;
}

// The 29 normals of step s (draws 29 s .. 29 s + 28 of the stream), asset by asset, into
// F(a, z). Eight Philox blocks from 29 s / 4; O = 29 s mod 4 = s mod 4.
template <class F>
__device__ __forceinline__ void sw_step_normals(const NormalStream& ns, unsigned s, F f) {
    const unsigned b0 = (29u * s) >> 2;
    const int o = (int)(s & 3u);
    float p0, p1, p2, p3;
    stream_block_f32(ns, b0, &p0, &p1, &p2, &p3);
#pragma unroll
    for (int g = 0; g < 7; ++g) {
        float c0, c1, c2, c3;
        stream_block_f32(ns, b0 + g + 1, &c0, &c1, &c2, &c3);
        f(4 * g + 0, sw_pick(o, p0, p1, p2, p3));
        f(4 * g + 1, sw_pick(o, p1, p2, p3, c0));
        f(4 * g + 2, sw_pick(o, p2, p3, c0, c1));
        f(4 * g + 3, sw_pick(o, p3, c0, c1, c2));
        p0 = c0;
        p1 = c1;
        p2 = c2;
        p3 = c3;
    }
    f(28, sw_pick(o, p0, p1, p2, p3));
}

// The block's next item, claimed by thread 0 from the counter, for every thread.
__device__ __forceinline__ long long sw_claim_item(unsigned* counter, unsigned* item_s) {
    if (threadIdx.x == 0) *item_s = atomicAdd(counter, 1u);
    __syncthreads();
    return *item_s;
}

// Item `item` of `outer * SW_DATES`, date-major (the longest items, date 0, first): outer
// path l, exposure date `date`, and the steps from it to maturity.
struct SwItem {
    long long l;
    int date, steps;
};
__device__ __forceinline__ SwItem sw_item(long long item, long long outer) {
    SwItem it;
    it.date = (int)(item / outer);
    it.l = item - (long long)it.date * outer;
    it.steps = SW_DATES - it.date;
    return it;
}

// values[item] = the sum of v over the first `warps` warps of the block / SW_M.
__device__ __forceinline__ void sw_store_mean(double v, int warps, double* red,
                                              double* __restrict__ values, long long item) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if ((threadIdx.x & 31) == 0 && (int)(threadIdx.x >> 5) < warps) red[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        double sum = 0.0;
        for (int w = 0; w < warps; ++w) sum += red[w];
        values[item] = sum / SW_M;
    }
}

// The Gram's lower 8 x 8 tile (ti, tj), tj <= ti, of warp w < 10.
__device__ __forceinline__ void sw_tile(int w, int& ti, int& tj) {
    ti = w < 1 ? 0 : w < 3 ? 1 : w < 6 ? 2 : 3;
    tj = w - ti * (ti + 1) / 2;
}

__device__ __forceinline__ void mma884(double& d0, double& d1, double a, double b) {
    asm volatile(
        "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
        : "+d"(d0), "+d"(d1)
        : "d"(a), "d"(b));
}

extern "C" __global__ void __launch_bounds__(SW_THREADS, SW_MIN_BLOCKS)
fused_sweep(long long outer, const double* __restrict__ start, double* __restrict__ values,
            unsigned* __restrict__ counter, unsigned long long* __restrict__ stats) {
    extern __shared__ double smem[];
    double* psi = smem;                                // [SW_M][SW_PS]
    double* gram = psi + SW_M * SW_PS;                 // [32][SW_GS]
    double* beta = gram + 32 * SW_GS;                  // [32]
    double* red = beta + 32;                           // [SW_THREADS / 32]
    double2* et = (double2*)(red + SW_THREADS / 32);   // [32]
    __shared__ unsigned item_s;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    exp_table_to_shared(et);
    const long long items = outer * SW_DATES;
    unsigned long long exercised = 0;
    for (;;) {
        const long long item = sw_claim_item(counter, &item_s);
        if (item >= items) break;
        const SwItem it = sw_item(item, outer);
        const int date = it.date, steps = it.steps;
        const long long l = it.l;
        const bool live = tid < SW_M;
        NormalStream ns;
        stream_init(ns, PATHS_SEED, (unsigned)l, (unsigned)date, (unsigned)tid);
        double x[PATHS_D];
#pragma unroll
        for (int a = 0; a < PATHS_D; ++a) x[a] = 0.0;
        if (live)
            for (int s = 0; s < steps; ++s)
                sw_step_normals(ns, (unsigned)s, [&](int a, float z) {
                    x[a] += C_DRIFT[a] + C_VOL[a] * (double)z;
                });
        const double* s0 = start + (l * SW_DATES + date) * PATHS_D;
        double level = -1.0 / 0.0;
#pragma unroll
        for (int a = 0; a < PATHS_D; ++a) {
            x[a] = s0[a] * exp_step(x[a], et);  // x holds S from here on
            level = fmax(level, x[a]);
        }
        double y = fmax(level - SW_STRIKE, 0.0);
        for (int j = SW_BACKWARD ? steps - 1 : 0; j >= 1; --j) {
            y *= SW_DF;
            if (live)
                sw_step_normals(ns, (unsigned)j, [&](int a, float z) {
#if SW_EXP
                    x[a] *= exp_step(-(C_DRIFT[a] + C_VOL[a] * (double)z), et);
#else
                    x[a] *= 1.0 - (C_DRIFT[a] + C_VOL[a] * (double)z);
#endif
                });
            level = -1.0 / 0.0;
#pragma unroll
            for (int a = 0; a < PATHS_D; ++a) level = fmax(level, x[a]);
            const double pay = fmax(level - SW_STRIKE, 0.0);
            const bool itm = live && pay > 0.0;
            if (live) {
                double2* row = (double2*)(psi + tid * SW_PS);
                const double one = itm ? 1.0 : 0.0;
                row[0] = make_double2(one, itm ? x[0] : 0.0);
#pragma unroll
                for (int a = 1; a < PATHS_D; a += 2)
                    row[(a + 1) / 2] = make_double2(itm ? x[a] : 0.0, itm ? x[a + 1] : 0.0);
                row[15] = make_double2(itm ? y : 0.0, 0.0);
            }
            __syncthreads();
            // The Gram's lower 8 x 8 tiles, one per warp: (I, J), J <= I.
            if (warp < 10) {
                int ti, tj;
                sw_tile(warp, ti, tj);
                double d0 = 0.0, d1 = 0.0, e0 = 0.0, e1 = 0.0;
#if SW_GRAM
                const double* pa = psi + (lane & 3) * SW_PS + 8 * ti + (lane >> 2);
                const double* pb = psi + (lane & 3) * SW_PS + 8 * tj + (lane >> 2);
#pragma unroll 5
                for (int p = 0; p < SW_M; p += 8) {
                    mma884(d0, d1, pa[p * SW_PS], pb[p * SW_PS]);
                    if (p + 4 < SW_M) mma884(e0, e1, pa[(p + 4) * SW_PS], pb[(p + 4) * SW_PS]);
                }
#endif
                const int r = 8 * ti + (lane >> 2), c = 8 * tj + 2 * (lane & 3);
                gram[r * SW_GS + c] = d0 + e0;
                gram[r * SW_GS + c + 1] = d1 + e1;
            }
            __syncthreads();
            if (warp == 0) {
                // L D L^T in place (row `lane` of the lower triangle), then L z = b,
                // D w = z, L^T beta = w; b is row 30 of the augmented Gram.
                const int i = lane;
                double bi = i < SW_N ? gram[30 * SW_GS + i] : 0.0;
#if SW_SOLVE
                for (int k = 0; k < SW_N; ++k) {
                    const double dk = gram[k * SW_GS + k];
                    const double lik = (i > k && i < SW_N) ? gram[i * SW_GS + k] / dk : 0.0;
#pragma unroll
                    for (int jj = 1; jj < SW_N; ++jj) {
                        const int jc = k + jj;
                        if (jc < SW_N && jc <= i)
                            gram[i * SW_GS + jc] -= lik * gram[jc * SW_GS + k];
                    }
                    __syncwarp();
                    if (i > k && i < SW_N) gram[i * SW_GS + k] = lik;
                    __syncwarp();
                }
                double acc = bi;
                for (int k = 0; k < SW_N; ++k) {
                    const double zk = __shfl_sync(0xffffffffu, acc, k);
                    if (i > k && i < SW_N) acc -= gram[i * SW_GS + k] * zk;
                }
                acc = i < SW_N ? acc / gram[i * SW_GS + i] : 0.0;
                for (int k = SW_N - 1; k >= 0; --k) {
                    const double xk = __shfl_sync(0xffffffffu, acc, k);
                    if (i < k) acc -= gram[k * SW_GS + i] * xk;
                }
                bi = acc;
#endif
                beta[i] = i < SW_N ? bi : 0.0;
            }
            __syncthreads();
            if (itm) {
                const double2* row = (const double2*)(psi + tid * SW_PS);
                double c = 0.0;
#pragma unroll
                for (int q = 0; q < 15; ++q) {
                    const double2 v = row[q];
                    c = fma(v.x, beta[2 * q], c);
                    c = fma(v.y, beta[2 * q + 1], c);
                }
                if (pay >= c) {
                    y = pay;
                    ++exercised;
                }
            }
            __syncthreads();  // psi and beta are rewritten by the next step
        }
        // The item's value: the mean of y over the inner paths.
        sw_store_mean(live ? y * SW_DF : 0.0, SW_THREADS / 32, red, values, item);
    }
    if (exercised) atomicAdd(stats, exercised);
}

// ---- Version 2 (fortieth session, call 3): what call 2 said the design would need.
// - The states live in the rows of shared memory (column-major, psi2[c * SW2_LD + t]:
//   thread t's accesses are conflict-free, and so are the Gram's fragment loads), not in
//   registers: nothing but the stream is live across the barriers, so the registers go
//   to overlapping the random numbers. Column 0 is 1, columns 1..29 the states, 30 the
//   cash flow y, 31 the in-the-money weight w (the Gram's A operand is multiplied by it,
//   so a row out of the money keeps its states for the next step).
// - The forward pass draws its normals in stream order (a Philox block each four
//   draws, none regenerated) and adds each to its asset's log-price in the row.
// - A dedicated solver warp (warp 10): right-looking L D L^T in shared memory, lane j
//   updating row j, fully unrolled (every address a constant, the loads free to start
//   early), pivots by the engine's fast reciprocal (rcp.cu); both substitutions pass
//   the solved entries by shuffles.
#define SW2_LD 308         // column stride of the rows: = 4 (mod 16)
#define SW2_THREADS 352    // 10 path warps and the solver warp

#ifndef SW2_MAXNREG
#define SW2_MAXNREG 88
#endif
extern "C" __global__ void __maxnreg__(SW2_MAXNREG)
fused_sweep2(long long outer, const double* __restrict__ start, double* __restrict__ values,
             unsigned* __restrict__ counter, unsigned long long* __restrict__ stats) {
    extern __shared__ double smem[];
    double* psi = smem;                         // [32][SW2_LD]
    double* gram = psi + 32 * SW2_LD;           // [32][SW_GS]
    double* beta = gram + 32 * SW_GS;           // [32]
    double* red = beta + 32;                    // [16]
    double2* et = (double2*)(red + 16);         // [32]
    __shared__ unsigned item_s;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    exp_table_to_shared(et);
    const long long items = outer * SW_DATES;
    unsigned long long exercised = 0;
    for (;;) {
        const long long item = sw_claim_item(counter, &item_s);
        if (item >= items) break;
        const SwItem it = sw_item(item, outer);
        const int date = it.date, steps = it.steps;
        const long long l = it.l;
        if (warp == 10) {
            // The solver: the same barriers as the path warps, per regression step.
            for (int j = SW_BACKWARD ? steps - 1 : 0; j >= 1; --j) {
                __syncthreads();  // rows written
                __syncthreads();  // Gram written
                double bi = lane < SW_N ? gram[30 * SW_GS + lane] : 0.0;
#if SW_SOLVE
                // L D L^T in place in the lower triangle (row `lane`), fully unrolled so that
                // every address is a constant: L overwrites the strict lower part.
                double dd = 1.0;
#pragma unroll
                for (int k = 0; k < SW_N; ++k) {
                    const double dk = gram[k * SW_GS + k];
                    const double f = gram[lane * SW_GS + k] * rcp_rn_fast_f64(dk);
#pragma unroll
                    for (int i = k + 1; i < SW_N; ++i)
                        if (i <= lane && lane < SW_N)
                            gram[lane * SW_GS + i] = fma(-f, gram[i * SW_GS + k], gram[lane * SW_GS + i]);
                    __syncwarp();
                    if (lane > k && lane < SW_N) gram[lane * SW_GS + k] = f;
                    if (lane == k) dd = dk;
                    __syncwarp();
                }
                double acc = bi;
#pragma unroll
                for (int k = 0; k < SW_N; ++k) {
                    const double zk = __shfl_sync(0xffffffffu, acc, k);
                    if (lane > k && lane < SW_N) acc = fma(-gram[lane * SW_GS + k], zk, acc);
                }
                acc = acc * rcp_rn_fast_f64(dd);
#pragma unroll
                for (int k = SW_N - 1; k >= 0; --k) {
                    const double xk = __shfl_sync(0xffffffffu, acc, k);
                    if (lane < k) acc = fma(-gram[k * SW_GS + lane], xk, acc);
                }
                bi = acc;
#endif
                beta[lane] = lane < SW_N ? bi : 0.0;
                __syncthreads();  // beta written
                __syncthreads();  // exercise done
            }
            sw_store_mean(0.0, 10, red, values, item);  // its barrier only
            continue;
        }
        const bool live = tid < SW_M;
        const int t = live ? tid : 0;
        NormalStream ns;
        stream_init(ns, PATHS_SEED, (unsigned)l, (unsigned)date, (unsigned)tid);
        double* row = psi + t;  // column c at row[c * SW2_LD]
        double y = 0.0;
        if (live) {
#pragma unroll
            for (int a = 0; a < PATHS_D; ++a) row[(1 + a) * SW2_LD] = 0.0;
            // Forward: draws 0 .. 29 steps - 1 in stream order.
            const int draws = PATHS_D * steps;
            int a = 0;
            for (int b = 0; 4 * b < draws; ++b) {
                float z[4];
                stream_block_f32(ns, (unsigned)b, &z[0], &z[1], &z[2], &z[3]);
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    if (4 * b + k < draws) {
                        double* xa = row + (1 + a) * SW2_LD;
                        *xa += C_DRIFT[a] + C_VOL[a] * (double)z[k];
                        a = a == PATHS_D - 1 ? 0 : a + 1;
                    }
                }
            }
            const double* s0 = start + (l * SW_DATES + date) * PATHS_D;
            double level = -1.0 / 0.0;
#pragma unroll
            for (int i = 0; i < PATHS_D; ++i) {
                const double s = s0[i] * exp_step(row[(1 + i) * SW2_LD], et);
                row[(1 + i) * SW2_LD] = s;
                level = fmax(level, s);
            }
            y = fmax(level - SW_STRIKE, 0.0);
        }
        for (int j = SW_BACKWARD ? steps - 1 : 0; j >= 1; --j) {
            y *= SW_DF;
            double pay = 0.0;
            if (live) {
                // The 29 draws of step j: blocks (29 j) / 4 .. (29 j + 28) / 4, the first
                // draw at offset 29 j mod 4.
                const int d0 = PATHS_D * j;
                double level = -1.0 / 0.0;
#pragma unroll
                for (int q = 0; q < 8; ++q) {
                    const int b = (d0 >> 2) + q;
                    float z[4];
                    stream_block_f32(ns, (unsigned)b, &z[0], &z[1], &z[2], &z[3]);
#pragma unroll
                    for (int k = 0; k < 4; ++k) {
                        const int a = 4 * b + k - d0;
                        if (a >= 0 && a < PATHS_D) {
                            double* xa = row + (1 + a) * SW2_LD;
#if SW_EXP
                            const double s = *xa * exp_step(-(C_DRIFT[a] + C_VOL[a] * (double)z[k]), et);
#else
                            const double s = *xa * (1.0 - (C_DRIFT[a] + C_VOL[a] * (double)z[k]));
#endif
                            *xa = s;
                            level = fmax(level, s);
                        }
                    }
                }
                pay = fmax(level - SW_STRIKE, 0.0);
                row[0] = 1.0;
                row[30 * SW2_LD] = y;
                row[31 * SW2_LD] = pay > 0.0 ? 1.0 : 0.0;
            }
            __syncthreads();  // rows written
            {
                // Gram tile (ti, tj) of the weighted rows: A operand w_p psi[p][8 ti + r].
                int ti, tj;
                sw_tile(warp, ti, tj);
                double d0 = 0.0, d1 = 0.0, e0 = 0.0, e1 = 0.0;
#if SW_GRAM
                const double* pa = psi + (8 * ti + (lane >> 2)) * SW2_LD + (lane & 3);
                const double* pb = psi + (8 * tj + (lane >> 2)) * SW2_LD + (lane & 3);
                const double* pw = psi + 31 * SW2_LD + (lane & 3);
#pragma unroll 5
                for (int p = 0; p < SW_M; p += 8) {
                    mma884(d0, d1, pa[p] * pw[p], pb[p]);
                    if (p + 4 < SW_M) mma884(e0, e1, pa[p + 4] * pw[p + 4], pb[p + 4]);
                }
#endif
                const int r = 8 * ti + (lane >> 2), c = 8 * tj + 2 * (lane & 3);
                gram[r * SW_GS + c] = d0 + e0;
                gram[r * SW_GS + c + 1] = d1 + e1;
            }
            __syncthreads();  // Gram written
            __syncthreads();  // beta written
            if (live && pay > 0.0) {
                double c = beta[0];
#pragma unroll
                for (int a = 0; a < PATHS_D; ++a) c = fma(row[(1 + a) * SW2_LD], beta[1 + a], c);
                if (pay >= c) {
                    y = pay;
                    ++exercised;
                }
            }
            __syncthreads();  // exercise done: rows and beta free
        }
        sw_store_mean(live ? y * SW_DF : 0.0, 10, red, values, item);
    }
    if (exercised) atomicAdd(stats, exercised);
}
