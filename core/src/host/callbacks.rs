//! Host callbacks (task-done listeners, completion callbacks) run on one
//! dedicated thread, never on the I/O threads: a callback that blocks, or
//! waits for a lock such as Python's GIL, delays only other callbacks, never
//! a command's output or its timeout. Callbacks are delivered in the order
//! they were queued. A blocking call made from inside one is refused
//! ([`in_callback`]): it could wait for a callback queued behind itself.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Sender};

use crate::host::forked::PerProcess;

type Job = Box<dyn FnOnce() + Send>;

thread_local! {
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

/// True on the callback thread.
pub(crate) fn in_callback() -> bool {
    IN_CALLBACK.with(Cell::get)
}

/// The queue of the callback thread.
struct Queue(Sender<Job>);

static QUEUE: PerProcess<Queue> = PerProcess::new();

fn queue() -> &'static Queue {
    QUEUE.get(|| {
        let (tx, rx) = channel::<Job>();
        std::thread::Builder::new()
            .name("dsh-callbacks".into())
            .spawn(move || {
                IN_CALLBACK.with(|c| c.set(true));
                for job in rx {
                    if let Err(panic) = catch_unwind(AssertUnwindSafe(job)) {
                        eprintln!(
                            "dsh: a callback panicked ({}); later callbacks still run",
                            panic_message(&*panic)
                        );
                    }
                }
            })
            .expect("cannot start the dsh callback thread");
        Queue(tx)
    })
}

pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".into())
}

/// Queues `job` for the callback thread.
pub(crate) fn dispatch(job: impl FnOnce() + Send + 'static) {
    // The receiver lives as long as the thread, which never ends.
    let _ = queue().0.send(Box::new(job));
}
