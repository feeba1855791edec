//! The C ABI of dsh-native. This crate only translates: every rule lives in
//! `dsh-core`. Conventions (see the header's preamble): status codes, out
//! pointers, a thread-local last error, opaque handles with `*_free`, and no
//! panic across the boundary.

#![allow(non_camel_case_types)]
#![deny(missing_docs)]
// SAFETY comments on every unsafe block, `# Safety` on every public unsafe
// fn and no bare unsafe operation in an unsafe fn: the workspace's lints
// (Cargo.toml), which this crate inherits.

mod builders;
mod executor;
mod governor;
mod guard;
mod results;
mod spawn;
mod terminal;

pub use builders::*;
pub use executor::*;
pub use governor::*;
pub use guard::{dsh_last_errno, dsh_last_error, dsh_status_name, DshStatus, DshStr};
pub use results::*;
pub use spawn::*;
pub use terminal::*;

use std::ffi::c_char;

/// The library version, e.g. "0.1.0". Static; never freed. The header's
/// DSH_VERSION_MAJOR, DSH_VERSION_MINOR and DSH_VERSION_PATCH are the same
/// numbers, fixed when the program was compiled.
#[no_mangle]
pub extern "C" fn dsh_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
