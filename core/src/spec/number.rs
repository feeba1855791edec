//! A number as every face hands it over, and the one rule for numeric
//! fields (docs/configuration.md, "The rule for numbers").

use crate::spec::error::{DshError, Field, Result};

/// A number as a caller gives it. JavaScript and Python hand over doubles and
/// unbounded integers, so every face passes the raw value here and the range
/// rules live in [`whole_number`], once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Num(pub f64);

macro_rules! num_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Num {
            fn from(v: $t) -> Num {
                Num(v as f64)
            }
        }
    )*};
}
num_from!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize, f32, f64);

/// The largest integer every face can carry exactly (JavaScript's
/// `Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;
/// The one rule for every numeric field: a positive, finite, whole number no
/// larger than `max`. Never rounded, never clamped. The wording is the
/// harness's own ("graceMs must be no greater than 2147483647").
pub fn whole_number(field: Field, value: Num, max: u64) -> Result<u64> {
    let v = value.0;
    if !v.is_finite() || v <= 0.0 {
        return Err(DshError::invalid(
            field,
            format!("must be a positive finite number, got {v}"),
        ));
    }
    if v.fract() != 0.0 {
        return Err(DshError::invalid(
            field,
            format!("must be a whole number, got {v}"),
        ));
    }
    if v > max as f64 {
        return Err(DshError::invalid(
            field,
            format!("must be no greater than {max}, got {v}"),
        ));
    }
    Ok(v as u64)
}
