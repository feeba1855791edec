//! The protocol face (docs/protocol.md): JSON-RPC 2.0, one message per
//! line, over any byte stream (`dsh serve --stdio` under ssh or `kubectl
//! exec`, or a unix socket). Like the other faces it only translates: each
//! method is one core call, each error the core's with its code and field.

pub mod connection;
pub mod frame;
pub mod hub;
pub mod input;
pub mod outbox;
pub mod output;
pub mod session;
pub mod stream_queue;
pub mod terminals;

/// The version `initialize` must ask for.
pub const PROTOCOL_VERSION: u64 = 1;

/// The longest line (one message) the server reads; a longer one is
/// answered with an error and skipped. Room for a 32 MiB `write_stdin` in
/// base64.
pub const MAX_MESSAGE_BYTES: usize = 48 << 20;
