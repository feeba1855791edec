/*
 * dsh-supervisor: the parent of every command of one dsh executor.
 *
 * The library embeds this program (core/build.rs compiles it, the library
 * carries the bytes) and starts it from a memfd, once per executor, on the
 * first command. It is a child subreaper, so every process its commands
 * start stays in its subtree: a descendant orphaned by its parent's exit
 * is re-parented here, not to init. When the host dies — SIGKILL, a crash,
 * an exit without dispose, an exec — it kills that whole subtree and
 * exits. docs/host-death.md describes the design; the host side is
 * core/src/launch/supervisor.rs.
 *
 *   argv: dsh-supervisor HOST_PID [GROUP_DIR...]   fd 3: the control socket
 *         dsh-supervisor probe-mounts DIR            fd 3: where the answer goes
 *   (the second form only probes what mounts.h does, and exits)
 *   GROUP_DIRs are where the host makes its commands' cgroups
 *   (dsh.<our pid>.<n>); what is left of ours there is removed when we end.
 *
 * How it learns that the host died (either is enough):
 *   - the control socket reaches end of file (the host's end closed: its
 *     process exited or exec'd), or
 *   - SIGCONT with a new parent: SIGCONT is its parent-death signal, sent
 *     when the host thread that started it ends, which happens only when
 *     the host process ends (that thread lives as long as the process).
 *     This covers a host that forked a child which still holds a copy of
 *     the control socket, and a supervisor that a command stopped (a
 *     SIGCONT resumes it; a SIGTERM would wait behind the stop).
 * SIGTERM, SIGINT, SIGHUP and SIGQUIT from anyone mean the same; a SIGCONT
 * while the host is still our parent (the host continuing us) does not.
 * It is not dumpable, so a command of the same user without
 * CAP_SYS_PTRACE cannot attach to it.
 *
 * Protocol (host -> supervisor on the control socket, SOCK_SEQPACKET):
 *   struct request { op, flags }
 *   RELEASES fd (SCM_RIGHTS): the read end of the executor's release pipe
 *            (non-blocking; sent once, first): the host writes a leader's
 *            pid (a native-endian int32) there to release it.
 *   SPAWN    fds (SCM_RIGHTS): the write end of the command's report pipe,
 *            [a memfd holding the program unless FLAG_INLINE], stdout,
 *            stderr, [stdin if FLAG_STDIN], [Landlock ruleset if FLAG_RULESET;
 *            FLAG_SCOPE_ONLY: it only scopes signals],
 *            [cgroup.procs if FLAG_CGROUP1], [cgroup.procs if FLAG_CGROUP2],
 *            [a cgroup v2 directory if FLAG_CGROUP_INTO: the command is
 *            born in it (clone3 with CLONE_INTO_CGROUP)], [a pipe's write
 *            end if FLAG_PID_PIPE: the leader's pid once it has exec'd]
 *            The program: struct payload { argc, envc, len } and `len`
 *            bytes: struct limits if FLAG_RLIMITS, a seccomp filter if
 *            FLAG_SECCOMP (u32 count, u32 pad, count BPF instructions),
 *            the writable directories if FLAG_MOUNTS (u32 count, u32 pad,
 *            count NUL-terminated paths; mounts.h),
 *            then NUL-terminated path, workdir, argv[argc], envp[envc].
 *            With FLAG_INLINE it follows the request in the same message
 *            (one wake-up here per command); a larger one comes in a memfd.
 *            No unix socket ever travels: one in flight makes every later
 *            close of a unix socket, anywhere, schedule the kernel's unix
 *            garbage collector (a kernel worker that preempts us).
 *            FLAG_TERMINAL (with FLAG_STDIN): stdin is a pseudo-terminal's
 *            slave, which the child makes its controlling terminal
 *            (TIOCSCTTY) right after setsid: a terminal session.
 *            The replies go back on the report pipe: SPAWNED(pid) or
 *            FAILED(step, errno, detail); later EXITED(si_code, si_status) when the
 *            leader has exited (it stays an unreaped zombie, so its pid and
 *            process group id cannot be reused), until the host writes its
 *            pid on the release pipe or closes its end of the report pipe
 *            (a forked copy of the host may keep that open, hence the
 *            pid); then the leader is reaped, and only then is its report
 *            pipe closed: the end of file there tells the host that the pid
 *            is free, so a settled run has reaped its command. The release
 *            pipe wakes the supervisor; the report pipes of exited leaders
 *            are checked whenever it wakes anyway, and at least once a
 *            second while any leader awaits its release.
 *            FLAG_DEFER_SPAWNED: SPAWNED is held back, and sent just before
 *            EXITED or once the command has run DEFER_MS, whichever comes
 *            first: a short command costs one wake-up of the host, not two,
 *            and no write to the host between its exec and its first
 *            instructions. A failure is still reported at once.
 *            FLAG_REAP_EMPTY: a leader that exits with a code (not a
 *            signal) while its SPAWNED is still held back (and the pid it
 *            wrote on a pid pipe is still unread there), leaving no
 *            adopted orphan behind, is reaped before its exit is reported,
 *            and its report pipe closed right after: nothing was told its
 *            pid, and its tree is empty for good, so nothing needs the pid
 *            held. EXITED's `c` is then 1; no release follows (none may:
 *            the pid may be reused). A pid pipe keeps the pid for whoever
 *            reads it later.
 *   SHUTDOWN the executor is disposed: kill the subtree and exit.
 *
 * Adopted orphans are reaped as soon as they die; leaders only on release
 * (or at their exit, under FLAG_REAP_EMPTY).
 * Both are ordinary children (exec gives every process SIGCHLD as its exit
 * signal), so the orphan reaper peeks at the next zombie (WNOWAIT) and
 * stops at a leader: the zombies queued behind a held leader are reaped
 * once it is released, a few milliseconds (at most a grace period) later.
 *
 * Only what glibc 2.17 has is used (newer system calls go through
 * syscall(2)), so it builds wherever the library builds.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <poll.h>
#include <sys/socket.h>
#include <linux/filter.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <linux/magic.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif
#ifndef __WALL
#define __WALL 0x40000000
#endif
#ifndef PR_SET_CHILD_SUBREAPER
#define PR_SET_CHILD_SUBREAPER 36
#endif
#ifndef PR_SET_NO_NEW_PRIVS
#define PR_SET_NO_NEW_PRIVS 38
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif
#ifndef SYS_seccomp
#define SYS_seccomp 317
#endif
#ifndef SECCOMP_SET_MODE_FILTER
#define SECCOMP_SET_MODE_FILTER 1
#endif

/* Every code and size of the wire format, from core/src/launch/wire_codes.rs
 * (core/build.rs writes it): OP_*, FLAG_*, R_*, STEP_*, LIMIT_*, MAX_FDS,
 * MAX_INLINE, DEFER_MS and the *_SIZE of the structs below. */
#include "wire.h"
#include "mounts.h"

struct request {
    uint32_t op, flags;
};

struct payload {
    uint32_t argc, envc;
    uint64_t len;
};

struct reply {
    int32_t kind, a, b, c;
};

/* Resource limits a command sets before exec; bit i of `set` marks
 * field i. CPU: SIGXCPU at the limit, SIGKILL a second later. */
struct limits {
    uint32_t set, pad;
    uint64_t cpu, fsize, nofile;
};
_Static_assert(sizeof(struct request) == REQUEST_SIZE, "struct request as wire_codes.rs says");
_Static_assert(sizeof(struct payload) == PAYLOAD_SIZE, "struct payload as wire_codes.rs says");
_Static_assert(sizeof(struct reply) == REPLY_SIZE, "struct reply as wire_codes.rs says");
_Static_assert(sizeof(struct limits) == LIMITS_SIZE, "struct limits as wire_codes.rs says");
#define MAX_FILTER 4096

#define CONTROL 3
#define MAX_PAYLOAD (256u << 20)

/* One running command: its leader (a child of ours, kept unreaped until
 * released) and the write end of its report pipe to the host. */
struct command {
    pid_t pid;
    int pidfd, report;
    int exited, released;
    /* FLAG_DEFER_SPAWNED: SPAWNED not sent yet; due at `spawned_due`. */
    int spawned_deferred;
    /* FLAG_REAP_EMPTY. */
    int reap_empty;
    /* The write end of its pid pipe (FLAG_PID_PIPE) until its exit, to see
     * there whether the host has read the pid yet; -1 without one. */
    int pid_pipe;
    struct timespec spawned_due;
    struct command *prev, *next; /* every command not yet reaped */
};

static struct command *commands;

static struct command *leader(pid_t pid) {
    for (struct command *c = commands; c; c = c->next) {
        if (c->pid == pid) return c;
    }
    return NULL;
}

/* Reaps dead orphans, stopping at the first zombie that is a leader. */
static void reap_orphans(void) {
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0) return;
        if (leader(si.si_pid)) return;
        waitid(P_PID, (id_t)si.si_pid, &si, WEXITED | WNOHANG);
    }
}

/* What an epoll event points at. */
enum { W_CONTROL = 1, W_SIGNALS, W_EXIT, W_RELEASES };
struct watch {
    int kind;
    struct command *cmd;
};

/* One allocation per command: the command first, so that freeing the
 * command frees its watch. A command is freed only once its exit has
 * been handled (its one event), so no event of the batch points at it. */
struct command_alloc {
    struct command cmd;
    struct watch exit_w;
};

static int epfd = -1;
/* The read end of the host's release pipe (RELEASES), or -1. */
static int release_fd = -1;
static char **group_dirs;
static int ngroup_dirs;
static struct rlimit original_nofile;
static int raised_nofile;

static void write_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        /* SIGPIPE is ignored here: a host that closed its end is EPIPE. */
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return; /* the host is gone: nobody to tell */
        p += n;
        len -= (size_t)n;
    }
}

static void send_reply3(int fd, int32_t kind, int32_t a, int32_t b, int32_t c) {
    struct reply r = {kind, a, b, c};
    write_all(fd, &r, sizeof r);
}

static void send_reply(int fd, int32_t kind, int32_t a, int32_t b) {
    send_reply3(fd, kind, a, b, 0);
}

/* Reads `len` bytes at offset 0 of a memfd the host filled. */
static int read_memfd(int fd, char *buf, size_t len) {
    for (off_t at = 0; len > 0;) {
        ssize_t n = pread(fd, buf, len, at);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        buf += n;
        at += n;
        len -= (size_t)n;
    }
    return 0;
}

/* ---- ending the subtree ---------------------------------------------- */

/* /proc as it was when we started (-1: it was not procfs then): a root
 * command that mounts something over /proc does not blind our scans. */
static int proc_dir = -1;

/* Opens `name` (a pid's file, or "." for the directory) in proc_dir, else
 * under /proc. */
static int open_proc(const char *name, int flags) {
    if (proc_dir >= 0) return openat(proc_dir, name, flags | O_CLOEXEC);
    char path[64];
    snprintf(path, sizeof path, "/proc/%s", name);
    return open(path, flags | O_CLOEXEC);
}

/* The parent pid and state in /proc/PID/stat; -1 when unreadable. */
static pid_t parent_of(pid_t pid, char *state) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "%d/stat", (int)pid);
    int fd = open_proc(path, O_RDONLY);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *close_paren = strrchr(buf, ')');
    if (!close_paren) return -1;
    char st;
    int ppid;
    if (sscanf(close_paren + 1, " %c %d", &st, &ppid) != 2) return -1;
    if (state) *state = st;
    return (pid_t)ppid;
}

struct proc {
    pid_t pid, ppid;
    int mine;
};

/* SIGKILLs every live process of our subtree, found by parent pid from a
 * scan of /proc. Our own children are killed by pid (unreaped, so their
 * pids cannot have been reused); deeper ones are pinned with a pidfd and
 * re-checked first. Returns how many it signalled. */
static int kill_subtree(void) {
    pid_t self = getpid();
    int dir = open_proc(".", O_RDONLY | O_DIRECTORY);
    DIR *d = dir >= 0 ? fdopendir(dir) : NULL;
    if (!d) {
        if (dir >= 0) close(dir);
        return 0;
    }
    size_t n = 0, cap = 256;
    struct proc *ps = malloc(cap * sizeof *ps);
    struct dirent *e;
    while (ps && (e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0 || pid == self) continue;
        char state = 0;
        pid_t ppid = parent_of((pid_t)pid, &state);
        if (ppid < 0 || state == 'Z' || state == 'X') continue;
        if (n == cap) {
            struct proc *grown = realloc(ps, 2 * cap * sizeof *ps);
            if (!grown) break;
            ps = grown;
            cap *= 2;
        }
        ps[n].pid = (pid_t)pid;
        ps[n].ppid = ppid;
        ps[n].mine = ppid == self;
        n++;
    }
    closedir(d);
    if (!ps) return 0;
    /* Descendants of our children, to a fixed point (a tree of depth D
     * takes D passes). */
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t i = 0; i < n; i++) {
            if (ps[i].mine) continue;
            for (size_t j = 0; j < n; j++) {
                if (ps[j].mine && ps[j].pid == ps[i].ppid) {
                    ps[i].mine = 2;
                    changed = 1;
                    break;
                }
            }
        }
    }
    int hit = 0;
    for (size_t i = 0; i < n; i++) {
        if (ps[i].mine == 1) {
            if (kill(ps[i].pid, SIGKILL) == 0) hit++;
        } else if (ps[i].mine == 2) {
            int fd = (int)syscall(SYS_pidfd_open, ps[i].pid, 0);
            if (fd < 0) continue;
            pid_t now = parent_of(ps[i].pid, NULL);
            int still = now == self;
            for (size_t j = 0; !still && j < n; j++) {
                still = ps[j].mine && ps[j].pid == now;
            }
            if (still && syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0) == 0) hit++;
            close(fd);
        }
    }
    free(ps);
    return hit;
}

static void reap_everything_dead(void) {
    siginfo_t si;
    for (;;) {
        memset(&si, 0, sizeof si);
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | __WALL) < 0 || si.si_pid == 0) return;
    }
}

/* Removes what is left of our commands' cgroups (dsh.<our pid>.<n> in
 * each group directory): called when our subtree has ended, so they are
 * empty. */
static void remove_groups(void) {
    char prefix[32];
    int len = snprintf(prefix, sizeof prefix, "dsh.%d.", (int)getpid());
    for (int i = 0; i < ngroup_dirs; i++) {
        DIR *d = opendir(group_dirs[i]);
        if (!d) continue;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strncmp(e->d_name, prefix, (size_t)len) == 0) unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
        }
        closedir(d);
    }
}

/* Ends the whole subtree (leaders included) and exits: repeats until no
 * scan finds anyone and no child is left, so a fork loop or an orphan
 * re-parented here meanwhile is caught by the next pass. */
static void end_everything(void) {
    for (;;) {
        reap_everything_dead();
        int hit = kill_subtree();
        siginfo_t si;
        memset(&si, 0, sizeof si);
        int r = waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT | __WALL);
        if (r < 0 && errno == ECHILD && hit == 0) break;
        if (r < 0 || si.si_pid == 0) {
            /* Killed, not yet dead (or re-parented to us meanwhile): give
             * them a millisecond before the next pass. */
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
    }
    remove_groups();
    _exit(0);
}

/* ---- starting a command ---------------------------------------------- */

struct plan {
    const char *path, *workdir;
    char *const *argv;
    char *const *envp;
    int stdio[3]; /* stdin may be -1: /dev/null */
    int ruleset;  /* -1: unconfined */
    int scope_only; /* the ruleset only scopes signals */
    int groups[2]; /* cgroup.procs to enter, or -1 */
    int enter_v2;  /* a v2 group to enter by its cgroup.procs (clone3 was refused), or -1 */
    const struct limits *limits;       /* NULL: none */
    const struct sock_fprog *filter;   /* NULL: none */
    const struct mounts *mounts;       /* NULL: the host's file system as it is */
    int terminal; /* fd 0 becomes the controlling terminal */
    pid_t supervisor; /* our pid, the child's parent */
    struct outcome *outcome; /* where a failed start says why */
};

/* Which step of a start failed, and how: written by the child, read here
 * once it has exec'd or exited. In a page shared with every child (see
 * `shared_outcome`), as one in a user namespace has memory of its own. */
struct outcome {
    int step, err, detail;
};

/* The shared page, made once (MAP_SHARED survives the copy of a clone
 * without CLONE_VM); NULL if it cannot be made. */
static struct outcome *shared_outcome(void) {
    static struct outcome *page;
    if (!page) {
        void *m = mmap(NULL, sizeof *page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        page = m == MAP_FAILED ? NULL : m;
    }
    return page;
}

/* Runs in the child of clone(CLONE_VFORK), with CLONE_VM unless it enters a
 * user namespace (mounts.h: it must then make itself dumpable, which a
 * shared memory would make us too): we are suspended until it execs or
 * exits, it touches only `plan` and its outcome, calls only
 * async-signal-safe functions, and never returns. */
static int child(void *arg) {
    struct plan *p = arg;
#define FAIL(s)                 \
    do {                        \
        p->outcome->err = errno; \
        p->outcome->step = (s);  \
        _exit(127);             \
    } while (0)
    /* The leader dies with us: killed while it starts (before its pid
     * reached the host, which then cannot find it by its tag until it
     * execs), it must not go on to run unseen. Checked after arming, as we
     * may be gone already. It stays armed across exec: whenever we die, the
     * leader gets SIGKILL at once, with no TERM and no grace (nobody is left
     * to report its end anyway). */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) FAIL(STEP_SESSION);
    if (getppid() != p->supervisor) _exit(127);
    /* The one disposition we changed; everything else is the default. */
    signal(SIGPIPE, SIG_DFL);
    if (setsid() < 0) FAIL(STEP_SESSION);
    /* Our own cgroups first: from here on every page and every process of
     * the command counts. */
    int entered = 0;
    for (int i = 0; i < 2; i++) {
        if (p->groups[i] < 0) continue;
        if (write(p->groups[i], "0", 1) != 1) {
            p->outcome->detail = LIMIT_GROUP + entered;
            FAIL(STEP_LIMITS);
        }
        entered++;
    }
    if (p->enter_v2 >= 0) {
        int procs = openat(p->enter_v2, "cgroup.procs", O_WRONLY | O_CLOEXEC);
        if (procs < 0 || write(procs, "0", 1) != 1) {
            p->outcome->detail = LIMIT_GROUP + entered;
            FAIL(STEP_LIMITS);
        }
        close(procs);
    }
    if (p->mounts) {
        int step = enter_read_only_mounts(p->mounts);
        if (step != 0) {
            p->outcome->detail = step;
            FAIL(STEP_MOUNTS);
        }
        /* Entering a user namespace is a change of credentials: the
         * parent-death signal is armed again, and checked again. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) FAIL(STEP_SESSION);
        if (getppid() != p->supervisor) _exit(127);
    }
    if (p->stdio[0] < 0) {
        int null = open("/dev/null", O_RDONLY);
        if (null < 0) FAIL(STEP_STDIO);
        if (null != 0) {
            if (dup2(null, 0) < 0) FAIL(STEP_STDIO);
            close(null);
        }
    } else if (dup2(p->stdio[0], 0) < 0) {
        FAIL(STEP_STDIO);
    }
    if (dup2(p->stdio[1], 1) < 0 || dup2(p->stdio[2], 2) < 0) FAIL(STEP_STDIO);
    /* A new session has no controlling terminal: the first terminal its
     * leader asks for becomes it. */
    if (p->terminal && ioctl(0, TIOCSCTTY, 0) < 0) FAIL(STEP_TERMINAL);
    if (chdir(p->workdir) < 0) FAIL(STEP_WORKDIR);
    if (p->ruleset >= 0) {
        /* Landlock: the domain is the child's, inherited by everything it
         * starts; we stay unconfined, and out of its signals' reach. A
         * domain that only scopes signals needs no_new_privs only where the
         * child lacks CAP_SYS_ADMIN (the kernel's rule): tried without it
         * first, so a root host's setuid programs keep working. */
        int restricted = p->scope_only && syscall(SYS_landlock_restrict_self, p->ruleset, 0) == 0;
        if (!restricted) {
            if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) FAIL(STEP_CONFINE);
            if (syscall(SYS_landlock_restrict_self, p->ruleset, 0) != 0) FAIL(STEP_CONFINE);
        }
    }
    if (raised_nofile) setrlimit(RLIMIT_NOFILE, &original_nofile);
    if (p->limits) {
        const struct limits *l = p->limits;
        if (l->set & 1) {
            struct rlimit r = {(rlim_t)l->cpu, (rlim_t)l->cpu + 1};
            if (setrlimit(RLIMIT_CPU, &r) != 0) {
                /* A hard limit we may not raise: SIGKILL at the limit. */
                r.rlim_max = r.rlim_cur;
                if (setrlimit(RLIMIT_CPU, &r) != 0) {
                    p->outcome->detail = LIMIT_CPU;
                    FAIL(STEP_LIMITS);
                }
            }
        }
        if (l->set & 2) {
            struct rlimit r = {(rlim_t)l->fsize, (rlim_t)l->fsize};
            if (setrlimit(RLIMIT_FSIZE, &r) != 0) {
                p->outcome->detail = LIMIT_FSIZE;
                FAIL(STEP_LIMITS);
            }
        }
        if (l->set & 4) {
            struct rlimit r = {(rlim_t)l->nofile, (rlim_t)l->nofile};
            if (setrlimit(RLIMIT_NOFILE, &r) != 0) {
                p->outcome->detail = LIMIT_NOFILE;
                FAIL(STEP_LIMITS);
            }
        }
    }
    if (p->filter) {
        /* The network filter: installed last before exec, after
         * no_new_privs, so it cannot be shed by a setuid program. */
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) FAIL(STEP_NETWORK);
        if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, p->filter) != 0) FAIL(STEP_NETWORK);
    }
    if (syscall(SYS_close_range, 3u, ~0u, 0u) < 0) {
        for (int fd = 3; fd < 65536; fd++) close(fd);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(p->path, p->argv, p->envp);
    FAIL(STEP_EXEC);
#undef FAIL
}

static char child_stack[64 * 1024] __attribute__((aligned(16)));

/* The kernel's struct clone_args (CLONE_ARGS_SIZE_VER2). */
struct clone3_args {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size,
        cgroup;
};
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#define INTO_CGROUP 0x200000000ULL

static pid_t clone3_into(struct plan *plan, int into, int *pidfd);

/* Starts `child(plan)`, suspended until it execs or exits (CLONE_VFORK),
 * with a pidfd born with it. It shares our memory (CLONE_VM, the cheapest)
 * unless it enters a user namespace (mounts.h) or is born in the cgroup v2
 * directory `into` (>= 0): clone3 with CLONE_INTO_CGROUP, so it never
 * migrates there (a migration waits for the kernel's cgroup lock). That
 * child runs on a copy of our stack, as after fork. Where clone3 or the
 * flag is refused (a container's seccomp profile makes clone3 ENOSYS; a
 * kernel before 5.7), the child writes itself into the group instead. */
static pid_t start_child(struct plan *plan, int into, int *pidfd) {
    plan->enter_v2 = -1;
    if (into >= 0) {
        pid_t pid = clone3_into(plan, into, pidfd);
        if (pid >= 0 || !(errno == ENOSYS || errno == EINVAL || errno == E2BIG || errno == EPERM)) return pid;
        plan->enter_v2 = into;
    }
    int shared = plan->mounts && plan->mounts->user ? 0 : CLONE_VM;
    return clone(child, child_stack + sizeof child_stack, shared | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, plan, pidfd);
}

static pid_t clone3_into(struct plan *plan, int into, int *pidfd) {
    struct clone3_args args;
    memset(&args, 0, sizeof args);
    args.flags = CLONE_VFORK | CLONE_PIDFD | INTO_CGROUP;
    args.pidfd = (uint64_t)(uintptr_t)pidfd;
    args.exit_signal = SIGCHLD;
    args.cgroup = (uint64_t)into;
    long pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid == 0) {
        child(plan); /* exits or execs */
        _exit(127);
    }
    return (pid_t)pid;
}

static void watch_fd(int fd, struct watch *w) {
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = w};
    epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

/* Reaps the exited child behind `pidfd`; 0 once it is reaped. */
static int reap(int pidfd) {
    siginfo_t si;
    int r;
    while ((r = waitid(P_PIDFD, (id_t)pidfd, &si, WEXITED | __WALL)) < 0 && errno == EINTR) {
    }
    return r;
}

/* Frees a command whose leader is reaped, and reaps the orphans its hold
 * kept waiting. */
static void forget(struct command *c) {
    close(c->pidfd);
    close(c->report);
    if (c->prev) c->prev->next = c->next;
    else commands = c->next;
    if (c->next) c->next->prev = c->prev;
    free(c); /* the start of its struct command_alloc */
    reap_orphans();
}

/* A command is freed once its leader has exited and the host released
 * it: the leader is reaped here, and no sooner (but see FLAG_REAP_EMPTY). */
static void maybe_finish(struct command *c) {
    if (!(c->exited && c->released)) return;
    reap(c->pidfd);
    forget(c);
}

/* `inline_bytes` holds what followed the request in its message. */
static void on_spawn(const struct request *req, int *fds, int nfds, const char *inline_bytes, size_t inline_len) {
    int is_inline = !!(req->flags & FLAG_INLINE);
    int want = 3 + !is_inline + !!(req->flags & FLAG_STDIN) + !!(req->flags & FLAG_RULESET) +
               !!(req->flags & FLAG_CGROUP1) + !!(req->flags & FLAG_CGROUP2) + !!(req->flags & FLAG_CGROUP_INTO) +
               !!(req->flags & FLAG_PID_PIPE);
    if (nfds < 1) return;
    int sock = fds[0];
    int memfd = !is_inline && nfds > 1 ? fds[1] : -1;
    struct payload head, *rq = &head;
    int got_head;
    if (is_inline) {
        got_head = inline_len >= sizeof head;
        if (got_head) memcpy(&head, inline_bytes, sizeof head);
    } else {
        got_head = inline_len == 0 && memfd >= 0 && read_memfd(memfd, (char *)&head, sizeof head) == 0;
    }
    /* A host that gave up (no shell on the PATH) closes its end instead. */
    if (nfds != want || !got_head || rq->len > MAX_PAYLOAD ||
        (is_inline && rq->len != inline_len - sizeof head) || rq->argc == 0 || rq->argc > (1u << 20) ||
        rq->envc > (1u << 20)) {
        send_reply(sock, R_FAILED, STEP_REQUEST, EINVAL);
        for (int i = 0; i < nfds; i++) close(fds[i]);
        return;
    }
    int k = 1 + !is_inline;
    int out = fds[k++], err = fds[k++];
    int in = (req->flags & FLAG_STDIN) ? fds[k++] : -1;
    int ruleset = (req->flags & FLAG_RULESET) ? fds[k++] : -1;
    int group1 = (req->flags & FLAG_CGROUP1) ? fds[k++] : -1;
    int group2 = (req->flags & FLAG_CGROUP2) ? fds[k++] : -1;
    int into = (req->flags & FLAG_CGROUP_INTO) ? fds[k++] : -1;
    /* Closed below with the others, unless the command started: then it
     * is written, and kept until the leader's exit (see FLAG_REAP_EMPTY). */
    int pid_pipe_at = (req->flags & FLAG_PID_PIPE) ? k++ : -1;
    int pid_pipe = pid_pipe_at >= 0 ? fds[pid_pipe_at] : -1;
    struct limits limits;
    struct sock_filter *insns = NULL;
    struct sock_fprog filter = {0, NULL};
    memset(&limits, 0, sizeof limits);
    char *payload = malloc(rq->len + 1);
    char **argv = calloc((size_t)rq->argc + 1, sizeof *argv);
    char **envp = calloc((size_t)rq->envc + 1, sizeof *envp);
    struct command_alloc *a = calloc(1, sizeof *a);
    int ok = payload && argv && envp && a;
    if (ok && is_inline) {
        memcpy(payload, inline_bytes + sizeof head, (size_t)rq->len);
    } else if (ok) {
        /* The memfd holds the head, then the payload. */
        char *whole = malloc(sizeof head + rq->len);
        ok = whole && read_memfd(memfd, whole, sizeof head + rq->len) == 0;
        if (ok) memcpy(payload, whole + sizeof head, (size_t)rq->len);
        free(whole);
    }
    /* Split the payload: the limits and the filter its flags announce,
     * then path, workdir, argv..., envp..., each ending in NUL. */
    const char *path = NULL, *workdir = NULL;
    char *s = payload, *end = payload + (ok ? rq->len : 0);
    if (ok && (req->flags & FLAG_RLIMITS)) {
        ok = (size_t)(end - s) >= sizeof limits;
        if (ok) memcpy(&limits, s, sizeof limits), s += sizeof limits;
    }
    if (ok && (req->flags & FLAG_SECCOMP)) {
        uint32_t count = 0;
        ok = (size_t)(end - s) >= 8;
        if (ok) memcpy(&count, s, sizeof count), s += 8;
        ok = ok && count > 0 && count <= MAX_FILTER && (size_t)(end - s) >= count * sizeof *insns;
        if (ok) {
            insns = calloc(count, sizeof *insns);
            ok = insns != NULL;
        }
        if (ok) {
            memcpy(insns, s, count * sizeof *insns);
            s += count * sizeof *insns;
            filter.len = (unsigned short)count;
            filter.filter = insns;
        }
    }
    struct mounts mounts;
    char uid_map[32], gid_map[32];
    memset(&mounts, 0, sizeof mounts);
    if (ok && (req->flags & FLAG_MOUNTS)) {
        uint32_t count = 0;
        ok = (size_t)(end - s) >= 8;
        if (ok) memcpy(&count, s, sizeof count), s += 8;
        ok = ok && count <= MAX_WRITABLE;
        for (uint32_t i = 0; ok && i < count; i++) {
            char *nul = memchr(s, 0, (size_t)(end - s));
            ok = nul != NULL;
            if (ok) mounts.writable[i] = s, s = nul + 1;
        }
        mounts.user = !!(req->flags & FLAG_USER_NS);
        snprintf(uid_map, sizeof uid_map, "%u %u 1", (unsigned)geteuid(), (unsigned)geteuid());
        snprintf(gid_map, sizeof gid_map, "%u %u 1", (unsigned)getegid(), (unsigned)getegid());
        mounts.uid_map = uid_map;
        mounts.gid_map = gid_map;
    }
    if (ok) {
        payload[rq->len] = 0;
        size_t want_strings = 2 + (size_t)rq->argc + rq->envc, got = 0;
        while (ok && got < want_strings) {
            char *nul = memchr(s, 0, (size_t)(end - s));
            if (!nul) {
                ok = 0;
                break;
            }
            if (got == 0) path = s;
            else if (got == 1) workdir = s;
            else if (got < 2 + rq->argc) argv[got - 2] = s;
            else envp[got - 2 - rq->argc] = s;
            got++;
            s = nul + 1;
        }
        ok = ok && s == end;
    }
    if (!ok) {
        send_reply(sock, R_FAILED, STEP_REQUEST, EINVAL);
        close(sock);
        free(a);
    } else {
        int terminal = (req->flags & FLAG_TERMINAL) && in >= 0;
        struct plan plan = {path,
                            workdir,
                            argv,
                            envp,
                            {in, out, err},
                            ruleset,
                            (req->flags & FLAG_SCOPE_ONLY) != 0,
                            {group1, group2},
                            -1,
                            (req->flags & FLAG_RLIMITS) ? &limits : NULL,
                            (req->flags & FLAG_SECCOMP) ? &filter : NULL,
                            (req->flags & FLAG_MOUNTS) ? &mounts : NULL,
                            terminal,
                            getpid(),
                            shared_outcome()};
        int pidfd = -1;
        pid_t pid = -1;
        if (plan.outcome) {
            memset(plan.outcome, 0, sizeof *plan.outcome);
            pid = start_child(&plan, into, &pidfd);
        } else {
            errno = ENOMEM;
        }
        if (pid < 0 && into >= 0 && errno != EAGAIN && errno != ENOMEM && errno != ENOSPC) {
            /* Refused for its v2 group (not for want of a process): the
             * group is the last one the host numbered. */
            send_reply3(sock, R_FAILED, STEP_LIMITS, errno, LIMIT_GROUP + (group1 >= 0) + (group2 >= 0));
            close(sock);
            free(a);
        } else if (pid < 0) {
            send_reply(sock, R_FAILED, STEP_CLONE, errno);
            close(sock);
            free(a);
        } else if (plan.outcome->step != 0) {
            reap(pidfd);
            close(pidfd);
            send_reply3(sock, R_FAILED, plan.outcome->step, plan.outcome->err, plan.outcome->detail);
            close(sock);
            free(a);
        } else {
            a->cmd.pid = pid;
            a->cmd.pidfd = pidfd;
            a->cmd.report = sock;
            a->cmd.next = commands;
            if (commands) commands->prev = &a->cmd;
            commands = &a->cmd;
            a->exit_w.kind = W_EXIT;
            a->exit_w.cmd = &a->cmd;
            if (req->flags & FLAG_DEFER_SPAWNED) {
                a->cmd.spawned_deferred = 1;
                clock_gettime(CLOCK_MONOTONIC, &a->cmd.spawned_due);
                a->cmd.spawned_due.tv_nsec += DEFER_MS * 1000000L;
                if (a->cmd.spawned_due.tv_nsec >= 1000000000L) {
                    a->cmd.spawned_due.tv_sec++;
                    a->cmd.spawned_due.tv_nsec -= 1000000000L;
                }
            } else {
                send_reply(sock, R_SPAWNED, pid, 0);
            }
            a->cmd.reap_empty = !!(req->flags & FLAG_REAP_EMPTY);
            a->cmd.pid_pipe = pid_pipe;
            if (pid_pipe >= 0) {
                /* Four bytes fit in an empty pipe whole; a host that closed
                 * its end (EPIPE: SIGPIPE is ignored) no longer asks. */
                ssize_t w;
                do {
                    w = write(pid_pipe, &pid, sizeof pid);
                } while (w < 0 && errno == EINTR);
                fds[pid_pipe_at] = -1; /* the command's now */
            }
            watch_fd(pidfd, &a->exit_w);
        }
    }
    free(payload);
    free(argv);
    free(envp);
    free(insns);
    for (int i = 1; i < nfds; i++) close(fds[i]);
}

static void on_control(void) {
    struct request rq;
    static char rest[sizeof(struct payload) + MAX_INLINE];
    char cbuf[CMSG_SPACE(MAX_FDS * sizeof(int))];
    struct iovec iov[2] = {{&rq, sizeof rq}, {rest, sizeof rest}};
    struct msghdr msg = {0};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    msg.msg_control = cbuf;
    msg.msg_controllen = sizeof cbuf;
    ssize_t n = recvmsg(CONTROL, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) end_everything(); /* the host is gone */
    int fds[MAX_FDS], nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            int count = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (int i = 0; i < count; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
                if (nfds < MAX_FDS) fds[nfds++] = fd;
                else close(fd);
            }
        }
    }
    if (n < (ssize_t)sizeof rq || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
        /* Descriptors dropped on the way: out of descriptors here (the
         * kernel closes the ones that did not fit, so a host waiting on the
         * command socket sees it close if that one was lost). */
        if (nfds > 0 && (msg.msg_flags & MSG_CTRUNC)) send_reply(fds[0], R_FAILED, STEP_REQUEST, EMFILE);
        for (int i = 0; i < nfds; i++) close(fds[i]);
        return;
    }
    if (rq.op == OP_SPAWN) {
        on_spawn(&rq, fds, nfds, rest, (size_t)n - sizeof rq);
    } else if (rq.op == OP_RELEASES && nfds == 1 && release_fd < 0) {
        /* Watched: a release is acted on at once (collect_releases runs
         * after every batch of events), so the host can wait for it. */
        static struct watch releases_w = {W_RELEASES, NULL};
        release_fd = fds[0];
        watch_fd(release_fd, &releases_w);
    } else {
        for (int i = 0; i < nfds; i++) close(fds[i]);
        if (rq.op == OP_SHUTDOWN) end_everything();
    }
}

/* Whether the pid written on a pid pipe is still there, unread: the host
 * reads all four bytes at once or none (FIONREAD works on either end). A
 * pipe whose reader reads later still gives it: the data outlives the
 * writer. */
static int pid_unread(int pid_pipe) {
    int waiting = 0;
    return ioctl(pid_pipe, FIONREAD, &waiting) == 0 && waiting == (int)sizeof(pid_t);
}

/* Our children as /proc lists them (`thread-self/children`, read whole
 * each time; we have one thread), or -1 where it cannot. */
static int children_fd = -1;

/* Whether any child of ours is not a leader: an adopted orphan, left by
 * some command's tree. A command's descendants that outlive its leader
 * are re-parented to us before the leader's exit is announced, so with
 * none of them here its tree is empty and stays so. Unsure (no file, a
 * list too long to read whole): yes. */
static int adopted_any(void) {
    char buf[4096];
    if (children_fd < 0) return 1;
    ssize_t n = pread(children_fd, buf, sizeof buf - 1, 0);
    if (n < 0 || n >= (ssize_t)sizeof buf - 1) return 1;
    buf[n] = 0;
    for (char *at = buf, *end; *at;) {
        long pid = strtol(at, &end, 10);
        if (end == at) break;
        if (!leader((pid_t)pid)) return 1;
        at = end;
        while (*at == ' ' || *at == '\n') at++;
    }
    return 0;
}

static void on_exit_of(struct command *c) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_PIDFD, (id_t)c->pidfd, &si, WEXITED | WNOWAIT | __WALL) < 0) {
        if (errno == EINTR) return;
        si.si_code = 0; /* unknown */
    }
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->pidfd, NULL);
    c->exited = 1;
    /* Nobody was told its pid, it ended on its own, and nothing of its tree
     * is left (see FLAG_REAP_EMPTY): nothing will ever signal its pid or
     * group, so it is reaped before its exit is reported. */
    int told = 0;
    if (c->pid_pipe >= 0) {
        told = !pid_unread(c->pid_pipe);
        close(c->pid_pipe);
        c->pid_pipe = -1;
    }
    /* No child of ours but leaders: nothing of its tree is left, nor can be
     * (EXITED_TREE_EMPTY); the host then knows its tree is over without a
     * census. */
    int empty = !adopted_any();
    /* Said only if done: a pid reported reaped is free. */
    int reaped = empty && c->reap_empty && !told && c->spawned_deferred && si.si_code == CLD_EXITED &&
                 reap(c->pidfd) == 0;
    int facts = (reaped ? EXITED_REAPED : 0) | (empty ? EXITED_TREE_EMPTY : 0);
    struct reply r[2] = {{R_SPAWNED, c->pid, 0, 0}, {R_EXITED, si.si_code, si.si_status, facts}};
    /* One write: two would wake the host twice. */
    if (c->spawned_deferred) {
        c->spawned_deferred = 0;
        write_all(c->report, r, sizeof r);
    } else {
        write_all(c->report, &r[1], sizeof r[1]);
    }
    if (reaped) forget(c);
}

/* Marks every leader whose pid the host wrote on the release pipe. Runs
 * before any report pipe is looked at: the host writes the pid before it
 * closes its end, so a pid read here is never one a later command got
 * after the earlier one was reaped on the strength of the close. */
static void read_releases(void) {
    int32_t pids[256];
    ssize_t n = -1;
    while (release_fd >= 0 && ((n = read(release_fd, pids, sizeof pids)) > 0 || (n < 0 && errno == EINTR))) {
        for (ssize_t i = 0; i < n / (ssize_t)sizeof *pids; i++) {
            struct command *c = leader(pids[i]);
            if (c) c->released = 1;
        }
    }
    /* The host's end closed (it is exiting; its control socket may close a
     * moment later): no release comes any more, and a pipe at its end of
     * file would wake epoll again and again. Report pipes that close still
     * release their leaders. */
    if (release_fd >= 0 && n == 0) {
        epoll_ctl(epfd, EPOLL_CTL_DEL, release_fd, NULL);
        close(release_fd);
        release_fd = -1;
    }
}

/* Whether the host has released an exited leader: its pid on the release
 * pipe, or nobody left to read its report pipe. */
static int released(struct command *c) {
    if (c->released) return 1;
    struct pollfd p = {c->report, POLLOUT, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL));
}

/* Reaps every exited leader the host has released; returns how many
 * still wait for their release. */
static int collect_releases(void) {
    int waiting = 0;
    read_releases();
    for (struct command *c = commands, *next; c; c = next) {
        next = c->next;
        if (!c->exited) continue;
        if (released(c)) {
            c->released = 1;
            maybe_finish(c);
        } else {
            waiting++;
        }
    }
    return waiting;
}

/* Sends the deferred SPAWNED of every command that has run DEFER_MS;
 * returns the milliseconds until the next one is due, or -1. */
static int send_due_spawned(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long next = -1;
    for (struct command *c = commands; c; c = c->next) {
        if (!c->spawned_deferred) continue;
        long ms = (c->spawned_due.tv_sec - now.tv_sec) * 1000L + (c->spawned_due.tv_nsec - now.tv_nsec) / 1000000L;
        if (ms <= 0) {
            c->spawned_deferred = 0;
            send_reply(c->report, R_SPAWNED, c->pid, 0);
        } else if (next < 0 || ms < next) {
            next = ms;
        }
    }
    return (int)next;
}

/* The host process, our parent until it dies. */
static pid_t host;

static void on_signals(int sigfd) {
    struct signalfd_siginfo si;
    while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGCHLD) {
            reap_orphans();
        } else if (si.ssi_signo == SIGCONT) {
            /* The parent-death signal, or a continue after a stop (the
             * host's, or anyone's): only a new parent means the host died. */
            if (getppid() != host) end_everything();
        } else {
            end_everything();
        }
    }
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "probe-mounts") == 0) return probe_mounts(argv[2]);
    host = argc > 1 ? (pid_t)atoi(argv[1]) : 0;
    group_dirs = argv + 2;
    ngroup_dirs = argc > 2 ? argc - 2 : 0;
    sigset_t handled;
    sigemptyset(&handled);
    sigaddset(&handled, SIGCHLD);
    sigaddset(&handled, SIGTERM);
    sigaddset(&handled, SIGCONT);
    sigaddset(&handled, SIGINT);
    sigaddset(&handled, SIGHUP);
    sigaddset(&handled, SIGQUIT);
    sigprocmask(SIG_BLOCK, &handled, NULL);
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_NAME, "dsh-supervisor", 0, 0, 0);
    /* SIGCONT as the parent-death signal: it also resumes a supervisor
     * that a command stopped (kill -STOP $PPID), which a SIGTERM would
     * wait behind forever. */
    prctl(PR_SET_PDEATHSIG, SIGCONT);
    /* Not dumpable: a command of the same user without CAP_SYS_PTRACE
     * cannot attach to us (or read our memory through /proc). */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    proc_dir = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct statfs fs;
    if (proc_dir >= 0 && (fstatfs(proc_dir, &fs) != 0 || fs.f_type != PROC_SUPER_MAGIC)) {
        close(proc_dir);
        proc_dir = -1;
    }
    /* `thread-self`, not our pid: a /proc of another pid namespace (the
     * parent's, not remounted) numbers us differently, and our pid there
     * is someone else's. Its pids then match no leader: nothing is
     * reaped early. */
    children_fd = open_proc("thread-self/children", O_RDONLY);
    /* The host died before the parent-death signal was armed. */
    if (getppid() != host) _exit(0);
    /* Two descriptors per running command (three for a spawned program's
     * until its exit: its pid pipe); commands get the original limit back
     * before exec. */
    if (getrlimit(RLIMIT_NOFILE, &original_nofile) == 0 && original_nofile.rlim_cur < original_nofile.rlim_max) {
        struct rlimit raised = original_nofile;
        raised.rlim_cur = raised.rlim_max;
        raised_nofile = setrlimit(RLIMIT_NOFILE, &raised) == 0;
    }
    int sigfd = signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (sigfd < 0 || epfd < 0) _exit(1);
    static struct watch control_w = {W_CONTROL, NULL}, signals_w = {W_SIGNALS, NULL};
    watch_fd(CONTROL, &control_w);
    watch_fd(sigfd, &signals_w);
    for (int waiting = 0, due = -1;;) {
        struct epoll_event evs[64];
        int timeout = waiting ? 1000 : -1;
        if (due >= 0 && (timeout < 0 || due < timeout)) timeout = due + 1;
        int n = epoll_wait(epfd, evs, 64, timeout);
        if (n < 0) {
            if (errno == EINTR) continue;
            end_everything();
        }
        for (int i = 0; i < n; i++) {
            struct watch *w = evs[i].data.ptr;
            switch (w->kind) {
            case W_CONTROL: on_control(); break;
            case W_SIGNALS: on_signals(sigfd); break;
            case W_EXIT: on_exit_of(w->cmd); break;
            case W_RELEASES: break; /* read by collect_releases below */
            }
        }
        waiting = collect_releases();
        due = send_due_spawned();
    }
}
