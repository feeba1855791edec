//! Starting a process the way glibc's `posix_spawn` does — `clone` with
//! `CLONE_VM | CLONE_VFORK`, so the host's page tables are never copied —
//! but with `CLONE_PIDFD`, so the pidfd is born with the process. A pidfd
//! opened afterwards can miss a child that a host reaped first (one that
//! ignores SIGCHLD, or reaps with `waitpid(-1)`), and the command would be
//! reported as never started although it ran. Doing the child's steps here
//! also needs nothing newer than glibc's `clone` (no `posix_spawn`
//! extensions of glibc 2.26–2.34).
//!
//! The child shares our memory until it execs. It runs only
//! async-signal-safe system calls on a stack of its own, touches nothing
//! but the [`Plan`] prepared for it, never allocates, and leaves by
//! `execve` or `_exit`. While it runs, the parent thread is suspended
//! (CLONE_VFORK) with every signal blocked, so no handler of the host can
//! run on either side of the shared memory.

use std::ffi::{c_int, c_void, CStr, CString};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::ptr;

/// The child's stack. The child calls a handful of libc wrappers; glibc's
/// own `posix_spawn` uses a stack of about this size.
const CHILD_STACK: usize = 64 * 1024;

/// Which step of the child failed (for a debugger: the caller needs only
/// the errno, and names the workdir itself when that is the cause).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
enum Step {
    None = 0,
    Session,
    Stdio,
    Workdir,
    Exec,
}

/// Everything the child needs, built before `clone`. The child writes only
/// `failed` and `errno`.
#[repr(C)]
struct Plan {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    workdir: *const libc::c_char,
    /// Dup'ed onto 0, 1, 2; -1 for stdin means `/dev/null`. Each is ≥ 3.
    stdio: [RawFd; 3],
    failed: Step,
    errno: c_int,
}

/// The kernel's `struct sigaction` for `rt_sigaction`: SIG_DFL, no flags.
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// Runs in the child, called by glibc's `clone` with the `arg` that
/// `clone_exec` passed it.
///
/// # Safety
///
/// `arg` must point to a [`Plan`] whose pointers are valid C strings and
/// NULL-terminated arrays of them, and which stays valid and untouched by
/// anyone else until this process execs or exits: true of `clone_exec`'s
/// plan, because CLONE_VFORK suspends the parent thread that owns it until
/// then. Must run only as the child of `clone(CLONE_VM | CLONE_VFORK)`
/// with every signal blocked (it replaces this process's dispositions,
/// session and descriptors, and never returns).
unsafe extern "C" fn child(arg: *mut c_void) -> c_int {
    let plan = arg.cast::<Plan>();
    // SAFETY: `plan` is valid and ours alone (the contract above), so its
    // reads and the two writes in `fail` race with nothing; the C strings
    // and arrays it points to are valid for `chdir` and `execve`. Only raw
    // system calls and async-signal-safe libc wrappers are used, and
    // nothing allocates, because the memory (heap locks included) is the
    // suspended parent's. errno lives in TLS shared with that parent
    // thread, so `fail` reads it right after the failing call.
    // `KernelSigaction` is the kernel's `struct sigaction` (handler, flags,
    // restorer, mask) and its sigset is the 8 bytes passed as the size to
    // `rt_sigaction` and `rt_sigprocmask`.
    unsafe {
        let fail = |step: Step| -> ! {
            (*plan).errno = *libc::__errno_location();
            (*plan).failed = step;
            libc::_exit(127)
        };
        // Default dispositions for every signal, through the raw call so
        // glibc's internal ones (32, 33) are included: a host that ignores
        // SIGPIPE (Node, Python) must not pass that on, and no handler of
        // the host may run here once signals are unblocked below.
        let default = KernelSigaction {
            handler: libc::SIG_DFL,
            flags: 0,
            restorer: 0,
            mask: 0,
        };
        for sig in 1..=64 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    &default,
                    ptr::null_mut::<c_void>(),
                    8,
                );
            }
        }
        // A session of its own: a process group to signal as a whole, and
        // no controlling terminal (a /dev/tty read fails instead of stopping).
        if libc::setsid() < 0 {
            fail(Step::Session);
        }
        let [stdin, stdout, stderr] = (*plan).stdio;
        if stdin < 0 {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
            if null < 0 {
                fail(Step::Stdio);
            }
            if null != 0 {
                if libc::dup2(null, 0) < 0 {
                    fail(Step::Stdio);
                }
                libc::close(null);
            }
        } else if libc::dup2(stdin, 0) < 0 {
            fail(Step::Stdio);
        }
        if libc::dup2(stdout, 1) < 0 || libc::dup2(stderr, 2) < 0 {
            fail(Step::Stdio);
        }
        if libc::chdir((*plan).workdir) < 0 {
            fail(Step::Workdir);
        }
        // Every other descriptor of the host, CLOEXEC or not, stays out.
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) < 0 {
            let mut limit: libc::rlimit = std::mem::zeroed();
            let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
                limit.rlim_cur.min(1 << 20) as c_int
            } else {
                1024
            };
            for fd in 3..max {
                libc::close(fd);
            }
        }
        let empty: u64 = 0;
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &empty,
            ptr::null_mut::<c_void>(),
            8,
        );
        libc::execve((*plan).path, (*plan).argv, (*plan).envp);
        fail(Step::Exec)
    }
}

extern "C" {
    /// glibc's `clone(3)`, declared here rather than taken from `libc` so
    /// that the callback is an `unsafe fn`: `child` is sound only for the
    /// `Plan` passed with it, and glibc calls it with exactly that `arg`.
    #[link_name = "clone"]
    fn clone_calling_unsafe_fn(
        callback: unsafe extern "C" fn(*mut c_void) -> c_int,
        stack: *mut c_void,
        flags: c_int,
        arg: *mut c_void,
        ...
    ) -> c_int;
}

/// A started process: its pid and the pidfd born with it.
pub(crate) struct Child {
    pub pid: libc::pid_t,
    pub pidfd: OwnedFd,
}

/// Starts `path` with `argv` and `envp` in `workdir` as described above,
/// with `stdio` on 0, 1 and 2 (`None` for stdin: `/dev/null`).
pub(crate) fn clone_exec(
    path: &CStr,
    argv: &[&CStr],
    envp: &[CString],
    workdir: &CStr,
    stdio: [Option<RawFd>; 3],
) -> io::Result<Child> {
    let argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).chain([ptr::null()]).collect();
    let envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).chain([ptr::null()]).collect();
    let mut plan = Plan {
        path: path.as_ptr(),
        argv: argv_ptrs.as_ptr(),
        envp: envp_ptrs.as_ptr(),
        workdir: workdir.as_ptr(),
        stdio: stdio.map(|fd| fd.unwrap_or(-1)),
        failed: Step::None,
        errno: 0,
    };
    let mut stack = vec![0u8; CHILD_STACK];
    // The stack grows down from a 16-byte aligned top.
    let top = ((stack.as_mut_ptr() as usize + CHILD_STACK) & !15) as *mut c_void;
    let mut pidfd: c_int = -1;
    let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD;
    // SAFETY: blocking every signal of this thread around the clone (and
    // restoring the old mask after) keeps host handlers out of the shared
    // memory; `child` is sound for `plan` (see its # Safety); `stack`,
    // `plan` and the pointer arrays outlive the child's use of them because
    // CLONE_VFORK returns only after it has exec'd or exited; the kernel
    // writes the pidfd to `pidfd` (CLONE_PIDFD's parent_tid argument).
    let (pid, clone_errno) = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = clone_calling_unsafe_fn(
            child,
            top,
            flags,
            (&mut plan as *mut Plan).cast::<c_void>(),
            &mut pidfd as *mut c_int,
        );
        let clone_errno = *libc::__errno_location();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, ptr::null_mut());
        (pid, clone_errno)
    };
    drop(stack);
    if pid < 0 {
        return Err(io::Error::from_raw_os_error(clone_errno));
    }
    // SAFETY: with CLONE_PIDFD the kernel returned a fresh close-on-exec
    // pidfd for the child in `pidfd`, now ours.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    if plan.failed != Step::None {
        // The child has exited (it never reached its program): reap it. If
        // the host reaped it first, there is nothing left to do.
        let _ = crate::spawn::reap(&pidfd);
        return Err(io::Error::from_raw_os_error(plan.errno));
    }
    Ok(Child { pid, pidfd })
}
