// The one definition of the supervisor's wire codes and sizes. It is
// included twice: by launch/wire.rs (as Rust constants) and by build.rs,
// which writes them as `#define`s into `wire.h` for supervisor.c. Each
// entry is `NAME: rust_type = value;`; only whole numbers.
wire! {
    // Requests on the control socket (`struct request { op, flags }`).
    OP_SPAWN: u32 = 1;
    OP_SHUTDOWN: u32 = 2;
    OP_RELEASES: u32 = 3;
    // A spawn's flags.
    FLAG_STDIN: u32 = 1;
    FLAG_RULESET: u32 = 2;
    /// The payload follows the request in the same message.
    FLAG_INLINE: u32 = 4;
    /// A `cgroup.procs` descriptor the command writes itself into: its
    /// cgroup v1 groups (the `memory` and `pids` ones of its limits), in
    /// that order.
    FLAG_CGROUP1: u32 = 8;
    FLAG_CGROUP2: u32 = 16;
    /// `struct limits` opens the payload's body.
    FLAG_RLIMITS: u32 = 32;
    /// A seccomp filter (`u32 count, u32 pad`, then `count` BPF
    /// instructions) comes next in the payload's body (after the limits).
    FLAG_SECCOMP: u32 = 64;
    /// The directory of the command's cgroup v2 group (its v2 limits, the
    /// `loopback` filter): the command is born in it, `clone3` with
    /// CLONE_INTO_CGROUP (Linux 5.7), so it never migrates there. After the
    /// v1 groups in the descriptors, and in LIMIT_GROUP's numbering.
    FLAG_CGROUP_INTO: u32 = 128;
    /// The stdin is a pseudo-terminal's slave, which the command makes its
    /// controlling terminal (a terminal session).
    FLAG_TERMINAL: u32 = 256;
    /// SPAWNED is held back until just before EXITED, or DEFER_MS.
    FLAG_DEFER_SPAWNED: u32 = 512;
    /// The ruleset (FLAG_RULESET) only scopes signals: it is applied
    /// without `no_new_privs` where the child may (CAP_SYS_ADMIN), so
    /// setuid programs keep working there.
    FLAG_SCOPE_ONLY: u32 = 1024;
    /// A confined command's read-only file system (docs/sandbox.md): it
    /// enters a mount namespace of its own where everything is read-only
    /// but its writable directories, which come next in the payload's body
    /// (after the filter: `u32 count, u32 pad`, then `count` NUL-terminated
    /// paths, at most MAX_WRITABLE).
    FLAG_MOUNTS: u32 = 2048;
    /// With FLAG_MOUNTS: in a user namespace of its own too (a host that
    /// may not make a mount namespace alone: not root, or root without
    /// CAP_SYS_ADMIN), mapping the host's uid and gid to themselves.
    FLAG_USER_NS: u32 = 4096;
    /// With FLAG_DEFER_SPAWNED: the last descriptor is the write end of a
    /// pipe on which the leader's pid (a native-endian i32) is written as
    /// soon as it has exec'd, and which the supervisor keeps until the
    /// leader's exit (to see whether the pid was read: FLAG_REAP_EMPTY);
    /// closed unwritten when it did not start. The host reads it only when
    /// asked for the pid, so a short command still costs the host one
    /// wake-up.
    FLAG_PID_PIPE: u32 = 8192;
    /// The host takes EXITED with `c` = 1 as a leader already reaped: one
    /// that exited with a code before its pid was told to anyone (SPAWNED
    /// held back, the pid on a pid pipe still unread when the supervisor
    /// handled the exit) and left no process behind (no child of the
    /// supervisor but leaders). Nothing then signals its pid or group,
    /// and no release is sent; a run of a short command costs no release
    /// round trip.
    FLAG_REAP_EMPTY: u32 = 16384;
    // Replies on a command's report pipe (`struct reply { kind, a, b, c }`).
    R_SPAWNED: i32 = 1;
    R_FAILED: i32 = 2;
    /// `{ R_EXITED, si_code, si_status, facts }`: `facts` has
    /// EXITED_REAPED for a leader reaped at its exit (FLAG_REAP_EMPTY), and
    /// EXITED_TREE_EMPTY when no process of its tree was left at its exit
    /// (no child of the supervisor but leaders): a tree grows only by its
    /// members' forks, so it is over for good.
    R_EXITED: i32 = 3;
    EXITED_REAPED: i32 = 1;
    EXITED_TREE_EMPTY: i32 = 2;
    /// The probe's reply (`struct reply { R_PROBED, namespaces, step,
    /// errno }`, written to its fd 3): `namespaces` is NAMESPACES_NONE,
    /// NAMESPACES_MOUNT or NAMESPACES_USER (user and mount).
    R_PROBED: i32 = 4;
    NAMESPACES_NONE: i32 = 0;
    NAMESPACES_MOUNT: i32 = 1;
    NAMESPACES_USER: i32 = 2;
    // The step of a start that failed (R_FAILED's `a`).
    STEP_SESSION: i32 = 1;
    STEP_STDIO: i32 = 2;
    STEP_WORKDIR: i32 = 3;
    STEP_CONFINE: i32 = 4;
    STEP_EXEC: i32 = 5;
    STEP_REQUEST: i32 = 6;
    STEP_CLONE: i32 = 7;
    STEP_LIMITS: i32 = 8;
    STEP_NETWORK: i32 = 9;
    STEP_TERMINAL: i32 = 10;
    STEP_MOUNTS: i32 = 11;
    // STEP_LIMITS's detail (R_FAILED's `c`): which resource limit, or which
    // group (LIMIT_GROUP + its index among the groups passed).
    LIMIT_CPU: i32 = 1;
    LIMIT_FSIZE: i32 = 2;
    LIMIT_NOFILE: i32 = 3;
    LIMIT_GROUP: i32 = 4;
    // STEP_MOUNTS's detail: which part of making the file system read-only
    // failed (the probe's reply names it too).
    MOUNTS_UNSHARE: i32 = 1;
    MOUNTS_MAP: i32 = 2;
    MOUNTS_PROPAGATION: i32 = 3;
    MOUNTS_KEEP: i32 = 4;
    MOUNTS_READ_ONLY: i32 = 5;
    MOUNTS_ATTACH: i32 = 6;
    MOUNTS_CAPABILITY: i32 = 7;
    MOUNTS_CHECK: i32 = 8;
    /// At most this many writable directories travel with FLAG_MOUNTS.
    MAX_WRITABLE: usize = 8;
    /// At most this many descriptors travel with a request.
    MAX_FDS: usize = 10;
    /// The largest payload sent in the request's own message.
    MAX_INLINE: usize = 32768;
    /// How long SPAWNED may be held back (FLAG_DEFER_SPAWNED), in ms.
    DEFER_MS: u32 = 5;
    // The sizes of the structs both sides lay out (checked by the C
    // compiler against supervisor.c's structs).
    REQUEST_SIZE: usize = 8;
    PAYLOAD_SIZE: usize = 16;
    REPLY_SIZE: usize = 16;
    LIMITS_SIZE: usize = 32;
}
