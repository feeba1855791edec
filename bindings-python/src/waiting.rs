//! Blocking waits that Ctrl-C can interrupt: the GIL is released for at
//! most [`SIGNAL_POLL`] at a time, and Python's signal handlers run between
//! slices (a KeyboardInterrupt is raised from the wait).

use std::time::{Duration, Instant};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::to_pyerr;

/// How long a blocking call waits without looking at Python's signals.
pub(crate) const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// The deadline `timeout` seconds from now (None: no limit); ValueError
/// for a timeout that is not a non-negative number.
pub(crate) fn deadline(timeout: Option<f64>) -> PyResult<Option<Instant>> {
    match timeout {
        Some(t) if t.is_nan() || t < 0.0 => Err(PyValueError::new_err(format!(
            "timeout must be a non-negative number of seconds, got {t}"
        ))),
        // Past what a deadline can hold (1e300 s, math.inf): no deadline at all.
        Some(t) => Ok(Duration::try_from_secs_f64(t)
            .ok()
            .and_then(|d| Instant::now().checked_add(d))),
        None => Ok(None),
    }
}

/// Calls `step` with the GIL released, each time with the slice it may
/// block for, until it returns a value (`Some`) or `deadline` has passed
/// (`None`); signals are checked between slices.
pub(crate) fn wait_until<T: Send>(
    py: Python<'_>,
    deadline: Option<Instant>,
    mut step: impl FnMut(Duration) -> dsh_core::Result<Option<T>> + Send,
) -> PyResult<Option<T>> {
    loop {
        let slice = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()).min(SIGNAL_POLL),
            None => SIGNAL_POLL,
        };
        if let Some(value) = py.detach(|| step(slice)).map_err(|e| to_pyerr(py, e))? {
            return Ok(Some(value));
        }
        py.check_signals()?;
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
    }
}

/// Calls `withdraw` if `future` (an asyncio future) is cancelled: a caller
/// that stops waiting (`asyncio.wait_for` timing out) takes its callback
/// back, so polling never accumulates.
pub(crate) fn withdraw_on_cancel(
    py: Python<'_>,
    future: &Bound<'_, PyAny>,
    withdraw: impl Fn() + Send + 'static,
) -> PyResult<()> {
    let on_done = pyo3::types::PyCFunction::new_closure(py, None, None, move |args, _kwargs| {
        if args.get_item(0)?.call_method0("cancelled")?.is_truthy()? {
            withdraw();
        }
        PyResult::Ok(())
    })?;
    future.call_method1("add_done_callback", (on_done,))?;
    Ok(())
}
