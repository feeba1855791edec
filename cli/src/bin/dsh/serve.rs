//! `dsh serve`: the protocol face on stdio (one connection) or on a unix
//! socket (a connection per client). Every connection's commands end with
//! it, unless sessions linger (`--linger`); SIGINT, SIGTERM and SIGHUP end
//! every connection and session, then dsh.

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_cli::interrupt::Interrupt;
use dsh_cli::protocol::connection;
use dsh_cli::protocol::hub::Hub;
use dsh_core::CancelToken;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinSet;

use crate::args::Listen;

pub fn serve(listen: Listen, interrupt: &Interrupt) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start: {e}"))?;
    let stop = interrupt.token().clone();
    let served = runtime.block_on(async move {
        match listen {
            Listen::Stdio { linger: None, .. } => {
                let stdin = BufReader::new(tokio::io::stdin());
                connection::serve(stdin, tokio::io::stdout(), stop, Hub::new(None)).await;
                Ok(())
            }
            Listen::Stdio {
                linger: Some(secs),
                socket,
            } => {
                let socket = match socket {
                    Some(s) => s,
                    None => default_socket()?,
                };
                relay(&socket, secs, stop).await
            }
            Listen::Unix {
                path,
                linger,
                exit_when_idle,
            } => {
                let hub = Hub::new(linger.map(Duration::from_secs));
                listen_unix(&path, stop, hub, exit_when_idle).await
            }
        }
    });
    // Not a drop, which would wait for the blocking read of a stdin that
    // is still open (a relay whose server died, a signal to a --stdio).
    runtime.shutdown_background();
    served
}

async fn listen_unix(
    path: &Path,
    stop: CancelToken,
    hub: Arc<Hub>,
    exit_when_idle: bool,
) -> Result<(), String> {
    let listener = bind(path).map_err(|e| format!("--listen unix:{}: {e}", path.display()))?;
    let mut connections = JoinSet::new();
    // A server a relay started stays while anything is connected or kept,
    // and a while after, for the next connection.
    let idle_limit = hub.linger.unwrap_or_default().max(Duration::from_secs(10));
    let mut idle_since = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let (read, write) = stream.into_split();
                    connections.spawn(connection::serve(BufReader::new(read), write, stop.clone(), hub.clone()));
                }
                // EMFILE and the like: the listener stays; this client retries.
                Err(e) => eprintln!("dsh serve: accept: {e}"),
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = tick.tick(), if exit_when_idle => {
                if !connections.is_empty() || !hub.is_empty() {
                    idle_since = Instant::now();
                } else if idle_since.elapsed() >= idle_limit {
                    break;
                }
            }
            _ = stop.cancelled() => break,
        }
    }
    let _ = std::fs::remove_file(path);
    // Connections saw `stop` (or there are none): each ends its session.
    // Sessions that linger with no connection are ended here.
    while connections.join_next().await.is_some() {}
    for session in hub.all() {
        session.close().await;
    }
    Ok(())
}

/// A socket only this user may connect to: made under a umask that leaves
/// no moment in which it is open to others, and in place only once it
/// listens. A stale socket (nobody listening) is replaced; a live one, or
/// any other file, is refused.
fn bind(path: &Path) -> io::Result<UnixListener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "exists and is not a socket",
            ));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                "another server is listening there",
            ));
        }
        std::fs::remove_file(path)?;
    }
    // Made under another name and renamed into place once it listens: a
    // client that waits for PATH to appear can connect at once.
    let mut making = path.as_os_str().to_owned();
    making.push(format!(".{}.new", std::process::id()));
    let making = PathBuf::from(making);
    let _ = std::fs::remove_file(&making);
    // SAFETY: umask only swaps the process's file-creation mask; it is set
    // back right after the bind, before any other file is made.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(&making);
    // SAFETY: as above, restoring the mask read before.
    unsafe { libc::umask(old) };
    let listener = bound?;
    // Linked, not renamed, into place: a link never replaces a file, so of
    // two servers started at once only one takes PATH, and the other is
    // refused instead of listening on a name nobody can reach.
    let placed = std::fs::set_permissions(&making, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::fs::hard_link(&making, path))
        .map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => {
                io::Error::new(io::ErrorKind::AddrInUse, "another server is listening there")
            }
            _ => e,
        });
    let _ = std::fs::remove_file(&making);
    placed.map(|()| listener)
}

/// This user's lingering server: in `$XDG_RUNTIME_DIR/dsh`, else in
/// `/tmp/dsh-UID`; the directory is this user's alone (0700), or refused.
fn default_socket() -> Result<PathBuf, String> {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("dsh"),
        None => PathBuf::from(format!("/tmp/dsh-{uid}")),
    };
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot make {}: {e}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{} must be a directory of this user's that nobody else may use (0700); use --socket",
            dir.display()
        ));
    }
    Ok(dir.join("serve.sock"))
}

/// `--stdio --linger`: the connection is relayed to this user's lingering
/// server (started when none listens), so its session outlives this
/// process: when stdin ends (the ssh connection dropped), the server keeps
/// the session for the linger time.
async fn relay(socket: &Path, linger: u64, stop: CancelToken) -> Result<(), String> {
    let stream = match UnixStream::connect(socket).await {
        Ok(s) => s,
        Err(_) => start_server(socket, linger).await?,
    };
    let (mut from_server, mut to_server) = stream.into_split();
    let mut stdin = tokio::io::stdin();
    let mut stdout = tokio::io::stdout();
    let to_client = tokio::io::copy(&mut from_server, &mut stdout);
    tokio::pin!(to_client);
    tokio::select! {
        _ = tokio::io::copy(&mut stdin, &mut to_server) => {
            // The client's input ended (it is done, or its connection
            // dropped): the server sees the end, its session lingers, and
            // what it still writes (the answers to the last calls) goes
            // out before this relay does, as from a --stdio server.
            let _ = to_server.shutdown().await;
            let _ = tokio::time::timeout(RELAY_DRAIN_LIMIT, &mut to_client).await;
            Ok(())
        }
        // The server never ends a connection first unless it is stopping
        // or died: the client must hear of it, so this relay ends too.
        _ = &mut to_client => Err(format!(
            "the lingering server at {} ended the connection (stopped or killed)",
            socket.display()
        )),
        _ = stop.cancelled() => Ok(()),
    }
}

/// How long a relay whose input ended waits for the server's last answers
/// (the server itself gives them 2 s).
const RELAY_DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// Starts `dsh serve --listen unix:SOCKET --linger N` in a session of its
/// own (no terminal's hangup reaches it) and waits until it listens.
async fn start_server(socket: &Path, linger: u64) -> Result<UnixStream, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find dsh itself: {e}"))?;
    let mut command = std::process::Command::new(exe);
    command
        .arg("serve")
        .arg("--listen")
        .arg(format!("unix:{}", socket.display()))
        .args(["--linger", &linger.to_string(), "--exit-when-idle"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: setsid(2) is async-signal-safe, and the closure touches
    // nothing else of the parent's between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start the lingering server: {e}"))?;
    let start = Instant::now();
    loop {
        if let Ok(s) = UnixStream::connect(socket).await {
            // Reaped by init once this relay exits; nobody waits for it.
            drop(child);
            return Ok(s);
        }
        if let Ok(Some(status)) = child.try_wait() {
            // Another relay's server may have won the race for the socket.
            if let Ok(s) = UnixStream::connect(socket).await {
                return Ok(s);
            }
            return Err(format!(
                "the lingering server at {} exited ({status})",
                socket.display()
            ));
        }
        if start.elapsed() > Duration::from_secs(10) {
            return Err(format!(
                "the lingering server did not listen at {} within 10 s",
                socket.display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
