/*
 * A confined command's read-only file system (docs/sandbox.md, "Metadata"):
 * the command's process enters a mount namespace of its own in which every
 * mount is read-only except its writable directories, so that what Landlock
 * cannot govern (chmod, chown, utimensat, extended attributes) is refused
 * too, with EROFS. Landlock stays the first layer.
 */
#ifndef DSH_MOUNTS_H
#define DSH_MOUNTS_H

#include "wire.h"

struct mounts {
    /* A user namespace too (FLAG_USER_NS), with these one-line maps of the
     * host's ids to themselves, written before clone: the child may not
     * format them (it runs on the supervisor's memory). */
    int user;
    const char *uid_map, *gid_map;
    /* The directories that stay writable, NULL-terminated. */
    const char *writable[MAX_WRITABLE + 1];
};

/* Enters the namespace `m` describes and makes the file system read-only
 * but `m->writable`; on failure returns the MOUNTS_* step that failed,
 * with errno set, else 0. Only system calls (async-signal-safe): it runs in
 * the child of clone(CLONE_VFORK). With `m->user` it makes its process
 * dumpable for a moment, so that child must not share its memory
 * (CLONE_VM) with a process that is not dumpable. */
int enter_read_only_mounts(const struct mounts *m);

/* `dsh-supervisor probe-mounts DIR`: tries the namespace in a child, with
 * DIR writable, as the host's commands would enter it (a mount namespace
 * alone as root, else with a user namespace), and writes the result to
 * fd 3 as struct reply { R_PROBED, NAMESPACES_*, step, errno }. */
int probe_mounts(const char *writable);

#endif
