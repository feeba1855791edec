//! `dsh-cli [OPTIONS] [--] COMMAND` — one bash command through dsh-native.
//!
//! Meant to be scripted, so the exit status carries the outcome (shell
//! conventions, plus `timeout(1)`'s 124 and 125) and `--json` gives every
//! field of the result; see `args::HELP` and docs/cli.md for the contract.
//! The executor is always disposed before exiting: that is what guarantees
//! nothing the command started outlives dsh-cli.

mod args;
mod spill;

use std::io::{self, Read};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use dsh_core::{
    CollectedOutput, ConfigInput, DshError, Enforcement, Executor, SandboxInfo, Spec, DEFAULT_MAX_TIMEOUT_MS,
};
use nix::sys::signal::Signal;

use args::{Options, Parsed};
use dsh_cli::interrupt::Interrupt;
use dsh_cli::json::run_result_json;
use dsh_cli::status::{emit, emit_json, interrupted_status, signal_status, EXIT_CLI_ERROR, EXIT_TIMEOUT};
use spill::{Keeper, Spill};

/// How often `--background` polls for output and for a pending interrupt.
const TICK: Duration = Duration::from_millis(50);

fn main() -> ExitCode {
    let code = match args::parse(std::env::args_os().skip(1)) {
        Ok(Parsed::Help(text) | Parsed::Version(text)) => {
            print!("{text}");
            0
        }
        Ok(Parsed::Run(opts)) => run(*opts).unwrap_or_else(|msg| {
            eprintln!("dsh-cli: {msg}");
            EXIT_CLI_ERROR
        }),
        Err(msg) => {
            eprintln!("dsh-cli: {msg}\nTry 'dsh-cli --help' for more information.");
            EXIT_CLI_ERROR
        }
    };
    ExitCode::from(code)
}

fn run(mut opts: Options) -> Result<u8, String> {
    if opts.read_stdin {
        let mut input = Vec::new();
        io::stdin()
            .read_to_end(&mut input)
            .map_err(|e| format!("cannot read stdin: {e}"))?;
        opts.request.stdin = Some(input);
    }
    // Before the executor exists: its threads must inherit the blocked mask.
    let interrupt = Interrupt::install().map_err(|e| format!("cannot watch for signals: {e}"))?;
    if let Some(dir) = &opts.spill_dir {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let exec = Executor::new(config(&opts)).map_err(|e| e.to_string())?;
    let mut keeper = Keeper::new(
        opts.keep_spill,
        exec.config().spill_dir.clone(),
        opts.spill_dir.is_some(),
    );
    let outcome = exec
        .resolve(opts.request.clone())
        .map_err(|e| e.to_string())
        .and_then(|spec| {
            if opts.background {
                background(&exec, &spec, &interrupt, &mut keeper)
            } else {
                foreground(&exec, &spec, &opts, &interrupt, &mut keeper)
            }
        });
    let disposed = exec.dispose_blocking().map_err(|e| e.to_string());
    let code = outcome?;
    disposed?;
    Ok(code)
}

fn config(opts: &Options) -> ConfigInput {
    // The core clamps a request's timeout to max_timeout_ms, a guard against
    // a model asking for hours. Whoever types --timeout is the operator.
    let max_timeout_ms = opts
        .request
        .timeout_ms
        .filter(|t| t.0 > DEFAULT_MAX_TIMEOUT_MS as f64);
    ConfigInput {
        max_timeout_ms,
        spill_dir: opts.spill_dir.as_ref().map(|d| d.to_string_lossy().into_owned()),
        ..ConfigInput::default()
    }
}

fn foreground(
    exec: &Executor,
    spec: &Spec,
    opts: &Options,
    interrupt: &Interrupt,
    keeper: &mut Keeper,
) -> Result<u8, String> {
    let mut r = match exec.run_blocking(spec, Some(interrupt.token())) {
        Ok(r) => r,
        Err(DshError::AlreadyCancelled) => return Ok(interrupted_status(interrupt)),
        Err(e) => return Err(e.to_string()),
    };
    let out_spill = keeper.keep(r.stdout.spill_path.take());
    let err_spill = keeper.keep(r.stderr.spill_path.take());
    r.stdout.spill_path = out_spill.path();
    r.stderr.spill_path = err_spill.path();
    let ending = Ending {
        exit_code: r.exit_code,
        signal: r.signal.clone(),
        timed_out: r.timed_out,
        aborted: r.aborted,
        timeout_ms: r.timeout_ms,
        sandbox: r.sandbox.clone(),
    };
    let code = ending.status(interrupt);
    if opts.json {
        for failure in [&out_spill, &err_spill] {
            if let Spill::Failed(why) = failure {
                eprintln!("dsh-cli: {why}");
            }
        }
        emit_json(io::stdout().lock(), &run_result_json(&r))?;
        return Ok(code);
    }
    emit(io::stdout(), r.stdout.text.as_bytes())?;
    emit(io::stderr(), r.stderr.text.as_bytes())?;
    let mut notes = ending.notes(interrupt);
    notes.extend(truncation_note("stdout", &r.stdout, &out_spill));
    notes.extend(truncation_note("stderr", &r.stderr, &err_spill));
    summarize(&notes, r.stderr.text.ends_with('\n') || r.stderr.text.is_empty())?;
    Ok(code)
}

/// Streams `read_output` deltas until the process settles, enforcing the
/// timeout and the interrupt itself: the core gives background processes
/// no timeout, but here the caller is waiting just as in the foreground.
fn background(
    exec: &Executor,
    spec: &Spec,
    interrupt: &Interrupt,
    keeper: &mut Keeper,
) -> Result<u8, String> {
    let process = exec.start(spec).map_err(|e| e.to_string())?;
    let deadline = Instant::now().checked_add(Duration::from_millis(spec.timeout_ms));
    let (mut timed_out, mut aborted, mut lossy) = (false, false, false);
    let mut at_line_start = true;
    let last = loop {
        let wait = deadline.map_or(TICK, |d| d.saturating_duration_since(Instant::now()).min(TICK));
        let settled = process.wait_timeout(Some(wait)).map_err(|e| e.to_string())?;
        let read = process.read_output();
        lossy |= read.lossy;
        if !read.delta.is_empty() {
            at_line_start = read.delta.ends_with('\n');
            emit(io::stdout(), read.delta.as_bytes())?;
        }
        if settled {
            break read;
        }
        if !(timed_out || aborted) {
            if interrupt.token().is_cancelled() {
                aborted = process.kill();
            } else if deadline.is_some_and(|d| Instant::now() >= d) {
                timed_out = process.kill();
            }
        }
    };
    let ending = Ending {
        exit_code: process.exit_code(),
        signal: process.signal(),
        timed_out,
        aborted,
        timeout_ms: spec.timeout_ms,
        sandbox: process.sandbox(),
    };
    let mut notes = ending.notes(interrupt);
    if lossy {
        notes.push("some output was lost between reads".into());
    }
    for (name, path) in [
        ("stdout", last.stdout_spill_path),
        ("stderr", last.stderr_spill_path),
    ] {
        notes.extend(match keeper.keep(path) {
            Spill::Kept(p) => Some(format!("complete {name} in {p}")),
            Spill::Dropped if lossy => Some(format!("--keep-spill keeps the complete {name}")),
            Spill::Failed(why) => Some(why),
            _ => None,
        });
    }
    if ending.exit_code.is_none() && ending.signal.is_none() {
        // Settled without running: the reason is in its output.
        notes.push("the command could not be started".into());
        summarize(&notes, at_line_start)?;
        return Ok(EXIT_CLI_ERROR);
    }
    summarize(&notes, at_line_start)?;
    Ok(ending.status(interrupt))
}

/// How a command ended, from either mode.
struct Ending {
    exit_code: Option<i32>,
    signal: Option<String>,
    timed_out: bool,
    aborted: bool,
    timeout_ms: u64,
    sandbox: Option<SandboxInfo>,
}

impl Ending {
    /// The exit status, in order of precedence: an interrupt, a timeout, a
    /// signal (128+N, as a shell reports it), the exit code.
    fn status(&self, interrupt: &Interrupt) -> u8 {
        if self.aborted {
            return interrupted_status(interrupt);
        }
        if self.timed_out {
            return EXIT_TIMEOUT;
        }
        if let Some(name) = &self.signal {
            return signal_status(name);
        }
        self.exit_code
            .and_then(|c| u8::try_from(c).ok())
            .unwrap_or(EXIT_CLI_ERROR)
    }

    fn notes(&self, interrupt: &Interrupt) -> Vec<String> {
        let mut notes = Vec::new();
        if self.aborted {
            let name = interrupt
                .signal()
                .and_then(|s| Signal::try_from(s).ok())
                .map_or("an interrupt", Signal::as_str);
            notes.push(format!("stopped by {name}"));
        }
        if self.timed_out {
            notes.push(format!("timed out after {} ms", self.timeout_ms));
        }
        if let Some(sig) = &self.signal {
            notes.push(format!("killed by {sig}"));
        }
        if let Some(s) = &self.sandbox {
            if s.denied {
                notes.push(format!("the {} sandbox denied a file operation", s.mode));
            }
            if s.enforcement == Some(Enforcement::Partial) {
                notes.push(format!("{} sandbox only partly enforced by this kernel", s.mode));
            }
            if s.runner_failed == Some(true) {
                notes.push("sandbox could not be applied".into());
            }
        }
        notes
    }
}

fn truncation_note(name: &str, out: &CollectedOutput, spill: &Spill) -> Option<String> {
    if !out.truncated {
        return None;
    }
    Some(match spill {
        Spill::Kept(p) => format!("{name} truncated, complete stream in {p}"),
        Spill::Dropped => format!("{name} truncated (--keep-spill keeps the complete stream)"),
        Spill::None => format!("{name} truncated, complete stream not kept (too large or unwritable)"),
        Spill::Failed(why) => format!("{name} truncated, {why}"),
    })
}

/// One line on stderr, only when there is something to say.
fn summarize(notes: &[String], at_line_start: bool) -> Result<(), String> {
    if notes.is_empty() {
        return Ok(());
    }
    let sep = if at_line_start { "" } else { "\n" };
    emit(
        io::stderr(),
        format!("{sep}dsh-cli: {}\n", notes.join("; ")).as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    /// What `--json` prints for `r`, without its newline.
    fn result_json(r: &dsh_core::RunResult) -> String {
        let mut line = Vec::new();
        emit_json(&mut line, &run_result_json(r)).unwrap();
        assert_eq!(line.pop(), Some(b'\n'));
        String::from_utf8(line).unwrap()
    }

    /// A string as the `--json` output writes one.
    fn esc(s: &str) -> String {
        serde_json::to_string(s).unwrap()
    }

    #[test]
    fn escapes_quotes_and_backslashes() {
        assert_eq!(esc(r#"say "hi" \o/"#), r#""say \"hi\" \\o/""#);
        assert_eq!(esc(""), r#""""#);
    }

    #[test]
    fn escapes_every_control_character() {
        assert_eq!(esc("a\nb\rc\td"), r#""a\nb\rc\td""#);
        assert_eq!(esc("\u{8}\u{c}"), r#""\b\f""#);
        assert_eq!(esc("\0\u{1}\u{1b}[0m\u{1f}"), r#""\u0000\u0001\u001b[0m\u001f""#);
        for c in (0u32..0x20).filter_map(char::from_u32) {
            let e = esc(&c.to_string());
            assert!(e.chars().all(|c| c >= ' '), "{c:?} escaped as {e}");
        }
    }

    #[test]
    fn keeps_non_ascii_as_utf8() {
        assert_eq!(esc("é€😀 \u{7f} \u{2028}"), "\"é€😀 \u{7f} \u{2028}\"");
    }

    #[test]
    fn objects_nest_and_print_null() {
        #[derive(Serialize)]
        struct Inner {
            text: &'static str,
            n: Option<u64>,
        }
        #[derive(Serialize)]
        struct Empty {}
        #[derive(Serialize)]
        struct Outer {
            a: i32,
            b: bool,
            o: Inner,
            e: Empty,
        }
        let inner = Inner {
            text: "x\"y",
            n: None,
        };
        let json = serde_json::to_string(&Outer {
            a: 1,
            b: true,
            o: inner,
            e: Empty {},
        })
        .unwrap();
        assert_eq!(json, r#"{"a":1,"b":true,"o":{"text":"x\"y","n":null},"e":{}}"#);
    }

    #[test]
    fn json_has_every_result_field() {
        let r = dsh_core::RunResult {
            exit_code: None,
            signal: Some("SIGKILL".into()),
            exit_status_unavailable: false,
            timed_out: false,
            aborted: false,
            timeout_ms: 5,
            stdout: CollectedOutput {
                text: "a\n".into(),
                truncated: true,
                spill_path: Some("/k/stdout.log".into()),
                spill_error: None,
            },
            stderr: CollectedOutput {
                text: String::new(),
                truncated: false,
                spill_path: None,
                spill_error: Some("the stream passed max_spill_bytes (9)".into()),
            },
            sandbox: Some(SandboxInfo {
                mode: dsh_core::SandboxMode::ReadOnly,
                denied: true,
                enforcement: Some(Enforcement::Full),
                metadata: true,
                runner_failed: None,
                network: dsh_core::NetworkPolicy::Deny,
                network_enforcement: Some(Enforcement::Full),
            }),
            survivors: 0,
            background_id: None,
            limit: Some(dsh_core::LimitKind::Memory),
            limits_enforcement: dsh_core::LimitsEnforcement {
                memory_bytes: Some(dsh_core::Mechanism::CgroupV1),
                ..Default::default()
            },
        };
        assert_eq!(
            result_json(&r),
            concat!(
                r#"{"exit_code":null,"signal":"SIGKILL","exit_status_unavailable":false,"timed_out":false,"aborted":false,"timeout_ms":5,"#,
                r#""stdout":{"text":"a\n","truncated":true,"spill_path":"/k/stdout.log","spill_error":null},"#,
                r#""stderr":{"text":"","truncated":false,"spill_path":null,"spill_error":"the stream passed max_spill_bytes (9)"},"#,
                r#""sandbox":{"mode":"read-only","denied":true,"enforcement":"full","metadata":true,"runner_failed":null,"network":"deny","network_enforcement":"full"},"#,
                r#""survivors":0,"background_id":null,"limit":"memory","limits_enforcement":{"memory":"cgroup-v1"}}"#
            )
        );
    }
}
