//! `dsh serve`: the protocol face on stdio (one connection) or on a unix
//! socket (a connection per client). Every connection's commands end with
//! it; SIGINT, SIGTERM and SIGHUP end every connection, then dsh.

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

use dsh_cli::interrupt::Interrupt;
use dsh_cli::protocol::connection;
use tokio::io::BufReader;
use tokio::net::UnixListener;
use tokio::task::JoinSet;

use crate::args::Listen;

pub fn serve(listen: Listen, interrupt: &Interrupt) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start: {e}"))?;
    let stop = interrupt.token().clone();
    runtime.block_on(async move {
        match listen {
            Listen::Stdio => {
                connection::serve(BufReader::new(tokio::io::stdin()), tokio::io::stdout(), stop).await;
                Ok(())
            }
            Listen::Unix(path) => listen_unix(&path, stop).await,
        }
    })
}

async fn listen_unix(path: &Path, stop: dsh_core::CancelToken) -> Result<(), String> {
    let listener = bind(path).map_err(|e| format!("--listen unix:{}: {e}", path.display()))?;
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let (read, write) = stream.into_split();
                    connections.spawn(connection::serve(BufReader::new(read), write, stop.clone()));
                }
                // EMFILE and the like: the listener stays; this client retries.
                Err(e) => eprintln!("dsh serve: accept: {e}"),
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = stop.cancelled() => break,
        }
    }
    let _ = std::fs::remove_file(path);
    // Each connection saw `stop` too: it disposes its executor and ends.
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// A socket only this user may connect to: made under a umask that leaves
/// no moment in which it is open to others. A stale socket (nobody
/// listening) is replaced; a live one, or any other file, is refused.
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
    // SAFETY: umask only swaps the process's file-creation mask; it is set
    // back right after the bind, before any other file is made.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    // SAFETY: as above, restoring the mask read before.
    unsafe { libc::umask(old) };
    let listener = bound?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}
