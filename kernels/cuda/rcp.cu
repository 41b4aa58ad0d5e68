// Correctly rounded reciprocals without the out-of-line slow path of IEEE division, for
// the L D L^T pivots (ldlt.cu) and the check program benches/rcp_rn_fast_check.cu (which
// includes this file). No dependency on the module's defines.
//  f64, d in [2^-1000, 2^1001): the instruction sequence of the compiler's own rcp.rn.f64
//       (what (double)1 / d compiles to, IEEE round to nearest): MUFU.RCP64H
//       approximation with the low word hi(d) + 0x300402, one cubic and one quadratic
//       Newton step. That code leaves this path for its slow path only when the float
//       whose bits are hi(d) + 0x300402 is below 2^-126 or not finite; for d in that
//       range its exponent field is (e + 3 or e + 4) >> 3 with e in [23, 2024], i.e.
//       3..253, so the result is the compiler's correctly rounded 1 / d. 0 differences
//       from (double)1 / d on 2^33 pseudo-random d of that range (benches/RESULTS.md,
//       round 4).
//  f32, d in [2^-100, 2^101): MUFU.RCP approximation and one Newton step; equal to
//       (float)1 / d for every float in [2^-120, 2^120] (exhaustive test on the H100,
//       round 4).
__device__ __forceinline__ double rcp_rn_fast_f64(double d) {
    double y;
    asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(y) : "d"(d));
    y = __hiloint2double(__double2hiint(y), __double2hiint(d) + 0x300402);
    double e = fma(-d, y, 1.0);
    e = fma(e, e, e);
    y = fma(y, e, y);
    e = fma(-d, y, 1.0);
    return fma(y, e, y);
}
__device__ __forceinline__ float rcp_rn_fast_f32(float d) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(d));
    return fmaf(y, fmaf(-d, y, 1.0f), y);
}
