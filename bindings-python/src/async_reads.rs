//! A terminal's async reads (`async for chunk in terminal`).
//!
//! One core read at a time: two would race for the output, and the one that
//! lost could tell the end before the other's text reached its loop. What a
//! core read returns goes to the oldest future still waiting, on that
//! future's own event loop, where a future given up (`asyncio.wait_for`
//! timing out) can be told apart from a live one without a race. Output read
//! for a future given up goes to the next waiting future, or is kept for the
//! next read of any kind: nothing is lost, nothing is reordered.
//!
//! The state is locked with `lock_py_attached` (the GIL is let go while
//! waiting for the lock): a holder may call into Python, which can hand the
//! GIL to a thread that wants the lock.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::PyStopAsyncIteration;
use pyo3::prelude::*;
use pyo3::sync::MutexExt;

/// What one core read brought.
enum Delivery {
    Text(String),
    Ended,
}

struct Waiter {
    event_loop: Py<PyAny>,
    future: Py<PyAny>,
}

#[derive(Default)]
struct State {
    /// Output read for no live future: the next read's, first.
    carry: String,
    /// A core read is on its way.
    in_flight: bool,
    /// Deliveries scheduled on a loop that has not run them yet.
    on_their_way: usize,
    /// Futures waiting for output, oldest first; given-up ones are dropped
    /// when a delivery meets them.
    waiting: VecDeque<Waiter>,
}

/// The async reads of one terminal, shared with the core reads in flight.
pub(crate) struct AsyncReads {
    terminal: dsh_core::Terminal,
    state: Mutex<State>,
}

impl AsyncReads {
    pub(crate) fn new(terminal: dsh_core::Terminal) -> Arc<Self> {
        Arc::new(AsyncReads {
            terminal,
            state: Mutex::default(),
        })
    }

    fn lock(&self, py: Python<'_>) -> MutexGuard<'_, State> {
        self.state
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Output read for a future that was given up, taken by a read of any
    /// kind ('' if none).
    pub(crate) fn take_carry(&self, py: Python<'_>) -> String {
        std::mem::take(&mut self.lock(py).carry)
    }

    /// Nothing these reads took is still to be handed out: no kept output,
    /// no core read and no delivery on its way.
    pub(crate) fn all_handed_out(&self, py: Python<'_>) -> bool {
        let state = self.lock(py);
        state.carry.is_empty() && !state.in_flight && state.on_their_way == 0
    }

    /// `__anext__`: a future for the next chunk, on the running loop.
    pub(crate) fn next_chunk<'py>(self: &Arc<Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
        let future = event_loop.call_method0("create_future")?;
        let mut state = self.lock(py);
        if !state.carry.is_empty() {
            let text = std::mem::take(&mut state.carry);
            drop(state);
            future.call_method1("set_result", (text,))?;
            return Ok(future);
        }
        state.waiting.push_back(Waiter {
            event_loop: event_loop.unbind(),
            future: future.clone().unbind(),
        });
        self.start_read(&mut state);
        Ok(future)
    }

    fn start_read(self: &Arc<Self>, state: &mut State) {
        if state.in_flight || state.waiting.is_empty() {
            return;
        }
        state.in_flight = true;
        let this = self.clone();
        self.terminal.next_output_with(move |out| {
            Python::try_attach(|py| {
                let mut state = this.lock(py);
                state.in_flight = false;
                let delivery = out.map_or(Delivery::Ended, Delivery::Text);
                this.route(py, &mut state, delivery);
            });
        });
    }

    /// Hands `delivery` to the loop of the oldest waiting future (the loop
    /// decides whether that future is still live), or keeps its text when
    /// no future waits on a loop that can be told.
    fn route(self: &Arc<Self>, py: Python<'_>, state: &mut State, delivery: Delivery) {
        let mut delivery = delivery;
        while let Some(front) = state.waiting.front() {
            let event_loop = front.event_loop.clone_ref(py);
            let arrive = Arrive {
                reads: self.clone(),
                event_loop: event_loop.clone_ref(py),
                delivery: Mutex::new(Some(delivery)),
            };
            let arrive = match Py::new(py, arrive) {
                Ok(arrive) => arrive,
                Err(_) => return,
            };
            if event_loop
                .call_method1(py, "call_soon_threadsafe", (arrive.clone_ref(py),))
                .is_ok()
            {
                state.on_their_way += 1;
                return;
            }
            // A closed loop: nothing waits on it any more.
            state.waiting.retain(|w| !w.event_loop.is(&event_loop));
            let taken = arrive
                .get()
                .delivery
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            match taken {
                Some(back) => delivery = back,
                None => return,
            }
        }
        if let Delivery::Text(text) = delivery {
            state.carry.push_str(&text);
        }
    }
}

/// A delivery, run on the loop it was scheduled on.
#[pyclass(frozen, module = "dsh_native")]
pub(crate) struct Arrive {
    reads: Arc<AsyncReads>,
    event_loop: Py<PyAny>,
    delivery: Mutex<Option<Delivery>>,
}

#[pymethods]
impl Arrive {
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        let Some(delivery) = self
            .delivery
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return Ok(());
        };
        let reads = &self.reads;
        let mut state = reads.lock(py);
        state.on_their_way -= 1;
        // Output kept earlier was read earlier: it goes first.
        let mut text = std::mem::take(&mut state.carry);
        let ended = match delivery {
            Delivery::Text(more) => {
                text.push_str(&more);
                false
            }
            Delivery::Ended => true,
        };
        let mut settle: Option<(Py<PyAny>, Option<String>)> = None;
        while let Some(front) = state.waiting.front() {
            if front.future.bind(py).call_method0("done")?.is_truthy()? {
                state.waiting.pop_front();
                continue;
            }
            if !front.event_loop.is(&self.event_loop) {
                // The oldest live future is another loop's: it is told there.
                let delivery = if text.is_empty() {
                    Delivery::Ended
                } else {
                    Delivery::Text(text)
                };
                reads.route(py, &mut state, delivery);
                return Ok(());
            }
            if text.is_empty() && !ended {
                break;
            }
            let waiter = state.waiting.pop_front().expect("the front was just seen");
            settle = Some((
                waiter.future,
                (!text.is_empty()).then(|| std::mem::take(&mut text)),
            ));
            break;
        }
        state.carry = text;
        reads.start_read(&mut state);
        drop(state);
        match settle {
            Some((future, Some(text))) => future.call_method1(py, "set_result", (text,)).map(drop),
            Some((future, None)) => {
                let end = PyStopAsyncIteration::new_err(()).into_value(py);
                future.call_method1(py, "set_exception", (end,)).map(drop)
            }
            None => Ok(()),
        }
    }
}

impl Drop for Arrive {
    fn drop(&mut self) {
        let Some(delivery) = self
            .delivery
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        // Its loop closed before running it: the text is the next read's.
        Python::try_attach(|py| {
            let mut state = self.reads.lock(py);
            state.on_their_way -= 1;
            if let Delivery::Text(text) = delivery {
                state.carry.push_str(&text);
            }
        });
    }
}
