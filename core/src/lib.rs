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

mod callbacks;
mod cancel;
mod clone_exec;
mod config;
mod confine;
mod env;
mod error;
mod executor;
mod foreground;
mod forked;
mod governor;
mod host_loop;
mod landlock;
mod launch;
mod limits;
mod netfilter;
mod output;
mod process;
mod pty;
mod request;
mod run;
mod runtime;
mod sandbox;
mod spawn;
mod spill;
mod stdin;
mod supervise;
mod supervisor;
mod terminal;
mod tree;

pub use cancel::CancelToken;
pub use config::{
    whole_number, Config, ConfigInput, Num, DEFAULT_GRACE_MS, DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_MAX_SPILL_BYTES, DEFAULT_MAX_TIMEOUT_MS, DEFAULT_TIMEOUT_MS, MAX_GRACE_MS, MAX_SAFE_INTEGER,
};
pub use env::is_scrubbed;
pub use error::{errno_name, DshError, Field, FieldName, NameStyle, Result, Scope, SpawnFailure};
pub use executor::{Executor, ListenerId, TaskListener};
pub use governor::limits_support;
pub use host_loop::{HostLoop, HostRun};
pub use limits::{LimitKind, Limits, LimitsEnforcement, LimitsInput, Mechanism};
pub use output::CollectedOutput;
pub use process::{Process, ProcessRead, Status, WaiterId};
pub use request::{resolve, OnExpiry, Request, SandboxPolicyInput, Spec, DSH_ENV_PREFIX};
pub use run::{RunFuture, RunResult};
pub use runtime::refuse_blocking;
pub use sandbox::{Enforcement, NetworkPolicy, SandboxInfo, SandboxMode, SandboxPolicy};
pub use stdin::{StdinEnd, STDIN_BUFFER_BYTES};
pub use terminal::{
    dimension, resolve_terminal, Foreground, PendingWrite, Terminal, TerminalProgram, TerminalRead,
    TerminalRequest, TerminalSignal, TerminalSpec, DEFAULT_COLS, DEFAULT_ROWS,
};

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
