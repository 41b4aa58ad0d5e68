// Escalation on the device (Strategy::Escalating; kernels/src/batch/escalate.rs::solve_one).
// Concatenated after stedc.cu (uses residual_check_warp, warp_* helpers). One warp per
// system; the indices of the systems that need the next level are appended to a list
// with one atomicAdd per system (order within a list is arbitrary: every system is
// independent). The lists' lengths stay on the device: the next level's kernels read
// them there (common.cu's listed_total), so the host queues every level at once.
//
// Level 0 runs the L D L^T kernel of ldlt.cu; with the group organisation that kernel
// already settles the systems whose residual and growth pass and whose own pivot ratio
// min_j D_jj / A_jj is at least 4 / thr + 128 n eps (and those with non-finite input),
// and lists the others, and ldlt_check visits only that list; otherwise ldlt_check
// visits every system. It decides per system, as
// solve_one does after its L D L^T:
//  * status non-finite input: final.
//  * status not positive definite: the first non-positive pivot (index, value) is
//    recomputed by the L D L^T of the CPU (same arithmetic order, in shared memory);
//    a pivot tiny against its diagonal (|pivot| threshold < |A_jj|) or NaN goes to
//    divide and conquer (list 2), any other to Householder + PCR (list 1).
//  * otherwise residual_check (residual, equilibrated growth) from the x written by
//    the L D L^T kernel, and the pivot ratio min_j D_jj / A_jj. The pivot ratio needs
//    D; it is recomputed (CPU order) only when the Gershgorin discs of the equilibrated
//    matrix S A S do not already prove min_j D_jj / A_jj >= lambda_min(S A S) well above
//    1 / threshold (the pivots of an SPD matrix are bounded below by its smallest
//    eigenvalue, by interlacing). Ill-conditioned (growth > threshold or ratio *
//    threshold < 1) -> list 2; residual > tolerance -> list 1; else final.

// Copies the column-major matrix of system `sys` (all N*N entries, coalesced), b and
// x into shared memory.
__device__ __forceinline__ void load_system(const real* __restrict__ A, const real* __restrict__ B,
                                            const real* __restrict__ Xsrc, long long sys, long long xsys,
                                            real* sa, real* sb, real* sx, int lane) {
    const real* a = A + sys * (N * N);
    for (int e = lane; e < N * N; e += 32) sa[e] = a[e];
    for (int i = lane; i < N; i += 32) {
        sb[i] = B[sys * N + i];
        if (Xsrc) sx[i] = Xsrc[xsys * N + i];
    }
    __syncwarp();
}

// ldlt_factor (kernels/src/ldlt/factor.rs) in place on the lower triangle of sa, one
// lane per row. Returns true on success; else *index and *pivot of the first
// non-positive or non-finite pivot. *ratio = min_j D_jj / diag_j (1 if larger).
__device__ bool ldlt_factor_warp(real* sa, const real* diag, int lane, int* index, real* pivot, real* ratio) {
    for (int j = 0; j < N; ++j) {
        real t[2];
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            const int i = lane + 32 * s;
            t[s] = 0;
            if (i >= j && i < N) {
                real acc = sa[i + j * N];
                for (int k = 0; k < j; ++k) {
                    const real ljk = sa[j + k * N];
                    acc -= sa[i + k * N] * (ljk * sa[k + k * N]);
                }
                t[s] = acc;
            }
        }
        const real tv = j >= 32 ? t[1] : t[0];
        const real p = __shfl_sync(0xffffffffu, tv, j & 31);
        if (!finite(p) || p <= (real)0) {
            *index = j;
            *pivot = p;
            return false;
        }
        __syncwarp();
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            const int i = lane + 32 * s;
            if (i == j) sa[i + j * N] = p;
            else if (i > j && i < N) sa[i + j * N] = t[s] / p;
        }
        __syncwarp();
    }
    real m = 1;
    for (int j = lane; j < N; j += 32) m = fmin(m, sa[j + j * N] / diag[j]);
    *ratio = warp_min(m);
    return true;
}

// Lower bound on lambda_min(S A S), S = diag(|a_ii|^{-1/2}), by Gershgorin discs;
// -1 if some a_ii <= 0.
// scale: the equilibration left by residual_check_warp.
__device__ real gershgorin_equilibrated(const real* sa, const real* scale, int lane) {
    real lo = REAL_MAX;
    bool nonpos = false;
    for (int r = lane; r < N; r += 32) {
        const real dr = sa[r + r * N];
        if (!(dr > (real)0)) nonpos = true;
        const real sr = scale[r];
        real off = 0;
        for (int c = 0; c < N; ++c) {
            if (c == r) continue;
            const real arc = r >= c ? sa[r + c * N] : sa[c + r * N];
            const real sc = scale[c];
            off += fabs(sr * arc * sc);
        }
        lo = fmin(lo, sr * dr * sr - off);
    }
    if (warp_any(nonpos)) return (real)-1;
    return warp_min(lo);
}

constexpr int CHECK_REALS = N * N + 5 * N;

extern "C" __global__ void __launch_bounds__(32)
ENTRY(ldlt_check)(const real* __restrict__ A, const real* __restrict__ B, const real* __restrict__ X,
                  const GpuReport* __restrict__ rep, const unsigned int* __restrict__ idx, long long batch,
                  double tol, double thr, unsigned int* __restrict__ list1, unsigned int* __restrict__ list2,
                  unsigned int* __restrict__ counters) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    real* sa = reinterpret_cast<real*>(smem_raw);
    real* sdiag = sa + N * N;
    real* sx = sdiag + N;
    real* sb = sx + N;
    real* sscale = sb + N;
    const int lane = threadIdx.x & 31;
    // Margin of the Gershgorin certificate: 4 / threshold plus rounding of the bound.
    const double margin = 4.0 / thr + 64.0 * N * (double)REAL_EPS;
    // idx null: systems 0..batch; else the counters[2] systems idx[0..] that the L D L^T
    // kernel could not settle itself (written by the previous launch).
    const long long count = idx ? (long long)counters[2] : batch;
    for (long long kk = blockIdx.x; kk < count; kk += gridDim.x) {
        const long long k = idx ? (long long)idx[kk] : kk;
        const unsigned st = rep[k].status;
        if (st == STATUS_NON_FINITE_INPUT) continue;
        load_system(A, B, X, k, k, sa, sb, sx, lane);
        for (int j = lane; j < N; j += 32) sdiag[j] = sa[j + j * N];
        __syncwarp();
        int dest = 0;  // 0 final, 1 Householder + PCR, 2 divide and conquer
        Check ch;
        ch.residual = 0;
        ch.growth = 0;
        bool need_factor = true;
        if (st != STATUS_NOT_POSITIVE_DEFINITE) {
            ch = residual_check_warp(sa, sb, sx, sscale, lane);
            need_factor = !((double)gershgorin_equilibrated(sa, sscale, lane) >= margin);
        }
        bool factored_ok = true;
        int index = 0;
        real pivot = 0, ratio = 1;
        if (need_factor) factored_ok = ldlt_factor_warp(sa, sdiag, lane, &index, &pivot, &ratio);
        if (st == STATUS_NOT_POSITIVE_DEFINITE || !factored_ok) {
            if (!factored_ok) {
                const double diag = (double)fabs(sdiag[index]);
                const bool tiny = fabs((double)pivot) * thr < diag;
                dest = (tiny || isnan(pivot)) ? 2 : 1;
            } else {
                // The L D L^T kernel (another summation order) met a non-positive
                // pivot that the CPU order did not: no solution to check, next level.
                dest = 1;
            }
        } else {
            const bool ill = ch.growth > thr || (double)ratio * thr < 1.0;
            if (ch.residual <= tol && !ill) dest = 0;
            else dest = ill ? 2 : 1;
        }
        if (lane == 0) {
            if (dest == 1) list1[atomicAdd(&counters[0], 1u)] = (unsigned)k;
            else if (dest == 2) list2[atomicAdd(&counters[1], 1u)] = (unsigned)k;
        }
        __syncwarp();
    }
}

// After Householder + PCR, in place: the systems sys = idx[k] (k < counters[0], the
// list 1 written by ldlt_check), or sys = k < batch (idx null), whose X[sys] and
// rep[sys] that kernel wrote. Accept (residual <= tol and growth <= threshold: the
// report gets the residual of this check) or append sys to list 2 (counters[1]), whose
// X and rep divide and conquer then overwrites.
extern "C" __global__ void __launch_bounds__(32)
ENTRY(pcr_check)(const real* __restrict__ A, const real* __restrict__ B, const unsigned int* __restrict__ idx,
                 long long batch, real* X, GpuReport* rep, double tol, double thr,
                 unsigned int* __restrict__ list2, unsigned int* counters) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    real* sa = reinterpret_cast<real*>(smem_raw);
    real* sscale = sa + N * N;
    real* sx = sscale + N;
    real* sb = sx + N;
    const int lane = threadIdx.x & 31;
    const long long count = idx ? listed_total(batch, counters, 0) : batch;
    for (long long k = blockIdx.x; k < count; k += gridDim.x) {
        const long long sys = listed_system(idx, 0, k);
        const unsigned st = rep[sys].status;
        if (st == STATUS_NON_FINITE_INPUT) {
            for (int i = lane; i < N; i += 32) X[sys * N + i] = real_nan();
            if (lane == 0) {
                GpuReport rp;
                rp.residual = dnan();
                rp.method = METHOD_HOUSEHOLDER_PCR;
                rp.status = STATUS_NON_FINITE_INPUT;
                rep[sys] = rp;
            }
            continue;
        }
        bool accept = false;
        Check ch;
        ch.residual = dnan();
        if (st == STATUS_OK) {
            load_system(A, B, X, sys, sys, sa, sb, sx, lane);
            ch = residual_check_warp(sa, sb, sx, sscale, lane);
            accept = ch.residual <= tol && ch.growth <= thr;
        }
        if (accept) {
            if (lane == 0) {
                GpuReport rp;
                rp.residual = ch.residual;
                rp.method = METHOD_HOUSEHOLDER_PCR;
                rp.status = STATUS_OK;
                rep[sys] = rp;
            }
        } else if (lane == 0) {
            list2[atomicAdd(&counters[1], 1u)] = (unsigned)sys;
        }
        __syncwarp();
    }
}
