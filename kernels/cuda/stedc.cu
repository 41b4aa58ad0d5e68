// Batched solve of small symmetric systems by Householder tridiagonalization and
// divide and conquer with truncation (Abbas-Turki & Graillat 2016, Section 5 and
// Algorithm 3; Cuppen 1981; Gu & Eisenstat 1995; LAPACK dstedc/dlaed0-dlaed4), one
// warp per system, everything in shared memory.
//
// This is a step-by-step mirror of the CPU code, with the same arithmetic in the same
// order wherever the order matters for rounding (compiled with --fmad=false):
//   kernels/src/householder/tridiagonalize.rs   householder_tridiagonalize (last row first, Q formed)
//   kernels/src/stedc/divide_conquer.rs         stedc, solve_unreduced, solve_2x2, merge
//   kernels/src/stedc/secular.rs                secular_equation_root (one lane per root)
//   kernels/src/stedc/truncated_solve.rs        truncated_eigen_solve
//   kernels/src/batch/escalate.rs               levels 1-2 of solve_one for divide and conquer
// Parallelism only where every output element is computed by one lane with the CPU's
// own loop order (dot products, column updates, secular roots, ranks); sums whose
// order matters and the sequential decisions (splits, division tree, deflation) run on
// lane 0. So the GPU and the CPU agree bit for bit, barring differences in the
// correctly rounded library functions (none are used: only + - * / sqrt).
//
// Requires N (system size, 1..64) and REAL_F64; no NSTAR. Block = one warp (32 threads).

#define METHOD_DIVIDE_CONQUER 2u

#if REAL_F64
#define REAL_EPS 2.220446049250313e-16
#else
#define REAL_EPS 1.1920928955078125e-07f
#endif

#define SECULAR_MAX_ITERATIONS 30
#define MODEL_ITERATIONS 8

__device__ __forceinline__ double dnan() { return __longlong_as_double(0x7ff8000000000000ULL); }

__device__ __forceinline__ real warp_max(real v) {
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}
__device__ __forceinline__ real warp_min(real v) {
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1) v = fmin(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}
__device__ __forceinline__ bool warp_any(bool p) { return __any_sync(0xffffffffu, p); }
__device__ __forceinline__ int warp_count(bool p) { return __popc(__ballot_sync(0xffffffffu, p)); }

// floor(log2 |x|) from the exponent bits of |x| as a double (ilogb of divide_conquer.rs).
__device__ __forceinline__ int ilogb_bits(double v) {
    v = fabs(v);
    int shift = 0;
    if (v < 2.2250738585072014e-308) {
        v *= 18446744073709551616.0;
        shift = 64;
    }
    long long bits = __double_as_longlong(v);
    return (int)((bits >> 52) & 0x7ff) - 1023 - shift;
}

// x 2^k by factors of at most 2^64 (scale_pow2).
__device__ __forceinline__ real scale_pow2(real x, int k) {
    while (k != 0) {
        int step = k < -64 ? -64 : (k > 64 ? 64 : k);
        x *= (real)ldexp(1.0, step);
        k -= step;
    }
    return x;
}

// ---------------------------------------------------------------------------------
// Residual check (kernels/src/batch/residual.rs::residual_check): the relative
// residual and the equilibrated solution growth. A: column-major n x n (lower read),
// here in shared or global memory; one lane per row, columns in ascending order.
// ---------------------------------------------------------------------------------
struct Check {
    double residual;
    double growth;
};

// Equilibration S = diag(|a_ii|^{-1/2}) (1 where a_ii = 0) into scale[0..N).
__device__ __forceinline__ void equilibration(const real* a, real* scale, int lane) {
    for (int r = lane; r < N; r += 32) {
        real dr = fabs(a[r + r * N]);
        scale[r] = dr > (real)0 ? (real)1 / sqrt(dr) : (real)1;
    }
    __syncwarp();
}

// scale: shared scratch of N reals (the equilibration, computed here).
__device__ Check residual_check_warp(const real* a, const real* b, const real* x, real* scale, int lane) {
    real r_max = 0, a_max = 0, x_max = 0, b_max = 0, sa_max = 0, sx_max = 0, sb_max = 0;
    bool nan_row = false;
    equilibration(a, scale, lane);
    for (int r = lane; r < N; r += 32) {
        const real sr = scale[r];
        real acc = 0, row = 0, srow = 0;
        for (int c = 0; c < N; ++c) {
            real arc = r >= c ? a[r + c * N] : a[c + r * N];
            const real sc = scale[c];
            acc += arc * x[c];
            row += fabs(arc);
            srow += fabs(sr * arc * sc);
        }
        sa_max = fmax(sa_max, srow);
        sx_max = fmax(sx_max, fabs(x[r] / sr));
        sb_max = fmax(sb_max, fabs(sr * b[r]));
        real ri = fabs(b[r] - acc);
        if (isnan(ri) || !finite(x[r])) nan_row = true;
        r_max = fmax(r_max, ri);
        a_max = fmax(a_max, row);
        x_max = fmax(x_max, fabs(x[r]));
        b_max = fmax(b_max, fabs(b[r]));
    }
    Check ch;
    if (warp_any(nan_row)) {
        ch.residual = dnan();
        ch.growth = dnan();
        return ch;
    }
    r_max = warp_max(r_max);
    a_max = warp_max(a_max);
    x_max = warp_max(x_max);
    b_max = warp_max(b_max);
    sa_max = warp_max(sa_max);
    sx_max = warp_max(sx_max);
    sb_max = warp_max(sb_max);
    double ax = (double)a_max * (double)x_max;
    double den = ax + (double)b_max;
    ch.residual = den == 0.0 ? 0.0 : (double)r_max / den;
    double sax = (double)sa_max * (double)sx_max;
    ch.growth = sax == 0.0 ? 0.0 : sax / (double)sb_max;
    return ch;
}

// ---------------------------------------------------------------------------------
// Householder tridiagonalization, A = Q T Q^T (householder_tridiagonalize), in place
// in the column-major N x N array a (lower triangle holds A on entry, Q on exit).
// d, e: diagonal and off-diagonal of T. tmp: N scratch.
// ---------------------------------------------------------------------------------
__device__ void reduce_row(int i, real* a, real* d, real* e, real* tmp, int lane) {
    const int l = i - 1;
    real sc = 0;
    for (int k = lane; k < i; k += 32) sc = fmax(sc, fabs(a[i + k * N]));
    sc = warp_max(sc);
    real sigma = 0;
    if (sc != (real)0) {
        for (int k = lane; k < l; k += 32) tmp[k] = a[i + k * N] / sc;
        __syncwarp();
        if (lane == 0)
            for (int k = 0; k < l; ++k) sigma += tmp[k] * tmp[k];
        sigma = __shfl_sync(0xffffffffu, sigma, 0);
    }
    if (sc == (real)0 || sigma < REAL_MIN_POSITIVE) {
        __syncwarp();
        if (lane == 0) e[l] = a[i + l * N];
        __syncwarp();
        for (int k = lane; k < i; k += 32) {
            a[i + k * N] = 0;
            a[k + i * N] = 0;
        }
        __syncwarp();
        return;
    }
    for (int k = lane; k < l; k += 32) a[i + k * N] = tmp[k];
    const real f = a[i + l * N] / sc;
    const real g = sqrt(sigma + f * f);
    const real alpha = -copysign(g, f);
    __syncwarp();
    if (lane == 0) {
        e[l] = alpha * sc;
        a[i + l * N] = f - alpha;
    }
    const real bb = g * (g + fabs(f));
    __syncwarp();
    for (int k = lane; k < i; k += 32) a[k + i * N] = a[i + k * N] / bb;
    __syncwarp();
    // p = A_i w, one row per lane.
    for (int r = lane; r < i; r += 32) {
        real p = 0;
        for (int c = 0; c < i; ++c) {
            real arc = c <= r ? a[r + c * N] : a[c + r * N];
            p += arc * a[c + i * N];
        }
        d[r] = p;
    }
    __syncwarp();
    real kk = 0;
    if (lane == 0)
        for (int r = 0; r < i; ++r) kk += a[r + i * N] * d[r];
    kk = __shfl_sync(0xffffffffu, kk, 0);
    kk *= (real)0.5;
    for (int r = lane; r < i; r += 32) d[r] -= kk * a[i + r * N];
    __syncwarp();
    // A_i -= q u^T + u q^T on the lower triangle, one row per lane.
    for (int r = lane; r < i; r += 32) {
        const real ur = a[i + r * N];
        const real qr = d[r];
        for (int c = 0; c <= r; ++c) {
            const real uc = a[i + c * N];
            const real qc = d[c];
            a[r + c * N] -= qr * uc + ur * qc;
        }
    }
    __syncwarp();
}

__device__ void apply_reflector(int i, real* a, int lane) {
    if (a[(i - 1) + i * N] == (real)0) return;
    real s[2];
#pragma unroll
    for (int q = 0; q < 2; ++q) {
        int c = lane + 32 * q;
        s[q] = 0;
        if (c < i)
            for (int r = 0; r < i; ++r) s[q] += a[i + r * N] * a[r + c * N];
    }
    __syncwarp();
#pragma unroll
    for (int q = 0; q < 2; ++q) {
        int c = lane + 32 * q;
        if (c < i)
            for (int r = 0; r < i; ++r) a[r + c * N] -= a[r + i * N] * s[q];
    }
    __syncwarp();
}

__device__ void householder_tridiagonalize(real* a, real* d, real* e, real* tmp, int lane) {
    for (int i = N - 1; i >= 2; --i) reduce_row(i, a, d, e, tmp, lane);
    __syncwarp();
    if (N >= 2 && lane == 0) e[0] = a[1];
    for (int k = lane; k < N; k += 32) d[k] = a[k + k * N];
    __syncwarp();
    if (lane == 0) a[0] = 1;
    __syncwarp();
    for (int j = 1; j < N; ++j) {
        for (int k = lane; k < j; k += 32) {
            a[j + k * N] = 0;
            a[k + j * N] = 0;
        }
        if (lane == 0) a[j + j * N] = 1;
        __syncwarp();
        if (j + 1 < N) apply_reflector(j + 1, a, lane);
    }
    __syncwarp();
}

// ---------------------------------------------------------------------------------
// Secular equation (secular.rs), one root per lane; d, z in shared memory, delta this
// lane's column.
// ---------------------------------------------------------------------------------
__device__ __forceinline__ real root_between(real a, real b, real c) {
    real disc = sqrt(fabs(a * a - (real)4 * b * c));
    if (a <= (real)0) return (a - disc) / ((real)2 * c);
    return (real)2 * b / (a + disc);
}
__device__ __forceinline__ real root_right(real a, real b, real c) {
    real disc = sqrt(fabs(a * a - (real)4 * b * c));
    if (a >= (real)0) return (a + disc) / ((real)2 * c);
    return (real)2 * b / (a - disc);
}

__device__ real two_poles(int i, const real* d, const real* z, real rho, real* delta) {
    const real two = 2;
    real gap = d[1] - d[0];
    real w0 = z[0] * z[0];
    real w1 = z[1] * z[1];
    bool origin_left = i == 0 && gap + two * rho * (w1 - w0) >= (real)0;
    if (origin_left) {
        real a = gap + rho * (w0 + w1);
        real b = rho * w0 * gap;
        real tau = root_between(a, b, (real)1);
        delta[0] = -tau;
        delta[1] = gap - tau;
        return d[0] + tau;
    }
    real a = rho * (w0 + w1) - gap;
    real b = -(rho * w1 * gap);
    real tau = i == 0 ? root_between(a, b, (real)1) : root_right(a, b, (real)1);
    delta[0] = -gap - tau;
    delta[1] = -tau;
    return d[1] + tau;
}

struct Evaluation {
    real f, d_left, d2_left, d_a, d_b, d_right, d2_right, err;
};

__device__ Evaluation sec_evaluate(const real* d, const real* z, int k, real rhoinv, int origin, int a, real tau,
                                   real* delta) {
    real f = rhoinv, d_left = 0, d2_left = 0, d_a = 0, d_b = 0, d_right = 0, d2_right = 0, abs_sum = 0;
    const real d_origin = d[origin];
    for (int j = 0; j < k; ++j) {
        real dj = (d[j] - d_origin) - tau;
        delta[j] = dj;
        real t = z[j] / dj;
        real term = z[j] * t;
        real deriv = t * t;
        f += term;
        abs_sum += fabs(term);
        if (j < a) {
            d_left += deriv;
            d2_left += deriv / dj;
        } else if (j == a) {
            d_a = deriv;
        } else if (j == a + 1) {
            d_b = deriv;
        } else {
            d_right += deriv;
            d2_right += deriv / dj;
        }
    }
    Evaluation ev;
    ev.f = f;
    ev.d_left = d_left;
    ev.d2_left = d2_left;
    ev.d_a = d_a;
    ev.d_b = d_b;
    ev.d_right = d_right;
    ev.d2_right = d2_right;
    ev.err = (real)8 * (abs_sum + rhoinv) + fabs(tau) * (((d_left + d_a) + d_b) + d_right);
    return ev;
}

__device__ __forceinline__ real bisect(real lo, real hi) {
    const real four = 4;
    if (lo > (real)0 && hi > four * lo) return sqrt(lo) * sqrt(hi);
    if (hi < (real)0 && lo < four * hi) return -(sqrt(-lo) * sqrt(-hi));
    return (lo + hi) / (real)2;
}

// Returns false when the model has no root right of the poles (last root, c <= 0).
__device__ __forceinline__ bool two_pole_root(real c, real pa, real s, real pb, real sb, bool last, real* out) {
    real a = c * (pa + pb) + s + sb;
    real b = c * pa * pb + s * pb + sb * pa;
    if (!last) {
        *out = root_between(a, b, c);
        return true;
    }
    if (c > (real)0) {
        *out = root_right(a, b, c);
        return true;
    }
    return false;
}

__device__ real middle_way_root(const Evaluation& ev, const real* d, const real* delta, int origin, int a, bool last,
                                real tau) {
    real f = ev.f;
    real p = delta[a];
    real q = delta[a + 1];
    real dpsi = ev.d_left + ev.d_a;
    real dphi = ev.d_b + ev.d_right;
    real c = f - p * dpsi - q * dphi;
    real out;
    if (two_pole_root(c, d[a] - d[origin], dpsi * p * p, d[a + 1] - d[origin], dphi * q * q, last, &out)) return out;
    return tau - f / (dpsi + dphi);
}

// Fixed slots: 0 left remainder, 1 pole a, 2 pole a+1, 3 right remainder (present[]).
__device__ real model_root(const Evaluation& ev, const real* d, const real* z, const real* delta, int origin, int a,
                           bool last, real tau, real hi_outer) {
    real pos[4], weights[4], dist[4];
    bool present[4];
    real p_left = ev.d_left / ev.d2_left;
    present[0] = ev.d_left > (real)0 && finite(p_left);
    dist[0] = p_left;
    pos[0] = p_left + tau;
    weights[0] = ev.d_left * p_left * p_left;
    present[1] = true;
    dist[1] = delta[a];
    pos[1] = d[a] - d[origin];
    weights[1] = z[a] * z[a];
    present[2] = true;
    dist[2] = delta[a + 1];
    pos[2] = d[a + 1] - d[origin];
    weights[2] = z[a + 1] * z[a + 1];
    real p_right = ev.d_right / ev.d2_right;
    present[3] = ev.d_right > (real)0 && finite(p_right);
    dist[3] = p_right;
    pos[3] = p_right + tau;
    weights[3] = ev.d_right * p_right * p_right;
    real c = ev.f;
#pragma unroll
    for (int l = 0; l < 4; ++l)
        if (present[l]) c -= weights[l] / dist[l];
    real lo, hi;
    if (last) {
        lo = pos[2];
        hi = hi_outer;
    } else {
        lo = pos[1];
        hi = pos[2];
    }
    real t = tau;
    for (int it = 0; it < MODEL_ITERATIONS; ++it) {
        real g = c, g_abs = fabs(c), dpsi = 0, dphi = 0;
#pragma unroll
        for (int l = 0; l < 4; ++l) {
            if (present[l]) {
                real dl = pos[l] - t;
                real r = weights[l] / dl;
                g += r;
                g_abs += fabs(r);
                if (l <= 1) dpsi += r / dl;
                else dphi += r / dl;
            }
        }
        if (fabs(g) <= REAL_EPS * g_abs) break;
        if (g < (real)0) lo = t;
        else hi = t;
        real dg = dpsi + dphi;
        real p = pos[1] - t;
        real q = pos[2] - t;
        real cm = g - p * dpsi - q * dphi;
        real next;
        if (!two_pole_root(cm, pos[1], dpsi * p * p, pos[2], dphi * q * q, last, &next)) next = t - g / dg;
        if (!finite(next) || g * (next - t) > (real)0) next = t - g / dg;
        if (next == t) break;
        if (!(next > lo && next < hi)) next = bisect(lo, hi);
        bool done = fabs(next - t) <= REAL_EPS * fabs(next);
        t = next;
        if (done) break;
    }
    return t;
}

// Root i of 1/rho + sum_j z_j^2/(d_j - lambda) = 0; false if not converged.
__device__ bool secular_root(int i, const real* d, const real* z, int k, real rho, real* delta, real* lambda) {
    if (k == 1) {
        real t = rho * z[0] * z[0];
        delta[0] = -t;
        *lambda = d[0] + t;
        return true;
    }
    if (k == 2) {
        *lambda = two_poles(i, d, z, rho, delta);
        return true;
    }
    const bool last = i == k - 1;
    const int a = last ? k - 2 : i;
    const real two = 2, four = 4;
    const real rhoinv = (real)1 / rho;
    int origin;
    real tau, lo, hi;
    Evaluation ev;
    if (!last) {
        real gap = d[i + 1] - d[i];
        real mid = gap / two;
        ev = sec_evaluate(d, z, k, rhoinv, i, a, mid, delta);
        if (ev.f >= (real)0) {
            real right = 0;
            for (int j = i + 1; j < k; ++j) right += z[j] * z[j];
            origin = i;
            tau = mid;
            hi = mid;
            lo = z[i] * z[i] / (two * (rhoinv + two * right / gap));
        } else {
            real left = 0;
            for (int j = 0; j <= i; ++j) left += z[j] * z[j];
            origin = i + 1;
            tau = mid - gap;
            lo = tau;
            hi = -(z[i + 1] * z[i + 1] * gap / (four * left));
        }
    } else {
        real znorm2 = 0;
        for (int j = 0; j < k; ++j) znorm2 += z[j] * z[j];
        real ub = rho * znorm2;
        real mid = ub / two;
        origin = k - 1;
        tau = mid;
        ev = sec_evaluate(d, z, k, rhoinv, origin, a, mid, delta);
        if (ev.f <= (real)0) {
            lo = mid;
            hi = ub;
        } else {
            lo = rho * z[k - 1] * z[k - 1] / two;
            hi = mid;
        }
    }
    if (!(lo < hi)) {
        if (origin == i + 1 && !last) hi = 0;
        else lo = 0;
    }
    const real half = 0.5;
    real f_lo = real_nan(), f_hi = real_nan();
    for (int iteration = 0; iteration <= SECULAR_MAX_ITERATIONS; ++iteration) {
        real f = ev.f;
        if (fabs(f) <= REAL_EPS * ev.err) {
            *lambda = d[origin] + tau;
            return true;
        }
        if (iteration == SECULAR_MAX_ITERATIONS) break;
        bool stalled;
        if (f < (real)0) {
            stalled = fabs(f) > half * fabs(f_lo);
            lo = tau;
            f_lo = f;
        } else {
            stalled = fabs(f) > half * fabs(f_hi);
            hi = tau;
            f_hi = f;
        }
        real next = stalled ? bisect(lo, hi) : model_root(ev, d, z, delta, origin, a, last, tau, hi);
        if (!stalled && (next == tau || !(next > lo && next < hi))) {
            next = middle_way_root(ev, d, delta, origin, a, last, tau);
            if (next != tau && !(next > lo && next < hi)) next = bisect(lo, hi);
        }
        if (next == tau) {
            *lambda = d[origin] + tau;
            return true;
        }
        tau = next;
        ev = sec_evaluate(d, z, k, rhoinv, origin, a, tau, delta);
    }
    return false;
}

// ---------------------------------------------------------------------------------
// Divide and conquer (divide_conquer.rs).
// ---------------------------------------------------------------------------------
struct Ws {
    real* q;         // N*N
    real* w;         // N*N
    real* d_sorted;  // N
    real* z_sorted;
    real* d_kept;
    real* z_kept;
    real* z_hat;
    real* values;
    real* rot_c;     // N
    real* rot_s;     // N
    int* perm;       // N
    int* kept;       // N
    int* deflated;   // N
    int* rank;       // N
    int* node_first; // 2N
    int* node_len;   // 2N
    int* rot_p;      // N
    int* rot_k;      // N
    int* block_end;  // N
    int* misc;       // 8: [0] kk, [1] nd, [2] nrot, [3] error, [4] node count, [5] blocks
};

// Ranks of v[0..m) in stable ascending order (ranks of divide_conquer.rs).
__device__ void ranks(const real* v, int m, int* rank, int lane) {
    for (int a = lane; a < m; a += 32) {
        int r = 0;
        for (int b = 0; b < m; ++b)
            if (v[b] < v[a] || (v[b] == v[a] && b < a)) ++r;
        rank[a] = r;
    }
    __syncwarp();
}

__device__ void solve_2x2(int s, real* d, const real* e, real* z) {
    const real a = d[s], c = d[s + 1], b = e[s];
    real t, cs, sn;
    if (b == (real)0) {
        t = 0;
        cs = 1;
        sn = 0;
    } else {
        const real two = 2;
        real tau = (c - a) / (two * b);
        real big = (real)1 / sqrt(REAL_EPS);
        if (fabs(tau) > big) t = (real)1 / (two * tau);
        else t = copysign((real)1, tau) / (fabs(tau) + sqrt((real)1 + tau * tau));
        cs = (real)1 / sqrt((real)1 + t * t);
        sn = t * cs;
    }
    real la = a - t * b;
    real lc = c + t * b;
    real l0, l1, v00, v01, v10, v11;
    if (la <= lc) {
        l0 = la; v00 = cs; v01 = -sn;
        l1 = lc; v10 = sn; v11 = cs;
    } else {
        l0 = lc; v00 = sn; v01 = cs;
        l1 = la; v10 = cs; v11 = -sn;
    }
    d[s] = l0;
    d[s + 1] = l1;
    z[s + s * N] = v00;
    z[s + 1 + s * N] = v01;
    z[s + (s + 1) * N] = v10;
    z[s + 1 + (s + 1) * N] = v11;
}

// Merge of a node of size nn = n1 + n2; d, z point at the node's diagonal entry and
// block (leading dimension N). Sets ws.misc[3] on failure.
__device__ void merge(int nn, int n1, real* d, real* z, real e_cut, Ws& ws, int lane) {
    const real inv_sqrt2 = (real)0.7071067811865476;
    const real rho = (real)2 * fabs(e_cut);
    const real sigma = copysign((real)1, e_cut);
    if (lane == 0) {
        int a = 0, b = n1;
        for (int k = 0; k < nn; ++k) {
            bool take_left = b == nn || (a < n1 && d[a] <= d[b]);
            if (take_left) ws.perm[k] = a++;
            else ws.perm[k] = b++;
        }
    }
    __syncwarp();
    real* q = ws.q;
    for (int k = 0; k < nn; ++k) {
        const int src = ws.perm[k];
        real* col = q + k * nn;
        for (int r = lane; r < nn; r += 32) {
            real v;
            if (src < n1) v = r < n1 ? z[r + src * N] : (real)0;
            else v = r < n1 ? (real)0 : z[r + src * N];
            col[r] = v;
        }
    }
    for (int k = lane; k < nn; k += 32) {
        const int src = ws.perm[k];
        ws.z_sorted[k] = src < n1 ? z[(n1 - 1) + src * N] * inv_sqrt2 : sigma * z[n1 + src * N] * inv_sqrt2;
        ws.d_sorted[k] = d[src];
    }
    __syncwarp();
    real dmax = 0;
    for (int k = lane; k < nn; k += 32) dmax = fmax(dmax, fabs(ws.d_sorted[k]));
    dmax = warp_max(dmax);
    const real tol = (real)8 * REAL_EPS * fmax(dmax, rho);
    // Deflation decisions (sequential), rotations recorded and applied row-parallel.
    if (lane == 0) {
        int kk = 0, nd = 0, nrot = 0, pending = -1;
        for (int k = 0; k < nn; ++k) {
            if (rho * fabs(ws.z_sorted[k]) <= tol) {
                ws.deflated[nd++] = k;
                continue;
            }
            if (pending < 0) {
                pending = k;
                continue;
            }
            const int p = pending;
            real zp = ws.z_sorted[p], zk = ws.z_sorted[k];
            real tau = sqrt(zp * zp + zk * zk);
            real c = zk / tau;
            real s = -(zp / tau);
            real gap = ws.d_sorted[k] - ws.d_sorted[p];
            if (fabs(gap * c * s) <= tol) {
                ws.z_sorted[k] = tau;
                ws.z_sorted[p] = 0;
                ws.rot_p[nrot] = p;
                ws.rot_k[nrot] = k;
                ws.rot_c[nrot] = c;
                ws.rot_s[nrot] = s;
                ++nrot;
                real dp = ws.d_sorted[p], dk = ws.d_sorted[k];
                ws.d_sorted[p] = dp * c * c + dk * s * s;
                ws.d_sorted[k] = dp * s * s + dk * c * c;
                ws.deflated[nd++] = p;
            } else {
                ws.kept[kk++] = p;
            }
            pending = k;
        }
        if (pending >= 0) ws.kept[kk++] = pending;
        ws.misc[0] = kk;
        ws.misc[1] = nd;
        ws.misc[2] = nrot;
    }
    __syncwarp();
    const int kk = ws.misc[0], nd = ws.misc[1], nrot = ws.misc[2];
    for (int r = lane; r < nn; r += 32) {
        for (int t = 0; t < nrot; ++t) {
            const int p = ws.rot_p[t], k = ws.rot_k[t];
            const real c = ws.rot_c[t], s = ws.rot_s[t];
            real x = q[r + p * nn], y = q[r + k * nn];
            q[r + p * nn] = c * x + s * y;
            q[r + k * nn] = c * y - s * x;
        }
    }
    const int exponent = ilogb_bits((double)fmax(dmax, rho));
    const real rho_scaled = scale_pow2(rho, -exponent);
    for (int l = lane; l < kk; l += 32) {
        ws.d_kept[l] = scale_pow2(ws.d_sorted[ws.kept[l]], -exponent);
        ws.z_kept[l] = ws.z_sorted[ws.kept[l]];
    }
    __syncwarp();
    real* w = ws.w;
    bool fail = false;
    for (int j = lane; j < kk; j += 32) {
        real lambda;
        if (!secular_root(j, ws.d_kept, ws.z_kept, kk, rho_scaled, w + j * kk, &lambda) || !finite(lambda)) {
            fail = true;
            lambda = 0;
        }
        ws.values[j] = scale_pow2(lambda, exponent);
    }
    if (warp_any(fail)) {
        if (lane == 0) ws.misc[3] = 1;
        __syncwarp();
        return;
    }
    __syncwarp();
    if (kk == 1) {
        if (lane == 0) w[0] = 1;
    } else if (kk > 1) {
        for (int i = lane; i < kk; i += 32) {
            real prod = w[i + i * kk];
            for (int j = 0; j < kk; ++j)
                if (j != i) prod *= w[i + j * kk] / (ws.d_kept[i] - ws.d_kept[j]);
            ws.z_hat[i] = copysign(sqrt(-prod), ws.z_kept[i]);
        }
        __syncwarp();
        for (int j = lane; j < kk; j += 32) {
            real* col = w + j * kk;
            real vmax = 0;
            for (int i = 0; i < kk; ++i) {
                real x = ws.z_hat[i] / col[i];
                col[i] = x;
                vmax = fmax(vmax, fabs(x));
            }
            real norm2 = 0;
            for (int i = 0; i < kk; ++i) {
                col[i] /= vmax;
                norm2 += col[i] * col[i];
            }
            real inv = (real)1 / sqrt(norm2);
            for (int i = 0; i < kk; ++i) col[i] *= inv;
        }
    }
    for (int t = lane; t < nd; t += 32) ws.values[kk + t] = ws.d_sorted[ws.deflated[t]];
    __syncwarp();
    ranks(ws.values, nn, ws.rank, lane);
    for (int idx = lane; idx < nn; idx += 32) d[ws.rank[idx]] = ws.values[idx];
    for (int j = 0; j < kk; ++j) {
        const int pos = ws.rank[j];
        const real* wcol = w + j * kk;
        for (int r = lane; r < nn; r += 32) {
            real acc = 0;
            for (int l = 0; l < kk; ++l) acc += q[r + ws.kept[l] * nn] * wcol[l];
            z[r + pos * N] = acc;
        }
    }
    for (int t = 0; t < nd; ++t) {
        const int pos = ws.rank[kk + t];
        const int k = ws.deflated[t];
        for (int r = lane; r < nn; r += 32) z[r + pos * N] = q[r + k * nn];
    }
    __syncwarp();
}

__device__ void solve_unreduced(int start, int size, real* d, const real* e, real* z, Ws& ws, int lane) {
    if (lane == 0) {
        int count = 1, head = 0;
        ws.node_first[0] = 0;
        ws.node_len[0] = size;
        while (head < count) {
            int first = ws.node_first[head], len = ws.node_len[head];
            ++head;
            if (len > 2) {
                int m = len / 2;
                ws.node_first[count] = first;
                ws.node_len[count] = m;
                ++count;
                ws.node_first[count] = first + m;
                ws.node_len[count] = len - m;
                ++count;
            }
        }
        ws.misc[4] = count;
        for (int t = 0; t < count; ++t) {
            int first = ws.node_first[t], len = ws.node_len[t];
            if (len > 2) {
                int cut = start + first + len / 2 - 1;
                real a = fabs(e[cut]);
                d[cut] -= a;
                d[cut + 1] -= a;
            }
        }
    }
    __syncwarp();
    const int count = ws.misc[4];
    for (int idx = count - 1; idx >= 0; --idx) {
        const int first = ws.node_first[idx], len = ws.node_len[idx];
        const int s = start + first;
        if (len == 1) {
            if (lane == 0) z[s + s * N] = 1;
        } else if (len == 2) {
            if (lane == 0) solve_2x2(s, d, e, z);
        } else {
            const int n1 = len / 2;
            merge(len, n1, d + s, z + s + s * N, e[s + n1 - 1], ws, lane);
            if (ws.misc[3]) return;
        }
        __syncwarp();
    }
}

// stedc: d (N) eigenvalues ascending on exit, e (N-1) destroyed, z (N x N) eigenvectors.
// Returns false on failure (non-finite data, secular equation not converged).
__device__ bool stedc(real* d, real* e, real* z, Ws& ws, int lane) {
    bool bad = false;
    real anorm = 0;
    for (int i = lane; i < N; i += 32) {
        bad |= !finite(d[i]);
        anorm = fmax(anorm, fabs(d[i]));
        if (i + 1 < N) {
            bad |= !finite(e[i]);
            anorm = fmax(anorm, fabs(e[i]));
        }
    }
    if (warp_any(bad)) return false;
    anorm = warp_max(anorm);
    for (int c = 0; c < N; ++c)
        for (int r = lane; r < N; r += 32) z[r + c * N] = 0;
    __syncwarp();
    if (anorm == (real)0) {
        for (int c = lane; c < N; c += 32) z[c + c * N] = 1;
        __syncwarp();
        return true;
    }
    const int exponent = ilogb_bits((double)anorm);
    for (int i = lane; i < N; i += 32) {
        d[i] = scale_pow2(d[i], -exponent);
        if (i + 1 < N) e[i] = scale_pow2(e[i], -exponent);
    }
    __syncwarp();
    if (lane == 0) {
        ws.misc[3] = 0;
        int blocks = 0;
        for (int i = 0; i < N; ++i) {
            bool end_here = i == N - 1;
            if (!end_here) {
                real tiny = REAL_EPS * sqrt(fabs(d[i])) * sqrt(fabs(d[i + 1]));
                if (fabs(e[i]) <= tiny) {
                    e[i] = 0;
                    end_here = true;
                }
            }
            if (end_here) ws.block_end[blocks++] = i;
        }
        ws.misc[5] = blocks;
    }
    __syncwarp();
    const int blocks = ws.misc[5];
    int start = 0;
    for (int bk = 0; bk < blocks; ++bk) {
        const int end = ws.block_end[bk];
        solve_unreduced(start, end + 1 - start, d, e, z, ws, lane);
        __syncwarp();
        if (ws.misc[3]) return false;
        start = end + 1;
    }
    if (blocks > 1) {
        ranks(d, N, ws.rank, lane);
        for (int c = 0; c < N; ++c) {
            const int dst = ws.rank[c];
            if (lane == 0) ws.values[dst] = d[c];
            for (int r = lane; r < N; r += 32) ws.q[r + dst * N] = z[r + c * N];
        }
        __syncwarp();
        for (int c = 0; c < N; ++c) {
            if (lane == 0) d[c] = ws.values[c];
            for (int r = lane; r < N; r += 32) z[r + c * N] = ws.q[r + c * N];
        }
        __syncwarp();
    }
    for (int i = lane; i < N; i += 32) {
        d[i] = scale_pow2(d[i], exponent);
        bad |= !finite(d[i]);
    }
    for (int c = 0; c < N; ++c)
        for (int r = lane; r < N; r += 32) bad |= !finite(z[r + c * N]);
    __syncwarp();
    return !warp_any(bad);
}

// truncated_eigen_solve: v <- sum_{kept} (Z_i^T v / lambda_i) Z_i; returns discarded.
__device__ int truncated_eigen_solve(const real* lambda, const real* z, real* v, real* tmp, real threshold, int lane) {
    real lmax = 0;
    for (int i = lane; i < N; i += 32) lmax = fmax(lmax, fabs(lambda[i]));
    lmax = warp_max(lmax);
    int discarded = 0;
    for (int i0 = 0; i0 < N; i0 += 32) {
        const int i = i0 + lane;
        bool drop = false;
        if (i < N) {
            const real l = lambda[i];
            if (l == (real)0 || fabs(l) * threshold < lmax) {
                tmp[i] = 0;
                drop = true;
            } else {
                real acc = 0;
                for (int r = 0; r < N; ++r) acc += z[r + i * N] * v[r];
                tmp[i] = acc / l;
            }
        }
        discarded += warp_count(drop);
    }
    __syncwarp();
    real out[2];
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        const int r = lane + 32 * s;
        out[s] = 0;
        if (r < N)
            for (int i = 0; i < N; ++i) out[s] += z[r + i * N] * tmp[i];
    }
    __syncwarp();
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        const int r = lane + 32 * s;
        if (r < N) v[r] = out[s];
    }
    __syncwarp();
    return discarded;
}

// Shared-memory layout of one system (reals, then ints); the host computes the same
// size (dc_shared_bytes in kernels/src/cuda/solver.rs).
constexpr int DC_REALS = 4 * N * N + 16 * N;
constexpr int DC_INTS = 13 * N + 16;

// Solves systems idx[k] (k < count; idx == nullptr: system k) by Householder + divide
// and conquer + truncated solve (levels 1-2 of solve_one for Strategy::DivideConquer).
// X and rep are written for those systems only; rep.method = 2 | (discarded << 8).
extern "C" __global__ void __launch_bounds__(32)
ENTRY(divide_conquer)(const real* __restrict__ A, const real* __restrict__ B, real* __restrict__ X,
                      GpuReport* __restrict__ rep, const unsigned int* __restrict__ idx, long long count,
                      double threshold) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    real* base = reinterpret_cast<real*>(smem_raw);
    real* qa = base;            // A, then Q of the tridiagonalization
    real* zz = qa + N * N;      // eigenvectors of T
    Ws ws;
    ws.q = zz + N * N;
    ws.w = ws.q + N * N;
    real* vec = ws.w + N * N;
    real* d = vec;
    real* e = d + N;
    real* d_eig = e + N;
    real* e_eig = d_eig + N;
    real* v = e_eig + N;
    real* tmp = v + N;
    real* xb = tmp + N;         // x
    real* bb = xb + N;          // b
    ws.d_sorted = bb + N;
    ws.z_sorted = ws.d_sorted + N;
    ws.d_kept = ws.z_sorted + N;
    ws.z_kept = ws.d_kept + N;
    ws.z_hat = ws.z_kept + N;
    ws.values = ws.z_hat + N;
    ws.rot_c = ws.values + N;
    ws.rot_s = ws.rot_c + N;
    int* ib = reinterpret_cast<int*>(base + DC_REALS);
    ws.perm = ib;
    ws.kept = ws.perm + N;
    ws.deflated = ws.kept + N;
    ws.rank = ws.deflated + N;
    ws.node_first = ws.rank + N;
    ws.node_len = ws.node_first + 2 * N;
    ws.rot_p = ws.node_len + 2 * N;
    ws.rot_k = ws.rot_p + N;
    ws.block_end = ws.rot_k + N;
    ws.misc = ws.block_end + N;
    const int lane = threadIdx.x & 31;
    const real thr = (real)threshold;

    for (long long k = blockIdx.x; k < count; k += gridDim.x) {
        const long long sys = idx ? (long long)idx[k] : k;
        const real* a = A + sys * (N * N);
        // Lower triangle (copy_lower) and b; finiteness of the input.
        bool bad = false;
        for (int e2 = lane; e2 < N * N; e2 += 32) {
            const int r = e2 % N, c = e2 / N;
            if (r >= c) {
                real vv = a[e2];
                bad |= !finite(vv);
                qa[e2] = vv;
            }
        }
        for (int i = lane; i < N; i += 32) {
            real vv = B[sys * N + i];
            bad |= !finite(vv);
            bb[i] = vv;
        }
        bad = warp_any(bad);
        __syncwarp();
        unsigned status = STATUS_OK;
        int discarded = 0;
        double residual = dnan();
        if (bad) {
            status = STATUS_NON_FINITE_INPUT;
        } else {
            householder_tridiagonalize(qa, d, e, tmp, lane);
            // v = Q^T b.
            for (int j = lane; j < N; j += 32) {
                real acc = 0;
                for (int i = 0; i < N; ++i) acc += qa[i + j * N] * bb[i];
                v[j] = acc;
            }
            for (int i = lane; i < N; i += 32) {
                d_eig[i] = d[i];
                e_eig[i] = e[i];
            }
            __syncwarp();
            if (!stedc(d_eig, e_eig, zz, ws, lane)) {
                status = STATUS_FAILED;
            } else {
                discarded = truncated_eigen_solve(d_eig, zz, v, tmp, thr, lane);
                // x = Q v.
                for (int i = lane; i < N; i += 32) {
                    real acc = 0;
                    for (int j = 0; j < N; ++j) acc += qa[i + j * N] * v[j];
                    xb[i] = acc;
                }
                __syncwarp();
                Check ch = residual_check_warp(a, bb, xb, tmp, lane);
                bool fin = !isnan(ch.residual);
                for (int i = lane; i < N; i += 32) fin &= finite(xb[i]);
                fin = !warp_any(!fin);
                if (fin) residual = ch.residual;
                else status = STATUS_FAILED;
            }
        }
        const bool ok = status == STATUS_OK;
        for (int i = lane; i < N; i += 32) X[sys * N + i] = ok ? xb[i] : real_nan();
        if (lane == 0) {
            GpuReport rp;
            rp.residual = ok ? residual : dnan();
            rp.method = METHOD_DIVIDE_CONQUER | ((unsigned)discarded << 8);
            rp.status = status;
            rep[sys] = rp;
        }
        __syncwarp();
    }
}

// Eigendecomposition of `count` tridiagonal matrices (stedc alone, for tests): D: count
// x N diagonals, E: count x N (entries 0..N-2 read), lambda: count x N eigenvalues
// ascending, Z: count x N x N eigenvectors (column-major); NaN where stedc failed.
extern "C" __global__ void __launch_bounds__(32)
ENTRY(stedc_batched)(const real* __restrict__ D, const real* __restrict__ E, real* __restrict__ lambda,
                     real* __restrict__ Z, long long count) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    real* base = reinterpret_cast<real*>(smem_raw);
    real* zz = base + N * N;
    Ws ws;
    ws.q = zz + N * N;
    ws.w = ws.q + N * N;
    real* d = ws.w + N * N;
    real* e = d + N;
    ws.d_sorted = e + N + 6 * N;
    ws.z_sorted = ws.d_sorted + N;
    ws.d_kept = ws.z_sorted + N;
    ws.z_kept = ws.d_kept + N;
    ws.z_hat = ws.z_kept + N;
    ws.values = ws.z_hat + N;
    ws.rot_c = ws.values + N;
    ws.rot_s = ws.rot_c + N;
    int* ib = reinterpret_cast<int*>(base + DC_REALS);
    ws.perm = ib;
    ws.kept = ws.perm + N;
    ws.deflated = ws.kept + N;
    ws.rank = ws.deflated + N;
    ws.node_first = ws.rank + N;
    ws.node_len = ws.node_first + 2 * N;
    ws.rot_p = ws.node_len + 2 * N;
    ws.rot_k = ws.rot_p + N;
    ws.block_end = ws.rot_k + N;
    ws.misc = ws.block_end + N;
    const int lane = threadIdx.x & 31;
    for (long long k = blockIdx.x; k < count; k += gridDim.x) {
        for (int i = lane; i < N; i += 32) {
            d[i] = D[k * N + i];
            e[i] = E[k * N + i];
        }
        __syncwarp();
        const bool ok = stedc(d, e, zz, ws, lane);
        for (int i = lane; i < N; i += 32) lambda[k * N + i] = ok ? d[i] : real_nan();
        for (int c = 0; c < N; ++c)
            for (int r = lane; r < N; r += 32) Z[k * N * N + r + c * N] = ok ? zz[r + c * N] : real_nan();
        __syncwarp();
    }
}
