// Device helpers shared by the solver modules (common.cu), the regression build
// (regression.cu) and the engine kernels (engine.cu): the host prepends this file to
// each of their sources. Three parts:
// - asynchronous copies global -> shared memory (cp.async, sm_80 and later; plain copies
//   before): the data travels without registers; a thread groups its copies with
//   async_copy_commit and waits for them with async_copy_wait;
// - the inner states' two planes of words (paths.cu writes them so);
// - one 8 x 8 x 4 f64 block on the FP64 tensor cores (sm_80 and later), for the solvers'
//   lane sums (common.cu) and the build's Psi^T Psi (regression.cu).

// 4-byte copy.
__device__ __forceinline__ void async_copy4(void* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
#else
    *(float*)dst = *(const float*)src;
#endif
}

// 8-byte copy.
__device__ __forceinline__ void async_copy8(void* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(d), "l"(src) : "memory");
#else
    *(double*)dst = *(const double*)src;
#endif
}

// 16-byte copy, both addresses 16-byte aligned; bypasses L1 (data read once).
__device__ __forceinline__ void async_copy16(void* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
#else
    ((double*)dst)[0] = ((const double*)src)[0];
    ((double*)dst)[1] = ((const double*)src)[1];
#endif
}

// The same on addresses already in the shared and global windows (nothing before sm_80:
// callers copy by other means there).
__device__ __forceinline__ void async_copy16_raw(unsigned dst, unsigned long long src) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
#endif
}

// Closes this thread's group of copies issued since the last commit.
__device__ __forceinline__ void async_copy_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

// Waits until at most `pending` of this thread's most recent groups are in flight.
template <int pending>
__device__ __forceinline__ void async_copy_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(pending) : "memory");
#endif
}

// ---- Inner states in two planes of words (paths.cu writes them so) ----
//
// The inner states of one (outer path, date) block, m x d doubles, are stored as the m d
// high words of the doubles (element e = mm * d + i at word e) followed by their m d low
// words (at word m d + e): the block's bytes, its place and its stride are those of the
// m x d doubles. The double is the two words joined: the same bits.
__device__ __forceinline__ double state_join(const unsigned* hi, const unsigned* lo, int i) {
    return __hiloint2double((int)hi[i], (int)lo[i]);
}

// The value the regression basis reads: the high word alone (the low 32 bits of the
// significand cleared), as the CPU's high_word (kernels/src/basis.rs).
__device__ __forceinline__ double state_high(const unsigned* hi, int i) {
    return __hiloint2double((int)hi[i], 0);
}

// The warp's asynchronous copy of nw words from src (global) to dst (shared): 16-byte
// pieces where vec (both 16-byte aligned) for the first nw & ~3 words, 4-byte pieces for
// the rest (all of them when !vec); with `full` (nw == FULLW, a multiple of 4) unrolled
// with immediate offsets. Every lane of the warp calls it; no commit.
template <int FULLW>
__device__ __forceinline__ void warp_copy_words_async(unsigned* dst, const unsigned* src, int nw,
                                                      bool full, bool vec, int lane) {
    if (vec && full) {
#if __CUDA_ARCH__ >= 800
        // The lane's first addresses in the shared and global windows once; the rest at
        // immediate offsets (512 bytes per round of the warp).
        const unsigned dl = (unsigned)__cvta_generic_to_shared(dst + 4 * lane);
        const unsigned long long gl = (unsigned long long)__cvta_generic_to_global(src + 4 * lane);
#pragma unroll
        for (int i = 0; i < (FULLW / 4 + 31) / 32; ++i)
            if (4 * (lane + 32 * i) < FULLW) async_copy16_raw(dl + 512 * i, gl + 512 * i);
#else
        for (int r = 4 * lane; r < FULLW; r += 128) async_copy16(dst + r, src + r);
#endif
        return;
    }
    const int nv = vec ? (nw & ~3) : 0;
    for (int r = 4 * lane; r < nv; r += 128) async_copy16(dst + r, src + r);
    for (int r = nv + lane; r < nw; r += 32) async_copy4(dst + r, src + r);
}

// ---- The FP64 tensor cores (sm_80 and later) ----
//
// D = A B + D for one 8 x 8 x 4 f64 block, mma.sync.m8n8k4.f64 (A, B: this lane's
// fragment values): lane l holds A[l/4][l%4], B[l%4][l/4] and D[l/4][2(l%4) + {0, 1}].
// The tensor core adds its four products in order as fused multiply-adds (measured in
// regression.cu's build).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
__device__ __forceinline__ void mma_m8n8k4_f64(double& d0, double& d1, double a, double b) {
    asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
        : "+d"(d0), "+d"(d1)
        : "d"(a), "d"(b));
}
#endif
// D = A B + D for one 16 x 8 x 8 f64 block, mma.sync.m16n8k8.f64 (sm_90): with g = l/4,
// q = l%4, lane l holds A[g][q], A[g + 8][q], A[g][q + 4], A[g + 8][q + 4] (a0..a3),
// B[q][g], B[q + 4][g] (b0, b1) and D[g][2q + {0, 1}], D[g + 8][2q + {0, 1}] (d[0..4]).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define HAVE_MMA_M16N8K8_F64 1
__device__ __forceinline__ void mma_m16n8k8_f64(double (&d)[4], double a0, double a1, double a2,
                                                double a3, double b0, double b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
        : "d"(a0), "d"(a1), "d"(a2), "d"(a3), "d"(b0), "d"(b1));
}
#endif
