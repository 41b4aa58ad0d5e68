// Helper kernels of the GPU benchmark and tests (run-time n, no N define):
// random symmetric positive definite batches, NaN poisoning, pointer arrays for the
// cuSOLVER batched routines, and the relative residual of a solution computed by
// someone else (cuSOLVER).

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// Uniform in (-1, 1) from a counter.
__device__ __forceinline__ double uniform_pm1(unsigned long long seed, unsigned long long k) {
    unsigned long long h = mix64(seed ^ mix64(k + 0x9e3779b97f4a7c15ULL));
    return ((double)(h >> 11) + 0.5) * (2.0 / 9007199254740992.0) - 1.0;
}

// A_i symmetric (both triangles written) with off-diagonal entries uniform in (-1, 1)
// and diagonal (n - 1) + 1.5 + u: strictly diagonally dominant, hence positive
// definite, condition number of order 10. b uniform in (-1, 1).
extern "C" __global__ void ENTRY(fill_spd)(real* __restrict__ A, real* __restrict__ B, long long batch,
                                          int n, unsigned long long seed) {
    long long nn = (long long)n * n;
    long long total = batch * nn;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        long long sys = e / nn;
        int rc = (int)(e % nn);
        int r = rc % n, c = rc / n;
        int lo = r < c ? r : c, hi = r < c ? c : r;
        double u = uniform_pm1(seed, (unsigned long long)(sys * nn + lo * n + hi));
        A[e] = (real)(r == c ? (double)(n - 1) + 1.5 + u : u);
    }
    long long tb = batch * n;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < tb;
         e += (long long)gridDim.x * blockDim.x) {
        B[e] = (real)uniform_pm1(seed ^ 0x5bd1e995ULL, (unsigned long long)e);
    }
}

extern "C" __global__ void ENTRY(fill_nan)(real* __restrict__ p, long long len) {
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < len;
         e += (long long)gridDim.x * blockDim.x) {
        p[e] = real_nan();
    }
}

// ptrs[i] = base + i * stride (elements), for the cuSOLVER *Batched pointer arrays.
extern "C" __global__ void ENTRY(pointer_array)(real** __restrict__ ptrs, real* base, long long stride,
                                               long long batch) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < batch;
         i += (long long)gridDim.x * blockDim.x) {
        ptrs[i] = base + i * stride;
    }
}

// Relative residual of x (one thread per system), with the arithmetic of
// `relative_residual`; A full column-major, lower triangle read.
extern "C" __global__ void ENTRY(relative_residual)(const real* __restrict__ A, const real* __restrict__ B,
                                                   const real* __restrict__ X, double* __restrict__ res,
                                                   long long batch, int n) {
    for (long long sys = blockIdx.x * (long long)blockDim.x + threadIdx.x; sys < batch;
         sys += (long long)gridDim.x * blockDim.x) {
        const real* a = A + sys * n * n;
        const real* b = B + sys * n;
        const real* x = X + sys * n;
        real r_max = 0, a_max = 0, x_max = 0, b_max = 0;
        bool nan_row = false;
        for (int i = 0; i < n; ++i) {
            real acc = 0, row = 0;
            for (int c = 0; c < n; ++c) {
                real aic = i >= c ? a[i + c * n] : a[c + i * n];
                acc += aic * x[c];
                row += fabs(aic);
            }
            real ri = fabs(b[i] - acc);
            if (isnan(ri) || !finite(x[i])) nan_row = true;
            r_max = fmax(r_max, ri);
            a_max = fmax(a_max, row);
            x_max = fmax(x_max, fabs(x[i]));
            b_max = fmax(b_max, fabs(b[i]));
        }
        double den = (double)a_max * (double)x_max + (double)b_max;
        res[sys] = nan_row ? __longlong_as_double(0x7ff8000000000000ULL) : (den == 0.0 ? 0.0 : (double)r_max / den);
    }
}
