//! Starting the supervisor (`supervisor.rs`) the way glibc's `posix_spawn`
//! starts a process — `clone` with `CLONE_VM | CLONE_VFORK`, so a large
//! host's page tables are never copied — with `CLONE_PIDFD`, so the pidfd is
//! born with the process. It is an ordinary child of the host (a host that
//! reaps every child with `waitpid(-1)` may take its status when it ends,
//! which is harmless: the pidfd still says that it ended).
//!
//! The child shares our memory until it execs. It runs only
//! async-signal-safe system calls on a stack of its own, touches nothing
//! but the [`Plan`] prepared for it, never allocates, and leaves by
//! `execveat` or `_exit`. While it runs, the parent thread is suspended
//! (CLONE_VFORK) with every signal blocked, so no handler of the host can
//! run on either side of the shared memory.

use std::ffi::{c_int, c_void, CStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;

/// The child's stack. The child calls a handful of libc wrappers; glibc's
/// own `posix_spawn` uses a stack of about this size.
const CHILD_STACK: usize = 64 * 1024;

/// Which step of the child failed (for a debugger: the caller needs only
/// the errno).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
enum Step {
    None = 0,
    Session,
    Stdio,
    Exec,
}

/// The descriptor the program gets as fd 3, and the one it is executed
/// from (fd 4 in the child, close-on-exec). Both are ≥ 5 in the parent
/// (see [`above`]), so no `dup2` in the child clobbers the other.
const PASSED: RawFd = 3;
const PROGRAM: RawFd = 4;

/// Everything the child needs, built before `clone`. The child writes only
/// `failed` and `errno`.
#[repr(C)]
struct Plan {
    /// The program, an executable memfd (≥ 5).
    program: RawFd,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    /// Becomes fd 3 of the program (≥ 5).
    passed: RawFd,
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
/// `clone_exec_fd` passed it.
///
/// # Safety
///
/// `arg` must point to a [`Plan`] whose pointers are valid C strings and
/// NULL-terminated arrays of them, and which stays valid and untouched by
/// anyone else until this process execs or exits: true of `clone_exec_fd`'s
/// plan, because CLONE_VFORK suspends the parent thread that owns it until
/// then. Must run only as the child of `clone(CLONE_VM | CLONE_VFORK)`
/// with every signal blocked (it replaces this process's dispositions,
/// session and descriptors, and never returns).
unsafe extern "C" fn child(arg: *mut c_void) -> c_int {
    let plan = arg.cast::<Plan>();
    // SAFETY: `plan` is valid and ours alone (the contract above), so its
    // reads and the two writes in `fail` race with nothing; the C strings
    // and arrays it points to are valid for `execveat`. Only raw
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
        // SIGPIPE (Node, Python) must not pass that on (the supervisor and
        // the commands it starts begin from defaults), and no handler of
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
        // A session of its own: the host's terminal signals (Ctrl-C, a
        // hang-up) do not reach it; it learns of the host's death itself.
        if libc::setsid() < 0 {
            fail(Step::Session);
        }
        // /dev/null on 0, 1 and 2: it holds none of the host's pipes or
        // terminals open after the host is gone.
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null < 0 {
            fail(Step::Stdio);
        }
        for fd in 0..3 {
            if null != fd && libc::dup2(null, fd) < 0 {
                fail(Step::Stdio);
            }
        }
        if null > 2 {
            libc::close(null);
        }
        // dup2 clears close-on-exec: the program keeps fd 3; fd 4 is closed
        // by the exec itself.
        if libc::dup2((*plan).passed, PASSED) < 0
            || libc::dup2((*plan).program, PROGRAM) < 0
            || libc::fcntl(PROGRAM, libc::F_SETFD, libc::FD_CLOEXEC) < 0
        {
            fail(Step::Stdio);
        }
        // Every other descriptor of the host, CLOEXEC or not, stays out.
        if libc::syscall(libc::SYS_close_range, (PROGRAM + 1) as u32, u32::MAX, 0u32) < 0 {
            let mut limit: libc::rlimit = std::mem::zeroed();
            let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
                limit.rlim_cur.min(1 << 20) as c_int
            } else {
                1024
            };
            for fd in PROGRAM + 1..max {
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
        libc::syscall(
            libc::SYS_execveat,
            PROGRAM,
            c"".as_ptr(),
            (*plan).argv,
            (*plan).envp,
            libc::AT_EMPTY_PATH,
        );
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

/// `fd` itself when it is ≥ 5, else a close-on-exec duplicate that is.
fn above(fd: RawFd) -> io::Result<Option<OwnedFd>> {
    if fd >= 5 {
        return Ok(None);
    }
    // SAFETY: F_DUPFD_CLOEXEC takes integers and makes a new descriptor.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 5) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the fcntl succeeded, so `new` is a fresh descriptor, ours alone.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(new) }))
}

/// Starts the executable in `program` (an fd, run with `execveat`) with
/// `argv` and `envp`, in a session of its own, with `/dev/null` on 0, 1
/// and 2, `passed` on fd 3 and no other descriptor, default signal
/// dispositions and an empty mask.
pub(crate) fn clone_exec_fd(
    program: RawFd,
    argv: &[&CStr],
    envp: &[&CStr],
    passed: RawFd,
) -> io::Result<Child> {
    let program_dup = above(program)?;
    let passed_dup = above(passed)?;
    let argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).chain([ptr::null()]).collect();
    let envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).chain([ptr::null()]).collect();
    let mut plan = Plan {
        program: program_dup.as_ref().map_or(program, |fd| fd.as_raw_fd()),
        argv: argv_ptrs.as_ptr(),
        envp: envp_ptrs.as_ptr(),
        passed: passed_dup.as_ref().map_or(passed, |fd| fd.as_raw_fd()),
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
    let pidfd = crate::sys::prefer_above_stdio(unsafe { OwnedFd::from_raw_fd(pidfd) });
    if plan.failed != Step::None {
        // The child has exited (it never reached its program): reap it (if
        // the host's own reaper took it first, there is nothing to do).
        let mut info = std::mem::MaybeUninit::<libc::siginfo_t>::zeroed();
        // SAFETY: `info` is a valid siginfo_t buffer; P_PIDFD takes the fd.
        unsafe {
            libc::waitid(
                libc::P_PIDFD,
                pidfd.as_raw_fd() as libc::id_t,
                info.as_mut_ptr(),
                libc::WEXITED,
            )
        };
        return Err(io::Error::from_raw_os_error(plan.errno));
    }
    Ok(Child { pid, pidfd })
}
