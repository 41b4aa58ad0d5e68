//! The floating-point element type of every solver: `f32` or `f64`.
//!
//! The CPU code is written once, generic over [`Real`], and mirrors the CUDA kernels
//! (which are instantiated once per precision). Arithmetic is plain IEEE `+ - * /` and
//! `sqrt`, with no fused multiply-add, so that the CPU and GPU (compiled with
//! `--fmad=false`) round the same way operation by operation.

use std::fmt::{Debug, Display};
use std::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Sub, SubAssign};

/// A real floating-point scalar (`f32` or `f64`).
pub trait Real:
    Copy
    + Send
    + Sync
    + Debug
    + Display
    + Default
    + PartialOrd
    + PartialEq
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + DivAssign
    + 'static
{
    /// Machine epsilon: the distance from 1 to the next larger number.
    const EPSILON: Self;
    /// Smallest positive normal number.
    const MIN_POSITIVE: Self;
    /// Name used in reports and CUDA entry points (`"f32"`, `"f64"`).
    const NAME: &'static str;
    const ZERO: Self;
    const ONE: Self;
    const NAN: Self;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
    fn from_usize(x: usize) -> Self {
        Self::from_f64(x as f64)
    }
    fn sqrt(self) -> Self;
    fn abs(self) -> Self;
    fn is_finite(self) -> bool;
    fn is_nan(self) -> bool;
    /// `max` that ignores NaN in either argument (as `f64::max`).
    fn max(self, other: Self) -> Self;
    fn min(self, other: Self) -> Self;
    /// `|x|` with the sign of `sign`.
    fn copysign(self, sign: Self) -> Self;
    /// `sqrt(x^2 + y^2)` without undue overflow or underflow.
    fn hypot(self, other: Self) -> Self;
}

macro_rules! impl_real {
    ($t:ident) => {
        impl Real for $t {
            const EPSILON: Self = $t::EPSILON;
            const MIN_POSITIVE: Self = $t::MIN_POSITIVE;
            const NAME: &'static str = stringify!($t);
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const NAN: Self = $t::NAN;
            #[inline(always)]
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                $t::sqrt(self)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                $t::abs(self)
            }
            #[inline(always)]
            fn is_finite(self) -> bool {
                $t::is_finite(self)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                $t::is_nan(self)
            }
            #[inline(always)]
            fn max(self, other: Self) -> Self {
                $t::max(self, other)
            }
            #[inline(always)]
            fn min(self, other: Self) -> Self {
                $t::min(self, other)
            }
            #[inline(always)]
            fn copysign(self, sign: Self) -> Self {
                $t::copysign(self, sign)
            }
            #[inline(always)]
            fn hypot(self, other: Self) -> Self {
                $t::hypot(self, other)
            }
        }
    };
}
impl_real!(f32);
impl_real!(f64);
