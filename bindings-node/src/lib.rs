//! The Node face of dsh-native: a native addon (loaded by `loader.js`) that the thin
//! `index.js` wraps into the harness's `ShellExecutor` shape. This crate only
//! translates JS values to core inputs, core results to plain objects, and
//! core errors to `Error`s with a `code` (one mapping: `js_error`).

mod convert;
mod executor;
mod foreground;
mod pipe_reader;
mod settle;
mod spawn;
mod terminal_readers;

pub use executor::*;
pub use pipe_reader::NativePipeReader;
pub use spawn::*;

/// A lock that a panic elsewhere does not make unusable.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
