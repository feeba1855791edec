//! One connection: lines in, lines out, and the end. When the client goes
//! away (its end of the input closes, or the output cannot be written) the
//! session's executor is disposed: everything the connection started is
//! stopped and awaited before `serve` returns.

use std::io;

use dsh_core::CancelToken;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::frame::{self, RpcError, INVALID_REQUEST};
use super::hub::Hub;
use super::outbox::{Outbox, Pending};
use super::session::{Next, Out, Session};
use super::MAX_MESSAGE_BYTES;
use std::sync::Arc;

/// One line of input, or the news that it was longer than the limit (its
/// bytes were read and dropped, up to and including its newline).
enum Line {
    Text(Vec<u8>),
    TooLong(usize),
}

/// Reads up to the next newline, keeping at most `max` bytes; `None` at
/// the end of the input.
async fn next_line<R: AsyncBufRead + Unpin>(reader: &mut R, max: usize) -> io::Result<Option<Line>> {
    let mut line = Vec::new();
    let mut seen = 0usize;
    loop {
        let chunk = reader.fill_buf().await?;
        if chunk.is_empty() {
            // A last line without its newline is still a line.
            return Ok(match seen {
                0 => None,
                n if n > max => Some(Line::TooLong(n)),
                _ => Some(Line::Text(line)),
            });
        }
        let (part, ended) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (&chunk[..i], true),
            None => (chunk, false),
        };
        seen += part.len();
        if seen <= max {
            line.extend_from_slice(part);
        } else {
            line = Vec::new();
        }
        let used = part.len() + usize::from(ended);
        reader.consume(used);
        if ended {
            return Ok(Some(if seen > max {
                Line::TooLong(seen)
            } else {
                Line::Text(line)
            }));
        }
    }
}

/// Serves one connection until its input ends, its output fails or `stop`
/// fires. Then its session ends (everything it started is stopped and
/// awaited) or, where the hub lets sessions linger and the server is not
/// stopping, is kept for a connection that resumes it. Returns once that
/// is done.
pub async fn serve<R, W>(mut reader: R, writer: W, stop: CancelToken, hub: Arc<Hub>)
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, outbox) = Outbox::new();
    let pending = out.pending();
    let mut session = Session::new(out.clone(), hub);
    let (gone_tx, mut gone) = tokio::sync::watch::channel(false);
    let give_up = CancelToken::new();
    let writing = tokio::spawn(write_out(
        writer,
        outbox,
        pending.clone(),
        gone_tx,
        give_up.clone(),
    ));
    loop {
        // A client that does not read its answers is not read either
        // (outbox.rs): what it makes the server hold stays bounded.
        tokio::select! {
            _ = pending.room_for_requests() => {}
            _ = gone.changed() => break,
            _ = stop.cancelled() => break,
            _ = pending.stalled() => break,
        }
        tokio::select! {
            line = next_line(&mut reader, MAX_MESSAGE_BYTES) => match line {
                Ok(Some(Line::Text(line))) => {
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    if let Next::Resume(call) = session.handle_line(&line) {
                        if let Some(resumed) = session.resume(call).await {
                            session = resumed;
                        }
                    }
                }
                Ok(Some(Line::TooLong(n))) => {
                    let e = RpcError::new(
                        INVALID_REQUEST,
                        format!("the message is {n} bytes, more than the {MAX_MESSAGE_BYTES} a line may hold"),
                    );
                    let _ = out.send(Out::Line(frame::error_response(&serde_json::Value::Null, &e)));
                }
                Ok(None) | Err(_) => break,
            },
            _ = gone.changed() => break,
            _ = stop.cancelled() => break,
            _ = pending.stalled() => break,
        }
    }
    // What was answered before the end (a half-closed input's last
    // answers) is still written, unless the client does not read it.
    let finish_writing = || async {
        let _ = out.send(Out::End);
        let mut writing = writing;
        match tokio::time::timeout(FLUSH_LIMIT, &mut writing).await {
            Ok(rest) => rest.ok(),
            Err(_) => {
                give_up.cancel();
                writing.await.ok()
            }
        }
    };
    if stop.is_cancelled() {
        session.close().await;
        finish_writing().await;
    } else if session.linger().is_some() {
        // Kept first: what the connection never began to write goes to
        // the next one.
        let rest = finish_writing().await;
        session.end_connection(&out, rest).await;
    } else {
        session.end_connection(&out, None).await;
        finish_writing().await;
    }
}

/// Writes the outbox to the connection, what is ready in one write, until
/// `Out::End`, a failed write, or `give_up`. Returns the outbox with what
/// it never began to write, still open: a message sent until the session
/// lets go of the connection is kept, not lost with a closed channel. A
/// batch that was being written when it stopped is neither written nor
/// kept: the client may have had part of it.
async fn write_out<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut outbox: mpsc::UnboundedReceiver<Out>,
    pending: Arc<Pending>,
    gone: tokio::sync::watch::Sender<bool>,
    give_up: CancelToken,
) -> mpsc::UnboundedReceiver<Out> {
    while let Some(first) = outbox.recv().await {
        let mut batch = Vec::new();
        let mut streamed = Vec::new();
        let mut end = false;
        // What else is ready goes in the same write.
        for message in std::iter::once(first).chain(std::iter::from_fn(|| outbox.try_recv().ok())) {
            match message {
                Out::Line(line) => {
                    batch.extend_from_slice(line.as_bytes());
                    batch.push(b'\n');
                }
                Out::Streamed { line, queue } => {
                    batch.extend_from_slice(line.as_bytes());
                    batch.push(b'\n');
                    streamed.push((line.len(), queue));
                }
                Out::End => {
                    end = true;
                    break;
                }
            }
        }
        let written = tokio::select! {
            r = async { writer.write_all(&batch).await?; writer.flush().await } => r.is_ok(),
            _ = give_up.cancelled() => return outbox,
        };
        if !written {
            let _ = gone.send(true);
            return outbox;
        }
        pending.written(batch.len());
        for (bytes, queue) in streamed {
            queue.written(bytes);
        }
        if end {
            return outbox;
        }
    }
    outbox
}

/// How long the last answers may take to be written after the end.
const FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);
