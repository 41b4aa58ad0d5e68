// Timing prototype, not part of `cva`: a fused per-date Longstaff-Schwartz kernel on
// thread-block clusters (issue 5; benches/RESULTS.md, twenty-sixth session). basket29's
// shape only (d = 29, n = 30, 300 inner paths, 10 dates, f64), its market compiled in.
// Not the engine's arithmetic bit for bit: the inner paths are generated forward as
// log-sums (nothing stored), S_T = start exp(sum), then walked backward
// S_s = S_{s+1} exp(-(drift + vol z_s)) with the same Philox normals (paths.cu's). At each
// regression step every 64-thread block builds its partial [Psi y]^T [Psi y] on the FP64
// tensor cores from its own shared states, the cluster's rank 0 sums the CL partials
// through distributed shared memory and solves by a one-warp L D L^T (no escalation), and
// every block exercises its paths with the beta it reads back. One cluster of CL blocks
// per outer path. FUSED_MODE, LDLT_REG and NO_FWD select the variants measured.
// Build and run on the GPU machine (repository root):
//   nvcc -O3 -arch=sm_90 --fmad=false --prec-div=true --prec-sqrt=true -std=c++17 \
//        -I kernels/cuda [-DFUSED_MODE=..] benches/fused_cluster.cu -o fused && ./fused 100000 2
// It prints the time of the ten dates (CUDA events) and the mean value per date.
#define PATHS_PAYOFF 1
__device__ __forceinline__ double paths_payoff(const double* xs, int ld) {
    double level = -__longlong_as_double(0x7ff0000000000000LL);
#pragma unroll
    for (int i = 0; i < 29; ++i) level = fmax(level, xs[i * ld]);
    return fmax(level - 1.0, 0.0);
}
#define PATHS_D 29
#define PATHS_FACTOR 0
#define PATHS_BLOCK 64
#define PATHS_KEY0 0x0000001du
#define PATHS_KEY1 0x00000000u
#define DRIFT_V -0x1.47ae147ae147bp-11
#define VOL_V 0x1.0312e0e8b4a16p-5
__constant__ double C_DRIFT[29] = {DRIFT_V, DRIFT_V, DRIFT_V, DRIFT_V, DRIFT_V, DRIFT_V,
    DRIFT_V, DRIFT_V, DRIFT_V, DRIFT_V, DRIFT_V, DRIFT_V, DRIFT_V, DRIFT_V, DRIFT_V,
    DRIFT_V, DRIFT_V, DRIFT_V, DRIFT_V, DRIFT_V, DRIFT_V, DRIFT_V, DRIFT_V, DRIFT_V,
    DRIFT_V, DRIFT_V, DRIFT_V, DRIFT_V, DRIFT_V};
__constant__ double C_VOL[29] = {VOL_V, VOL_V, VOL_V, VOL_V, VOL_V, VOL_V, VOL_V, VOL_V,
    VOL_V, VOL_V, VOL_V, VOL_V, VOL_V, VOL_V, VOL_V, VOL_V, VOL_V, VOL_V, VOL_V, VOL_V,
    VOL_V, VOL_V, VOL_V, VOL_V, VOL_V, VOL_V, VOL_V, VOL_V, VOL_V};
#include "paths.cu"

#ifndef __CUDACC_RTC__
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cmath>
#endif

// Cluster primitives in PTX (no cooperative_groups header needed under NVRTC).
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
}
template <typename T>
__device__ __forceinline__ T* map_rank(T* p, unsigned r) {
    unsigned long long o;
    asm volatile("mapa.u64 %0, %1, %2;" : "=l"(o) : "l"((unsigned long long)p), "r"(r));
    return (T*)o;
}

#define D 29
#define M_INNER 300
#define CL 5          // blocks per outer path
#define NBAS 30       // basis (1, S_1..S_29)
#define NPART 640     // 10 blocks 8 x 8 of the packed lower [Psi y]^T [Psi y] (4 x 4 blocks)
#define ZROWS 36      // normals of one backward step: draws 4 b_lo .. 4 b_hi + 3
#define LDM 31        // rank 0's matrix row stride
#ifndef FUSED_MODE
#define FUSED_MODE 0  // 0: full; 1: generation only (forward + backward, payoff);
                      // 2: no L D L^T (beta = rhs / count); 3: no reduction and no solve
#endif
// LDLT_REG 1: the factorization with row i in lane i's registers (shuffles for column j);
// 0: the naive shared-memory loop.
#ifndef LDLT_REG
#define LDLT_REG 1
#endif
// NO_FWD 1: no forward pass (S_T = the outer state): what a backward bridge would cost.
#ifndef NO_FWD
#define NO_FWD 0
#endif
// SMALL_SMEM 1: 21.8 KB of shared memory per block (10 blocks per SM possible): the
// backward normals through the path kernel's ring (the straddling Philox block generated
// again), the ring and the block's partial in one buffer, rank 0's matrix packed (lower
// triangle) in the same buffer. Needs LDLT_REG 1.
#ifndef SMALL_SMEM
#define SMALL_SMEM 0
#endif
#if SMALL_SMEM && !LDLT_REG
#error "SMALL_SMEM needs LDLT_REG"
#endif
#define PK(i, k) ((i) * ((i) + 1) / 2 + (k))
#if SMALL_SMEM
#define MAT(i, k) mat[PK(i, k)]  // k <= i
#define RHS(i) rhs[i]
#else
#define MAT(i, k) mat[(i) * LDM + (k)]
#define RHS(i) mat[(i) * LDM + NBAS]
#endif
#ifndef MINB
#define MINB 7
#endif

__constant__ double C_DF[16];  // exp(-r dt j)

__device__ __forceinline__ void dmma(double& d0, double& d1, double a, double b) {
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};"
                 : "+d"(d0), "+d"(d1)
                 : "d"(a), "d"(b));
}

// Forward log-sum step: xs[k] += drift_k + vol_k z (the ring of the path kernel).
__device__ __forceinline__ void logsum_step(double* xs, float* zr, unsigned first, unsigned* next,
                                            const NormalStream& ns) {
    unsigned row = first % RING;
#pragma unroll
    for (int k = 0; k < PATHS_D; ++k) {
        const double z = ring_normal(k, zr, &row, first, next, ns);
        xs[k] = xs[k] + (C_DRIFT[k] + C_VOL[k] * z);
    }
}

extern "C" __global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(64, MINB)
fused_date(unsigned first_outer, unsigned date, int steps, const double* __restrict__ start,
           double* __restrict__ value) {
    __shared__ double xs_all[64 * SXS];
#if SMALL_SMEM
    __shared__ double ubuf[NPART];  // the ring (generation), the partial, rank 0's packed matrix
    float* const zbase = (float*)ubuf;
    double* const part = ubuf;
    static_assert(RING * LDX * 4 <= NPART * 8 && (RING & (RING - 1)) == 0, "ring");
#else
    __shared__ float zbuf[ZROWS * LDX];  // ring (forward), step normals (backward), rank 0's matrix
    __shared__ double part[NPART];
    float* const zbase = zbuf;
#endif
    __shared__ double rhs[32];
    __shared__ double yv[64], fv[64], beta[32], bl[32], red[2];
    __shared__ double2 et[32];
    const unsigned rank = cluster_rank();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    exp_table_to_shared(et);
    const unsigned l = blockIdx.x / CL;
    const int mm = (int)rank * 64 + tid;
    const bool live = mm < M_INNER;
    double* xs = xs_all + tid * SXS;
    float* zr = zbase + tid;
    NormalStream ns;
    stream_init(ns, PATHS_SEED, first_outer + l, date, (unsigned)mm);
    double cash = 0.0;
    int cash_date = steps;
    for (int i = 0; i < D; ++i) xs[i] = 0.0;  // dead rows stay 0 (the build reads them)
    if (live) {
        unsigned next = 0;
        if (!NO_FWD)
            for (int s = 0; s < steps; ++s) logsum_step(xs, zr, (unsigned)s * D, &next, ns);
        const double* st = start + (size_t)l * D;
#pragma unroll
        for (int i = 0; i < D; ++i) xs[i] = st[i] * exp_step(xs[i], et);
        cash = paths_payoff(xs, 1);
    }
    // carried Philox block (the lowest of the previous backward step)
    unsigned carry_b = 0xffffffffu;
    float c0 = 0.f, c1 = 0.f, c2 = 0.f, c3 = 0.f;
    for (int s = steps - 1; s >= 1; --s) {
        // S_s = S_{s+1} exp(-(drift + vol z)), z the draws s d .. s d + d - 1
        double p = 0.0;
        bool itm = false;
        if (live) {
#if SMALL_SMEM
            const unsigned d0 = (unsigned)s * D;
            unsigned next = d0 / 4, row = d0 % RING;
#pragma unroll
            for (int k = 0; k < D; ++k) {
                const double z = ring_normal(k, zr, &row, d0, &next, ns);
                xs[k] = xs[k] * exp_step(-(C_DRIFT[k] + C_VOL[k] * z), et);
            }
#else
            const unsigned d0 = (unsigned)s * D, blo = d0 / 4, bhi = (d0 + D - 1) / 4;
            for (unsigned b = blo; b <= bhi; ++b) {
                float z0, z1, z2, z3;
                if (b == carry_b) {
                    z0 = c0; z1 = c1; z2 = c2; z3 = c3;
                } else {
                    stream_block_f32(ns, b, &z0, &z1, &z2, &z3);
                }
                const unsigned r = 4 * (b - blo);
                zr[r * LDX] = z0;
                zr[(r + 1) * LDX] = z1;
                zr[(r + 2) * LDX] = z2;
                zr[(r + 3) * LDX] = z3;
                if (b == blo) {
                    carry_b = b; c0 = z0; c1 = z1; c2 = z2; c3 = z3;
                }
            }
            const unsigned off = d0 - 4 * blo;
#pragma unroll
            for (int k = 0; k < D; ++k) {
                const double z = (double)zr[(off + k) * LDX];
                xs[k] = xs[k] * exp_step(-(C_DRIFT[k] + C_VOL[k] * z), et);
            }
#endif
            p = paths_payoff(xs, 1);
            itm = p > 0.0;
        }
#if FUSED_MODE == 1
        if (itm) { cash = cash * 0.5 + p; }
        continue;
#else
        yv[tid] = itm ? cash * C_DF[cash_date - s] : 0.0;
        fv[tid] = itm ? 1.0 : 0.0;
        __syncthreads();
        // partial build: warp w, its 32 paths, 8 k-steps of 4 paths
        double acc[10][2];
#pragma unroll
        for (int q = 0; q < 10; ++q) acc[q][0] = acc[q][1] = 0.0;
#pragma unroll 2
        for (int q = 0; q < 8; ++q) {
            const int pr = warp * 32 + 4 * q + (lane & 3);
            const double f = fv[pr];
            double fr[4];
#pragma unroll
            for (int I = 0; I < 4; ++I) {
                const int b = 8 * I + (lane >> 2);
                double v;
                if (I == 0)
                    v = b == 0 ? 1.0 : xs_all[pr * SXS + b - 1];
                else if (I < 3)
                    v = xs_all[pr * SXS + b - 1];
                else
                    v = b <= 29 ? xs_all[pr * SXS + b - 1] : (b == 30 ? yv[pr] : 0.0);
                fr[I] = f * v;
            }
            int t = 0;
#pragma unroll
            for (int I = 0; I < 4; ++I)
#pragma unroll
                for (int J = 0; J <= I; ++J, ++t) dmma(acc[t][0], acc[t][1], fr[I], fr[J]);
        }
        if (warp == 1) {
#pragma unroll
            for (int q = 0; q < 10; ++q) {
                part[q * 64 + lane * 2] = acc[q][0];
                part[q * 64 + lane * 2 + 1] = acc[q][1];
            }
        }
        __syncthreads();
        if (warp == 0) {
#pragma unroll
            for (int q = 0; q < 10; ++q) {
                part[q * 64 + lane * 2] += acc[q][0];
                part[q * 64 + lane * 2 + 1] += acc[q][1];
            }
        }
        cluster_sync();
        if (rank == 0 && FUSED_MODE != 3) {
#if SMALL_SMEM
            double* mat = ubuf;  // packed lower triangle PK(i, k), k <= i; rhs apart
            double g[NPART / 64];
#pragma unroll
            for (int q = 0; q < NPART / 64; ++q) {
                const int e = tid + 64 * q;
                double t = 0.0;
#pragma unroll
                for (int r = 0; r < CL; ++r) t += map_rank(part, (unsigned)r)[e];
                g[q] = t;
            }
            __syncthreads();  // every read of this block's partial done: mat overwrites it
#pragma unroll
            for (int q = 0; q < NPART / 64; ++q) {
                const int e = tid + 64 * q;
                const int ln = (e & 63) >> 1, j = e & 1;
                const int I = q >= 6 ? 3 : q >= 3 ? 2 : q >= 1 ? 1 : 0;
                const int J = q - I * (I + 1) / 2;
                const int row = 8 * I + (ln >> 2), col = 8 * J + 2 * (ln & 3) + j;
                if (row < NBAS && col <= row) mat[PK(row, col)] = g[q];
                else if (row == NBAS && col < NBAS) rhs[col] = g[q];
            }
#else
            double* mat = (double*)zbuf;  // 30 x LDM: A (lower and upper), column 30 the rhs
            for (int e = tid; e < NPART; e += 64) {
                double g = 0.0;
#pragma unroll
                for (int r = 0; r < CL; ++r) g += map_rank(part, (unsigned)r)[e];
                const int q = e >> 6, ln = (e & 63) >> 1, j = e & 1;
                // block q -> (I, J): q = I (I + 1) / 2 + J
                const int I = q >= 6 ? 3 : q >= 3 ? 2 : q >= 1 ? 1 : 0;
                const int J = q - I * (I + 1) / 2;
                const int row = 8 * I + (ln >> 2), col = 8 * J + 2 * (ln & 3) + j;
                if (row < NBAS && col < NBAS) {
                    mat[row * LDM + col] = g;
                    mat[col * LDM + row] = g;
                } else if (row == NBAS && col < NBAS) {
                    mat[col * LDM + NBAS] = g;
                }
            }
#endif
            __syncthreads();
            if (warp == 0) {
                // one-warp L D L^T, lane i owns row i (lower part), then the solves
                const double cnt = mat[0];
                const int i = lane;
                if (FUSED_MODE == 2) {
                    if (i < NBAS) beta[i] = cnt > 0.0 ? RHS(i) / cnt * 1e-3 : 0.0;
                } else if (cnt >= (double)NBAS) {
#if LDLT_REG
                    {
                        double a[NBAS];
#pragma unroll
                        for (int k = 0; k < NBAS; ++k)
#if SMALL_SMEM
                            a[k] = i < NBAS && k <= i ? MAT(i, k) : (k == 0 ? 1.0 : 0.0);
#else
                            a[k] = i < NBAS ? mat[i * LDM + k] : (k == 0 ? 1.0 : 0.0);
#endif
#pragma unroll
                        for (int j = 0; j < NBAS - 1; ++j) {
                            const double dj = __shfl_sync(0xffffffffu, a[j], j);
                            const double li = a[j] * (1.0 / dj);
#pragma unroll
                            for (int k = j + 1; k < NBAS; ++k) {
                                const double ck = __shfl_sync(0xffffffffu, a[j], k);
                                a[k] = a[k] - li * ck;  // k > i: unused upper part
                            }
                            if (i > j) a[j] = li;
                        }
                        if (i < NBAS) {
#pragma unroll
                            for (int k = 0; k < NBAS; ++k)
                                if (k <= i) MAT(i, k) = a[k];
                        }
                        __syncwarp();
                    }
#else
                    for (int j = 0; j < NBAS - 1; ++j) {
                        const double dj = mat[j * LDM + j];
                        const double rd = 1.0 / dj;
                        __syncwarp();
                        if (i > j && i < NBAS) {
                            const double ci = mat[i * LDM + j];
                            const double li = ci * rd;
                            for (int k = j + 1; k <= i; ++k)
                                mat[i * LDM + k] = mat[i * LDM + k] - li * mat[k * LDM + j];
                        }
                        __syncwarp();  // every row has read column j unscaled
                        if (i > j && i < NBAS) mat[i * LDM + j] = mat[i * LDM + j] * rd;
                        __syncwarp();
                    }
#endif
                    // L z = b
                    double bi = i < NBAS ? RHS(i) : 0.0;
                    for (int j = 0; j < NBAS; ++j) {
                        const double zj = __shfl_sync(0xffffffffu, bi, j);
                        if (i > j && i < NBAS) bi = bi - MAT(i, j) * zj;
                    }
                    double xi = i < NBAS ? bi / MAT(i, i) : 0.0;
                    for (int j = NBAS - 1; j >= 0; --j) {
                        const double xj = __shfl_sync(0xffffffffu, xi, j);
                        if (i < j) xi = xi - MAT(j, i) * xj;
                    }
                    if (i < NBAS) beta[i] = xi;
                } else {
                    if (i < NBAS) beta[i] = i == 0 ? (cnt > 0.0 ? RHS(0) / cnt : 0.0) : 0.0;
                }
            }
        }
        cluster_sync();
        if (tid < NBAS) bl[tid] = FUSED_MODE == 3 ? 0.01 * tid : map_rank(beta, 0u)[tid];
        __syncthreads();
        if (itm) {
            double c = bl[0];
#pragma unroll
            for (int k = 0; k < D; ++k) c = c + bl[k + 1] * xs[k];
            if (p >= c) {
                cash = p;
                cash_date = s;
            }
        }
        __syncthreads();
#endif
    }
    // value at the date: mean discounted cash of the block's paths -> value[l]
    double v = live ? cash * C_DF[cash_date] : 0.0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (tid == 0) atomicAdd(value + l, (red[0] + red[1]) / M_INNER);
    cluster_sync();
}

#ifndef __CUDACC_RTC__
#include "cuda_check.h"

int main(int argc, char** argv) {
    const int outer = argc > 1 ? atoi(argv[1]) : 100000;
    const int reps = argc > 2 ? atoi(argv[2]) : 3;
    double df[16];
    for (int j = 0; j < 16; ++j) df[j] = std::exp(-0.1 * 0.1 * j);
    CK(cudaMemcpyToSymbol(C_DF, df, sizeof(df)));
    // outer states at each date: a simple GBM from 1 with the same parameters (host RNG)
    std::vector<double> start((size_t)outer * D * 10);
    srand(7);
    for (int l = 0; l < outer; ++l)
        for (int i = 0; i < D; ++i) {
            double x = 1.0;
            for (int k = 0; k < 10; ++k) {
                start[((size_t)k * outer + l) * D + i] = x;
                double u1 = (rand() + 1.0) / (RAND_MAX + 2.0), u2 = (rand() + 1.0) / (RAND_MAX + 2.0);
                double z = std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2);
                x *= std::exp(DRIFT_V + VOL_V * z);
            }
        }
    double *dstart, *dval;
    CK(cudaMalloc(&dstart, start.size() * 8));
    CK(cudaMalloc(&dval, (size_t)outer * 10 * 8));
    CK(cudaMemcpy(dstart, start.data(), start.size() * 8, cudaMemcpyHostToDevice));
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, fused_date));
    int nb = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, fused_date, 64, 0));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, mode %d, regs %d, local %zu B, static smem %zu B, blocks/SM %d\n", prop.name,
           FUSED_MODE, fa.numRegs, fa.localSizeBytes, fa.sharedSizeBytes, nb);
    cudaEvent_t e0, e1, ed[11];
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int k = 0; k < 11; ++k) CK(cudaEventCreate(&ed[k]));
    for (int rep = 0; rep < reps; ++rep) {
        CK(cudaMemset(dval, 0, (size_t)outer * 10 * 8));
        CK(cudaEventRecord(ed[0]));
        for (int k = 0; k < 10; ++k) {
            fused_date<<<outer * CL, 64>>>(0, k, 10 - k, dstart + (size_t)k * outer * D,
                                           dval + (size_t)k * outer);
            CK(cudaGetLastError());
            CK(cudaEventRecord(ed[k + 1]));
        }
        CK(cudaEventSynchronize(ed[10]));
        float ms = 0.f;
        CK(cudaEventElapsedTime(&ms, ed[0], ed[10]));
        printf("rep %d: all ten dates %.4f s;", rep, ms / 1e3);
        for (int k = 0; k < 10; ++k) {
            float m2;
            CK(cudaEventElapsedTime(&m2, ed[k], ed[k + 1]));
            printf(" %.4f", m2 / 1e3);
        }
        printf("\n");
    }
    std::vector<double> val((size_t)outer * 10);
    CK(cudaMemcpy(val.data(), dval, val.size() * 8, cudaMemcpyDeviceToHost));
    printf("mean value per date:");
    for (int k = 0; k < 10; ++k) {
        double s = 0;
        for (int l = 0; l < outer; ++l) s += val[(size_t)k * outer + l];
        printf(" %.6f", s / outer);
    }
    printf("\n");
    return 0;
}
#endif
