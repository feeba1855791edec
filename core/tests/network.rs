//! The network policy (docs/sandbox.md, "Network"): `deny` refuses every
//! socket but Unix-domain ones (by `socket`, `connect`, `sendto`, and
//! `io_uring`), in every descendant; Unix sockets keep working; `loopback`
//! fails closed; the facts say how completely it was enforced.
mod common;
use common::*;

use std::io::Read;
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::process::Command;
use std::time::Duration;

use dsh_core::*;

fn policy(mode: SandboxMode, network: NetworkPolicy) -> SandboxPolicyInput {
    SandboxPolicyInput {
        mode,
        workspace_root: None,
        session_id: None,
        network: Some(network),
    }
}

fn run_with(exec: &Executor, command: &str, p: SandboxPolicyInput) -> Result<RunResult> {
    let mut req = Request::new(command);
    req.sandbox_policy = Some(p);
    req.timeout_ms = n(30_000);
    exec.run_blocking(&exec.resolve(req)?, None)
}

fn has_python() -> bool {
    let ok = Command::new("python3")
        .arg("-c")
        .arg("0")
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("SKIP: python3 is not installed");
    }
    ok
}

/// A Python probe that tries each way out and prints one word per try:
/// `ok` or the errno name.
fn probe(port: u16) -> String {
    format!(
        r#"python3 - <<'EOF'
import ctypes, errno, socket
def attempt(name, f):
    try:
        f(); print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
def tcp():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM); s.settimeout(5); s.connect(("127.0.0.1", {port})); s.close()
def tcp6():
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM); s.settimeout(5)
    try: s.connect(("::1", {port}))
    except ConnectionRefusedError: pass
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", ("127.0.0.1", {port}))
def raw():
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
def uring():
    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)
    fd = libc.syscall(425, 4, params)
    if fd < 0:
        e = ctypes.get_errno(); raise OSError(e, "io_uring_setup")
attempt("tcp", tcp); attempt("tcp6", tcp6); attempt("udp", udp); attempt("uring", uring)
EOF"#
    )
}

fn words(text: &str) -> std::collections::BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(' ').map(|(a, b)| (a.to_owned(), b.to_owned())))
        .collect()
}

#[test]
fn deny_refuses_tcp_udp_and_io_uring_that_allow_permits() {
    if !has_python() {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let exec = executor();
    let allowed = run_with(
        &exec,
        &probe(port),
        policy(SandboxMode::DangerFullAccess, NetworkPolicy::Allow),
    )
    .unwrap();
    let allowed = words(&allowed.stdout.text);
    assert_eq!(allowed["tcp"], "ok", "the control: the listener is reachable");
    assert_eq!(allowed["udp"], "ok");
    let denied = run_with(
        &exec,
        &probe(port),
        policy(SandboxMode::DangerFullAccess, NetworkPolicy::Deny),
    )
    .unwrap();
    let info = denied.sandbox.clone().unwrap();
    let denied = words(&denied.stdout.text);
    for way in ["tcp", "tcp6", "udp"] {
        assert_eq!(denied[way], "EACCES", "{way}: {denied:?}");
    }
    if allowed["uring"] == "ok" {
        assert_eq!(denied["uring"], "EACCES", "io_uring is no way around the filter");
    } else {
        eprintln!(
            "SKIP (io_uring part): io_uring is unavailable here even unconfined: {}",
            allowed["uring"]
        );
    }
    assert_eq!(info.network, NetworkPolicy::Deny);
    assert_eq!(info.network_enforcement, Some(Enforcement::Full));
    assert_eq!(info.enforcement, None, "danger-full-access confines no file");
}

#[test]
fn deny_holds_for_curl_and_for_descendants_that_setsid_or_double_fork() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let dir = TempDir::new_in(&std::env::temp_dir(), "dsh-network-desc");
    let exec = executor();
    let try_it =
        format!("bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>/dev/null && echo open || echo refused");
    std::fs::write(dir.join("try"), &try_it).unwrap();
    let d = dir.display();
    let r = run_with(
        &exec,
        &format!(
            "bash {d}/try > {d}/leader; setsid bash {d}/try > {d}/setsid; ( ( bash {d}/try > {d}/double & ) & ); \
             if command -v curl >/dev/null; then curl -s -m 5 http://127.0.0.1:{port}/ >/dev/null; echo curl $?; fi"
        ),
        policy(SandboxMode::WorkspaceWrite, NetworkPolicy::Deny),
    )
    .unwrap();
    // curl: 7 is "couldn't connect", which is how a refused socket shows.
    if r.stdout.text.contains("curl") {
        assert_eq!(r.stdout.text, "curl 7\n");
    }
    for name in ["leader", "setsid", "double"] {
        assert!(
            eventually(Duration::from_secs(5), || std::fs::read_to_string(dir.join(name))
                .is_ok_and(|s| s == "refused\n")),
            "{name}: {:?}",
            std::fs::read_to_string(dir.join(name))
        );
    }
    // Nothing reached the listener.
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err());
}

#[test]
fn unix_sockets_keep_working_under_deny() {
    if !has_python() {
        return;
    }
    let dir = TempDir::new_in(&std::env::temp_dir(), "dsh-network-unix");
    // A daemon's socket outside the command: still reachable.
    let outside = dir.join("daemon.sock");
    let listener = UnixListener::bind(&outside).unwrap();
    let daemon = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut got = String::new();
        s.read_to_string(&mut got).unwrap();
        got
    });
    let exec = executor();
    let r = run_with(
        &exec,
        &format!(
            r#"python3 - <<'EOF'
import os, socket, threading
# A server and a client inside the command.
path = "{d}/inner.sock"
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); srv.bind(path); srv.listen(1)
def serve():
    c, _ = srv.accept(); c.sendall(c.recv(16).upper()); c.close()
t = threading.Thread(target=serve); t.start()
cli = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); cli.connect(path); cli.sendall(b"ping")
print(cli.recv(16).decode()); t.join()
a, b = socket.socketpair(); a.sendall(b"pair"); print(b.recv(4).decode())
out = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); out.connect("{outside}"); out.sendall(b"hello daemon"); out.close()
EOF"#,
            d = dir.display(),
            outside = outside.display()
        ),
        policy(SandboxMode::WorkspaceWrite, NetworkPolicy::Deny),
    )
    .unwrap();
    assert_eq!(r.stdout.text, "PING\npair\n", "{}", r.stderr.text);
    assert_eq!(r.exit_code, Some(0));
    assert_eq!(daemon.join().unwrap(), "hello daemon");
}

#[test]
fn loopback_fails_closed_and_nothing_runs() {
    let dir = TempDir::new_in(&std::env::temp_dir(), "dsh-network-loopback");
    let marker = dir.join("ran");
    let exec = executor();
    let e = run_with(
        &exec,
        &format!("touch {}", marker.display()),
        policy(SandboxMode::DangerFullAccess, NetworkPolicy::Loopback),
    )
    .unwrap_err();
    match e {
        DshError::SandboxUnavailable(why) => {
            assert!(why.contains("loopback cannot be enforced exactly"), "{why}")
        }
        other => panic!("expected SandboxUnavailable, got {other:?}"),
    }
    assert!(!marker.exists());
}

#[test]
fn the_default_is_allow_and_reports_no_network_enforcement() {
    let exec = executor();
    let mut req = Request::new("true");
    req.sandbox_policy = Some(SandboxPolicyInput {
        mode: SandboxMode::ReadOnly,
        workspace_root: None,
        session_id: None,
        network: None,
    });
    let spec = exec.resolve(req).unwrap();
    assert_eq!(
        spec.sandbox_policy.as_ref().unwrap().network,
        NetworkPolicy::Allow
    );
    let info = exec.run_blocking(&spec, None).unwrap().sandbox.unwrap();
    assert_eq!(
        (info.network, info.network_enforcement),
        (NetworkPolicy::Allow, None)
    );
    assert_eq!(
        NetworkPolicy::parse(Field::new(Scope::Request, FieldName::SandboxPolicy), "lan")
            .unwrap_err()
            .to_string(),
        "request.sandbox_policy unknown network policy \"lan\" (expected allow, deny or loopback)"
    );
}
