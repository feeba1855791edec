//! State that belongs to one process of the host. A host may `fork()` after
//! using dsh (Python's `os.fork`, `multiprocessing`): the child inherits the
//! memory of the core's threads but not the threads, and shares the parent's
//! epoll instances. Such state is rebuilt in the child on first use, and the
//! parent's copy is leaked there, never dropped: dropping would join threads
//! that do not exist, or deregister descriptors from an epoll the parent is
//! still using.

use std::sync::atomic::{AtomicPtr, Ordering};

/// The calling process's pid. (glibc no longer caches it, so this is the
/// real one in a forked child.)
pub(crate) fn current_pid() -> libc::pid_t {
    // SAFETY: getpid has no preconditions and cannot fail.
    unsafe { libc::getpid() }
}

/// Ok in the process `host_pid`; in a forked child, the error that says
/// the object belongs to the parent.
pub(crate) fn check_host(host_pid: libc::pid_t) -> crate::spec::error::Result<()> {
    let here = current_pid();
    if host_pid == here {
        Ok(())
    } else {
        Err(crate::spec::error::DshError::ForkedChild {
            owner_pid: host_pid,
            pid: here,
        })
    }
}

struct Slot<T> {
    pid: libc::pid_t,
    value: T,
}

/// A lazily built `T` per host process: built on first use, and again on
/// first use in a forked child. Lock-free, so a fork taken while another
/// thread was inside `get` cannot leave the child a held lock.
pub(crate) struct PerProcess<T: 'static> {
    slot: AtomicPtr<Slot<T>>,
}

impl<T: Send + Sync + 'static> PerProcess<T> {
    pub(crate) const fn new() -> Self {
        PerProcess {
            slot: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The current process's `T`, built with `make` if this process has none.
    pub(crate) fn get(&self, make: impl FnOnce() -> T) -> &'static T {
        let pid = current_pid();
        let current = self.slot.load(Ordering::Acquire);
        // SAFETY: a non-null slot was leaked by `Box::leak` below and is
        // never freed, so it is valid for 'static.
        if let Some(slot) = unsafe { current.as_ref() } {
            if slot.pid == pid {
                return &slot.value;
            }
        }
        let fresh: *mut Slot<T> = Box::leak(Box::new(Slot { pid, value: make() }));
        match self
            .slot
            .compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire)
        {
            // The previous slot (the parent's, in a forked child) is leaked.
            // SAFETY: `fresh` was just leaked and is never freed.
            Ok(_) => unsafe { &(*fresh).value },
            Err(winner) => {
                // Another thread of this process built one first (only this
                // process's threads can store here after the fork, so it is
                // this pid's). Ours was never shared: drop it, use theirs.
                // SAFETY: `fresh` came from Box::leak and was never published.
                drop(unsafe { Box::from_raw(fresh) });
                // SAFETY: `winner` is non-null (it replaced `current`) and was
                // leaked, so it is valid for 'static.
                let slot = unsafe { &*winner };
                debug_assert_eq!(slot.pid, pid);
                &slot.value
            }
        }
    }
}
