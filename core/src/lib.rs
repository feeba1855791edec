//! dsh-core: the behaviour of dsh-native, a bash executor for AI-agent
//! harnesses. Every rule of the contract (README.md and docs/) lives here;
//! the C, Python and Node faces only translate.
//!
//! ```no_run
//! use dsh_core::{ConfigInput, Executor, Request};
//! let exec = Executor::new(ConfigInput::default())?;
//! let spec = exec.resolve(Request::new("echo hello; exit 3"))?;
//! let result = exec.run_blocking(&spec, None)?;
//! assert_eq!(result.exit_code, Some(3));
//! assert_eq!(result.stdout.text, "hello\n");
//! # Ok::<(), dsh_core::DshError>(())
//! ```

#![deny(missing_docs)]

// One command's life, folder by folder; each folder uses only the ones
// above it in this list (CONTRIBUTING.md draws it).
mod confine;
mod executor;
mod host;
mod launch;
mod spec;
mod sys;
mod terminal;
mod watch;

pub use confine::governor::limits_support;
pub use executor::foreground::BlockingRun;
pub use executor::host_loop::{HostLoop, HostRun};
pub use executor::process::{compose_delta, Process, ProcessRead, Status, WaiterId};
pub use executor::run::{RunFuture, RunResult};
pub use executor::spawned::{OutputStream, Spawned};
pub use executor::{Executor, ListenerId, TaskListener};
pub use host::cancel::CancelToken;
pub use host::runtime::refuse_blocking;
pub use launch::env::is_scrubbed;
pub use launch::mounts::metadata_unavailable;
pub use spec::config::{
    whole_number, Config, ConfigInput, Num, DEFAULT_GRACE_MS, DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_MAX_SPILL_BYTES, DEFAULT_MAX_TIMEOUT_MS, DEFAULT_RETAIN_SETTLED, DEFAULT_TIMEOUT_MS,
    MAX_GRACE_MS, MAX_SAFE_INTEGER,
};
pub use spec::error::{errno_name, DshError, Field, FieldName, NameStyle, Result, Scope, SpawnFailure};
pub use spec::limits::{LimitKind, Limits, LimitsEnforcement, LimitsInput, Mechanism, PerLimit};
pub use spec::request::{resolve, OnExpiry, Request, SandboxPolicyInput, Spec, DSH_ENV_PREFIX};
pub use spec::sandbox::{Enforcement, NetworkPolicy, SandboxInfo, SandboxMode, SandboxPolicy};
pub use spec::spawn::{resolve_spawn, SpawnOutput, SpawnRequest, SpawnSpec, SpawnStdin};
pub use spec::terminal::{
    dimension, resolve_terminal, TerminalProgram, TerminalRequest, TerminalSignal, TerminalSpec,
    DEFAULT_COLS, DEFAULT_ROWS,
};
pub use terminal::{
    Foreground, OutputNews, PendingWrite, Terminal, TerminalRead, TerminalTask, WriteBuffer, WRITE_PIECE,
};
pub use watch::escalation::KILL_GIVE_UP;
pub use watch::output::{CollectedOutput, OffsetRead, OutputOffsets, OutputTap, OutputValve};
pub use watch::stdin::{StdinEnd, StdinWriter, STDIN_BUFFER_BYTES};

/// The Rust examples of README.md and docs/ are doctests: `cargo test --doc`
/// compiles and runs each as written. (`scripts/run-doc-examples` runs the
/// Python, JavaScript and C ones, and checks that every page with a Rust
/// example is included here.)
#[cfg(doctest)]
mod doc_examples {
    #[doc = include_str!("../../README.md")]
    mod readme {}
    #[doc = include_str!("../../docs/requests.md")]
    mod requests {}
    #[doc = include_str!("../../docs/terminals.md")]
    mod terminals {}
}
