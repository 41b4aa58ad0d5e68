// Asynchronous copies global -> shared memory (cp.async, sm_80 and later; plain copies
// before), shared by the solver modules (common.cu), the regression build
// (regression.cu) and the engine kernels (engine.cu): the host prepends this file to
// each of their sources. The data travels without registers; a thread groups its copies
// with async_copy_commit and waits for them with async_copy_wait.

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
