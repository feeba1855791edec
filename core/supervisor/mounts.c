/*
 * A confined command's read-only file system: see mounts.h, and
 * docs/sandbox.md ("Metadata") for what it holds and where.
 *
 * Only what glibc 2.17 has is used (the mount API of Linux 5.2 and
 * mount_setattr of 5.12 go through syscall(2)).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mounts.h"

#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef PR_CAPBSET_DROP
#define PR_CAPBSET_DROP 24
#endif
#ifndef AT_EMPTY_PATH
#define AT_EMPTY_PATH 0x1000
#endif
#define ATTR_RDONLY 0x1
#define ATTR_NOSUID 0x2
#define ATTR_NODEV 0x4
#define CAPABILITY_V3 0x20080522
#define CAP_DAC_READ_SEARCH_BIT 2
#define CAP_SYS_ADMIN_BIT 21

/* The kernel's struct mount_attr, capability header and data. */
struct mount_attributes {
    uint64_t set, clear, propagation, userns_fd;
};
struct capability_header {
    uint32_t version;
    int pid;
};
struct capability_data {
    uint32_t effective, permitted, inheritable;
};

/* Writes all of `text` to `path`; -1 with errno on failure. */
static int write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t n = strlen(text);
    ssize_t w = write(fd, text, n);
    int saved = w < 0 ? errno : EIO;
    close(fd);
    if (w == (ssize_t)n) return 0;
    errno = saved;
    return -1;
}

int enter_read_only_mounts(const struct mounts *m) {
    int kept[MAX_WRITABLE];
    if (unshare(CLONE_NEWNS | (m->user ? CLONE_NEWUSER : 0)) != 0) return MOUNTS_UNSHARE;
    /* Our ids map to themselves, so files keep their owners as far as
     * the host's own ids go (every other id shows as the overflow id).
     * The map files of a process that is not dumpable (the supervisor's
     * children inherit its setting) belong to root: dumpable for the three
     * writes, which is why such a child has memory of its own. The exec
     * sets it again either way. */
    if (m->user) {
        if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) return MOUNTS_MAP;
        int mapped = write_file("/proc/self/setgroups", "deny") == 0 &&
                     write_file("/proc/self/uid_map", m->uid_map) == 0 &&
                     write_file("/proc/self/gid_map", m->gid_map) == 0;
        int saved = errno;
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        errno = saved;
        if (!mapped) return MOUNTS_MAP;
    }
    /* Nothing mounted here reaches the host's namespace (mounts the host
     * makes later still reach us). */
    if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0) return MOUNTS_PROPAGATION;
    /* The writable directories, with whatever is mounted below them,
     * cloned while they are still writable; attached again over
     * themselves once everything else is read-only. */
    int n = 0;
    for (; m->writable[n]; n++) {
        kept[n] = (int)syscall(SYS_open_tree, AT_FDCWD, m->writable[n],
                               OPEN_TREE_CLONE | O_CLOEXEC | AT_RECURSIVE);
        if (kept[n] < 0) return MOUNTS_KEEP;
    }
    struct mount_attributes read_only = {ATTR_RDONLY, 0, 0, 0};
    if (syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &read_only, sizeof read_only) != 0) {
        return MOUNTS_READ_ONLY;
    }
    /* The writable copies hold no device a command could make there (a
     * copy of a disk) and no setuid program. */
    struct mount_attributes plain = {ATTR_NOSUID | ATTR_NODEV, 0, 0, 0};
    for (int i = 0; i < n; i++) {
        if (syscall(SYS_mount_setattr, kept[i], "", AT_EMPTY_PATH | AT_RECURSIVE, &plain, sizeof plain) != 0) {
            return MOUNTS_KEEP;
        }
    }
    /* No MOVE_MOUNT_T_SYMLINKS: the host passes resolved paths, so one
     * that became a symlink since fails the start. */
    for (int i = 0; i < n; i++) {
        if (syscall(SYS_move_mount, kept[i], "", AT_FDCWD, m->writable[i], MOVE_MOUNT_F_EMPTY_PATH) != 0) {
            return MOUNTS_ATTACH;
        }
        close(kept[i]);
    }
    /* Two capabilities would undo the mounts, so they go from the bounding
     * and inheritable sets and the program runs without them (root
     * included): CAP_SYS_ADMIN (mount_setattr, which Landlock does not
     * govern, makes them writable again; a user namespace of the command's
     * own gets it back only over copies, which the kernel locks
     * read-only), and CAP_DAC_READ_SEARCH (open_by_handle_at through a
     * writable place opens any file of the same filesystem on that
     * writable mount, past the read-only one and Landlock's rules). */
    const int dropped[2] = {CAP_SYS_ADMIN_BIT, CAP_DAC_READ_SEARCH_BIT};
    struct capability_header header = {CAPABILITY_V3, 0};
    struct capability_data data[2];
    if (syscall(SYS_capget, &header, data) != 0) return MOUNTS_CAPABILITY;
    for (int i = 0; i < 2; i++) {
        if (prctl(PR_CAPBSET_DROP, dropped[i], 0, 0, 0) != 0) return MOUNTS_CAPABILITY;
        data[0].inheritable &= ~(1u << dropped[i]);
    }
    if (syscall(SYS_capset, &header, data) != 0) return MOUNTS_CAPABILITY;
    return 0;
}

/* In the probe's child: enters the namespace and checks that it did what
 * it says (the root read-only, `writable` not), then reports to `out`. */
static void probe_child(const struct mounts *m, int out) {
    int32_t result[2] = {0, 0};
    result[0] = enter_read_only_mounts(m);
    result[1] = result[0] ? errno : 0;
    struct statvfs root, kept;
    if (result[0] == 0) {
        if (statvfs("/", &root) != 0 || statvfs(m->writable[0], &kept) != 0) {
            result[0] = MOUNTS_CHECK;
            result[1] = errno;
        } else if (!(root.f_flag & ST_RDONLY) || (kept.f_flag & ST_RDONLY)) {
            result[0] = MOUNTS_CHECK;
            result[1] = EINVAL;
        }
    }
    if (write(out, result, sizeof result) != (ssize_t)sizeof result) _exit(1);
    _exit(0);
}

int probe_mounts(const char *writable) {
    /* As the supervisor is, so the child takes the same path to its maps. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    char uid_map[32], gid_map[32];
    snprintf(uid_map, sizeof uid_map, "%u %u 1", (unsigned)geteuid(), (unsigned)geteuid());
    snprintf(gid_map, sizeof gid_map, "%u %u 1", (unsigned)getegid(), (unsigned)getegid());
    int32_t reply[4] = {R_PROBED, NAMESPACES_NONE, MOUNTS_UNSHARE, ENOSYS};
    /* A mount namespace alone where the host may (root with
     * CAP_SYS_ADMIN): the command keeps every id as it is. */
    for (int user = geteuid() == 0 ? 0 : 1; user <= 1; user++) {
        struct mounts m = {user, uid_map, gid_map, {writable, NULL}};
        int32_t result[2] = {MOUNTS_UNSHARE, EIO};
        int fds[2];
        if (pipe(fds) != 0) {
            result[1] = errno;
        } else {
            pid_t pid = fork();
            if (pid == 0) {
                close(fds[0]);
                probe_child(&m, fds[1]);
            }
            close(fds[1]);
            if (pid < 0) result[1] = errno;
            else if (read(fds[0], result, sizeof result) != (ssize_t)sizeof result) result[1] = EIO;
            close(fds[0]);
            while (pid > 0 && waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
            }
        }
        if (result[0] == 0) {
            reply[1] = user ? NAMESPACES_USER : NAMESPACES_MOUNT;
            reply[2] = reply[3] = 0;
            break;
        }
        reply[2] = result[0];
        reply[3] = result[1];
    }
    return write(3, reply, sizeof reply) == (ssize_t)sizeof reply ? 0 : 1;
}
