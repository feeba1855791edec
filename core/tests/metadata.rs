//! Read-only mounts (docs/sandbox.md, "Metadata"): where the host may make
//! namespaces, a confined command's metadata changes outside its writable
//! places fail with EROFS, the command cannot undo that, the host's own
//! mounts are untouched; where it may not, everything runs as before and
//! the facts say `metadata: false`.
//!
//! `DSH_VM_TEST` (scripts/vm-test) requires the mounts; its run with user
//! namespaces turned off sets `DSH_VM_NO_NAMESPACES` and requires the
//! fallback instead.
mod common;
use common::*;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use dsh_core::*;

/// Whether confined commands run in read-only mounts on this host.
fn mounts_expected() -> bool {
    let vm_without = std::env::var_os("DSH_VM_NO_NAMESPACES").is_some();
    match metadata_unavailable() {
        None => {
            assert!(
                !vm_without,
                "user namespaces are off, yet the probe found the mounts"
            );
            true
        }
        Some(why) => {
            assert!(
                vm_without || std::env::var_os("DSH_VM_TEST").is_none(),
                "the VM must have the read-only mounts: {why}"
            );
            if !vm_without {
                eprintln!("(this host has no read-only mounts: {why}; the fallback is tested)");
            }
            false
        }
    }
}

/// A workspace and an "outside" directory holding `file` (mode 0644, an
/// old mtime), neither in /tmp nor the temp dir.
fn setup(name: &str) -> TempDir {
    let tmp = std::env::temp_dir();
    let root = ["/var/tmp", "/root", "/home"]
        .iter()
        .map(Path::new)
        .find(|p| p.is_dir() && !p.starts_with("/tmp") && !p.starts_with(&tmp))
        .expect("a writable directory outside /tmp");
    let dir = TempDir::new_in(root, &format!("dsh-metadata-{name}"));
    for sub in ["ws", "outside"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        let f = dir.join(sub).join("file");
        std::fs::write(&f, "x").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
        std::fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    dir
}

fn confined(mode: SandboxMode, dir: &Path, command: &str) -> RunResult {
    let exec = executor();
    let mut req = Request::new(command);
    req.workdir = Some(dir.join("ws"));
    req.sandbox_policy = Some(SandboxPolicyInput {
        mode,
        workspace_root: None,
        session_id: None,
        network: None,
    });
    exec.run_blocking(&exec.resolve(req).unwrap(), None).unwrap()
}

/// chmod, chown (to the file's own ids: allowed to anyone who owns it),
/// touch -d and setxattr on `file`, each reporting its errno name.
fn change_metadata(file: &Path) -> String {
    format!(
        "f={f}; chmod 600 $f; chown $(id -u):$(id -g) $f; touch -d 2001-01-01 $f; \
         python3 -c 'import os, sys, errno
try:
    os.setxattr(sys.argv[1], \"user.dsh\", b\"1\"); print(\"xattr ok\")
except OSError as e:
    print(\"xattr\", errno.errorcode[e.errno])' $f",
        f = file.display()
    )
}

fn mode_and_mtime(file: &Path) -> (u32, i64) {
    let m = std::fs::metadata(file).unwrap();
    (m.permissions().mode() & 0o7777, m.mtime())
}

#[test]
fn metadata_outside_the_writable_places_is_refused_in_both_confined_modes() {
    if skip_without_landlock() {
        return;
    }
    let expected = mounts_expected();
    for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
        let dir = setup("outside");
        let outside = dir.join("outside/file");
        let before = mode_and_mtime(&outside);
        let r = confined(mode, &dir, &change_metadata(&outside));
        let info = r.sandbox.clone().unwrap();
        assert_eq!(info.metadata, expected, "{mode}: the facts say what held");
        if expected {
            assert_eq!(mode_and_mtime(&outside), before, "{mode}: {r:?}");
            assert_eq!(
                r.stderr.text.matches("Read-only file system").count(),
                3,
                "{mode}: chmod, chown and touch each refused: {}",
                r.stderr.text
            );
            assert_eq!(r.stdout.text, "xattr EROFS\n", "{mode}");
        } else {
            // As before: Landlock does not govern metadata.
            assert_eq!(mode_and_mtime(&outside).0, 0o600, "{mode}: {r:?}");
        }
    }
}

#[test]
fn metadata_in_the_writable_places_still_changes() {
    if skip_without_landlock() {
        return;
    }
    let dir = setup("inside");
    let inside = dir.join("ws/file");
    let tmp = TempDir::new_in(Path::new("/tmp"), "dsh-metadata-tmp");
    let in_tmp = tmp.join("file");
    std::fs::write(&in_tmp, "x").unwrap();
    let r = confined(
        SandboxMode::WorkspaceWrite,
        &dir,
        &format!(
            "chmod 600 ./file {t} && touch -d 2001-01-01 ./file {t} && echo > /dev/null && echo changed",
            t = in_tmp.display()
        ),
    );
    assert_eq!(r.stdout.text, "changed\n", "{}", r.stderr.text);
    for f in [&inside, &in_tmp] {
        let (mode, mtime) = mode_and_mtime(f);
        assert_eq!(mode, 0o600, "{}", f.display());
        // 2001-01-01 in some time zone, at some time of day (busybox's
        // touch keeps the time of day): not the 2001-09-09 of `setup`, nor now.
        assert!(
            (978_000_000..978_500_000).contains(&mtime),
            "{}: {mtime}",
            f.display()
        );
    }
}

#[test]
fn a_command_cannot_make_its_mounts_writable_again() {
    if skip_without_landlock() || !mounts_expected() {
        return;
    }
    let dir = setup("undo");
    let outside = dir.join("outside/file");
    let before = mode_and_mtime(&outside);
    // Every way back to a writable root it might try: mount_setattr (which
    // Landlock does not govern), a remount, and both again from a user
    // namespace of its own; then the chmod, which must still fail.
    let attempt = format!(
        r#"python3 - {f} <<'PY'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 1
class Attr(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("set", "clr", "propagation", "userns_fd")]
def writable_again(who):
    a = Attr(0, MOUNT_ATTR_RDONLY, 0, 0)
    r = libc.syscall(442, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(a), ctypes.sizeof(a))
    r2 = libc.mount(None, b"/", None, 32 | 4096 | 16384, None)  # MS_REMOUNT | MS_BIND | MS_REC
    try:
        os.chmod(sys.argv[1], 0o600)
        print(who, "CHANGED")
    except OSError as e:
        print(who, "refused", os.strerror(e.errno), r, r2)
writable_again("as-is")
sys.stdout.flush()
if os.fork() == 0:
    if libc.unshare(0x10000000 | 0x20000) != 0:  # CLONE_NEWUSER | CLONE_NEWNS
        print("nested refused", os.strerror(ctypes.get_errno()))
    else:
        writable_again("nested")
    sys.stdout.flush()
    os._exit(0)
os.wait()
PY"#,
        f = outside.display()
    );
    for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
        let r = confined(mode, &dir, &attempt);
        assert!(
            !r.stdout.text.contains("CHANGED") && r.stdout.text.contains("as-is refused"),
            "{mode}: {r:?}"
        );
        assert!(r.stdout.text.contains("nested refused"), "{mode}: {r:?}");
        assert_eq!(mode_and_mtime(&outside), before, "{mode}");
    }
}

#[test]
fn the_hosts_mounts_are_untouched() {
    if skip_without_landlock() {
        return;
    }
    let mounts = || std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let before = mounts();
    let dir = setup("host");
    let r = confined(SandboxMode::WorkspaceWrite, &dir, "cat /proc/self/mountinfo");
    assert_eq!(r.exit_code, Some(0));
    assert_eq!(
        mounts(),
        before,
        "a command's mounts reached the host's namespace"
    );
    // And the host still changes metadata anywhere it may.
    let outside = dir.join("outside/file");
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(mode_and_mtime(&outside).0, 0o600);
    if r.sandbox.unwrap().metadata {
        assert!(
            r.stdout.text.lines().any(|l| {
                // mount ID, parent ID, major:minor, root, mount point, options
                let f: Vec<&str> = l.split(' ').collect();
                f.len() > 5 && f[4] == "/" && f[5].split(',').any(|o| o == "ro")
            }),
            "the command's root is read-only: {}",
            r.stdout.text
        );
    }
}

#[test]
fn a_terminal_session_gets_the_read_only_mounts_too() {
    if skip_without_landlock() || !mounts_expected() {
        return;
    }
    let dir = setup("terminal");
    let outside = dir.join("outside/file");
    let exec = executor();
    let mut request = TerminalRequest::command(format!("chmod 600 {}; echo done", outside.display()));
    request.cwd = Some(dir.join("ws"));
    request.sandbox_policy = Some(SandboxPolicyInput {
        mode: SandboxMode::ReadOnly,
        workspace_root: None,
        session_id: None,
        network: None,
    });
    let session = exec
        .spawn_terminal(&exec.resolve_terminal(request).unwrap())
        .unwrap();
    let mut out = String::new();
    loop {
        let read = session
            .read_output_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        out.push_str(&read.text);
        if read.ended {
            break;
        }
    }
    assert!(
        out.contains("Read-only file system") && out.contains("done"),
        "{out}"
    );
    assert_eq!(mode_and_mtime(&outside).0, 0o644);
}

/// Root's CAP_DAC_READ_SEARCH would open a file outside by its handle
/// through a descriptor of the workspace, on the same filesystem, and the
/// file would then sit on the workspace's writable mount: the command runs
/// without it, so neither its contents nor its metadata change.
#[test]
fn a_file_outside_cannot_be_opened_by_its_handle_through_the_workspace() {
    if skip_without_landlock() {
        return;
    }
    let dir = setup("handle");
    let outside = dir.join("outside/file");
    let before = (mode_and_mtime(&outside), std::fs::read(&outside).unwrap());
    let attack = format!(
        r#"python3 - {f} <<'PY'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(8 + 128)
ctypes.memmove(buf, (128).to_bytes(4, "little"), 4)
mount_id = ctypes.c_int()
if libc.name_to_handle_at(-100, sys.argv[1].encode(), buf, ctypes.byref(mount_id), 0) != 0:
    print("no handle", os.strerror(ctypes.get_errno())); sys.exit(0)
ws = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
fd = libc.open_by_handle_at(ws, buf, os.O_RDWR)
if fd < 0:
    print("refused", os.strerror(ctypes.get_errno())); sys.exit(0)
changed = []
if libc.fchmod(fd, 0o600) == 0: changed.append("mode")
if os.write(fd, b"PWNED") > 0: changed.append("contents")
print("CHANGED", changed)
PY"#,
        f = outside.display()
    );
    for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
        let r = confined(mode, &dir, &attack);
        assert!(!r.stdout.text.contains("CHANGED"), "{mode}: {r:?}");
        assert!(
            r.stdout.text.contains("refused") || r.stdout.text.contains("no handle"),
            "{mode}: {r:?}"
        );
        assert_eq!(
            (mode_and_mtime(&outside), std::fs::read(&outside).unwrap()),
            before,
            "{mode}"
        );
    }
}

/// A workspace root reached through a symlink is the directory it names,
/// for Landlock and for the read-only mounts alike.
#[test]
fn a_workspace_root_behind_a_symlink_is_writable() {
    if skip_without_landlock() {
        return;
    }
    let expected = mounts_expected();
    let dir = setup("symlink");
    std::os::unix::fs::symlink(dir.join("ws"), dir.join("wslink")).unwrap();
    let exec = executor();
    let mut req = Request::new("echo x > ./new && chmod 600 ./file && echo ok");
    req.workdir = Some(dir.join("wslink"));
    req.sandbox_policy = Some(SandboxPolicyInput {
        mode: SandboxMode::WorkspaceWrite,
        workspace_root: Some(dir.join("wslink")),
        session_id: None,
        network: None,
    });
    let r = exec.run_blocking(&exec.resolve(req).unwrap(), None).unwrap();
    assert_eq!(r.stdout.text, "ok\n", "{r:?}");
    assert_eq!(r.sandbox.unwrap().metadata, expected);
    assert_eq!(mode_and_mtime(&dir.join("ws/file")).0, 0o600);
}
