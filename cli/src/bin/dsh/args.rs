//! `dsh`'s grammar: clap (derive) reads the arguments, the help is our own
//! text, and every error is our own message naming the option at fault.

use std::collections::BTreeMap;
use std::error::Error as _;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use clap::builder::{OsStringValueParser, TypedValueParser};
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{ArgAction, Args, Parser, Subcommand};
use dsh_cli::values::{env_var, millis, sandbox_mode, text};
use dsh_core::{LimitsInput, NetworkPolicy, Num, SandboxMode};

pub const HELP: &str = "\
usage: dsh COMMAND ...

dsh-native from the command line.

Commands:
  run         run one command, its output streamed live (dsh run --help)
  serve       serve the JSON-RPC protocol on stdio or a unix socket, for a
              remote executor (dsh serve --help)

Options:
  -h, --help     print this help and exit
  -V, --version  print the version and exit
";

pub const RUN_HELP: &str = "\
usage: dsh run [OPTIONS] [--] WORD...

Runs a command through a dsh-native executor and streams its stdout and
stderr live, byte for byte (binary safe), to dsh's own. One WORD is a bash
command line, as `bash -c` takes it: dsh run -- 'make && make test'. Several
WORDs are a program and its arguments, each passed as it is (bash gets
them as \"$@\"): dsh run -- sh -c 'echo $0' x. The first WORD ends the
options: everything after it is the command's.

The command reads dsh's own stdin, as `timeout` or `env` would pass it. It
runs in a process tree of its own: when it ends, times out or dsh is
interrupted, every process it started is ended too (SIGTERM, SIGKILL after
the grace). So too when dsh's stdout and stderr are both pipes or sockets
and both lose their reader (a dropped SSH connection): exit status 129.

Options:
  -h, --help              print this help and exit
      --timeout MS        stop the command after MS milliseconds (default:
                          no timeout); exit status 124
      --grace MS          SIGTERM-to-SIGKILL grace when it is stopped
                          (default 3000)
      --workdir DIR       run in DIR (default: the current directory)
      --env NAME=VALUE    set a variable (repeatable). The inherited
                          environment is scrubbed of names that look like
                          credentials (*KEY*, *TOKEN*, *SECRET*, *PASSWORD*,
                          DSH_*): pass those explicitly
      --unset NAME        remove an inherited variable (repeatable)
      --stdin-file FILE   the command reads FILE instead of dsh's stdin
      --no-stdin          the command's stdin is /dev/null
      --sandbox MODE      read-only | workspace-write | danger-full-access
      --workspace DIR     the writable root of workspace-write (default: the
                          workdir)
      --network MODE      allow | deny | loopback (default allow)
      --memory BYTES      memory of the whole tree (K, M, G suffixes: KiB...)
      --processes N       processes and threads alive at once in the tree
      --cpu-seconds N     CPU seconds per process
      --file-size BYTES   largest file a process may write
      --open-files N      descriptors a process may hold
      --json              collect the output instead and print one JSON
                          object with every fact of the run
      --max-output BYTES  with --json: keep the last BYTES of each stream
                          (default 64000)
  --                      end of options: the next argument is the first WORD

Exit status:
  N        the command exited with status N
  128+N    the command was killed by signal N (137 for SIGKILL)
  124      the command timed out (it was stopped)
  125      dsh itself failed: bad usage, the command could not be started
  129      every reader of dsh's output went away (see above), or SIGHUP
  130      dsh was interrupted (SIGINT) and stopped the command; SIGTERM
           likewise, with 143
A command can exit with 124, 125 or 130 itself; --json tells them apart.
";

pub const SERVE_HELP: &str = "\
usage: dsh serve --stdio [--linger SECONDS [--socket PATH]]
       dsh serve --listen unix:PATH [--linger SECONDS]

Serves dsh-native's protocol (JSON-RPC 2.0, one message per line;
docs/protocol.md), so that a harness on another machine drives an executor
here: ssh build-1 dsh serve --stdio, kubectl exec -i POD -- dsh serve --stdio.

Each connection has an executor of its own. When a connection ends (its
input closes, its output cannot be written), everything it started is
stopped (SIGTERM, SIGKILL after the grace) and awaited.

Options:
  -h, --help          print this help and exit
      --stdio         one connection: dsh's stdin and stdout. Nothing else
                      is written to stdout; dsh exits when it ends
      --listen unix:PATH
                      accept connections on a unix socket made at PATH,
                      mode 0600 (only this user may connect), until SIGINT,
                      SIGTERM or SIGHUP; PATH is removed then. There is no TCP
                      listener: use ssh, which authenticates
      --linger SECONDS
                      when a connection ends without dispose, keep its
                      session (its processes and their output) SECONDS
                      for a connection that sends initialize {resume:
                      TOKEN}. With --stdio, dsh relays to a server of this
                      user's that outlives the connection (started when
                      none listens), at --socket PATH (default
                      $XDG_RUNTIME_DIR/dsh/serve.sock, else
                      /tmp/dsh-UID/serve.sock)
";

/// What to do.
#[derive(Debug)]
pub enum Parsed {
    /// Print a text (a help, the version) and exit 0.
    Text(String),
    Run(Box<RunRequest>),
    Serve(Listen),
}

/// Where `dsh serve` takes its connections.
#[derive(Debug, PartialEq, Eq)]
pub enum Listen {
    /// One connection on stdio; with a linger, relayed to the user's
    /// lingering server at this socket.
    Stdio {
        linger: Option<u64>,
        socket: Option<PathBuf>,
    },
    Unix {
        path: PathBuf,
        linger: Option<u64>,
        /// The server a relay started: it exits once nothing is left.
        exit_when_idle: bool,
    },
}

/// A `dsh run`, as typed: the core resolves and checks it.
#[derive(Debug, Default)]
pub struct RunRequest {
    pub words: Vec<String>,
    pub timeout_ms: Option<u64>,
    pub grace_ms: Option<u64>,
    pub workdir: Option<PathBuf>,
    /// `Some`: set; `None`: removed.
    pub env: BTreeMap<String, Option<String>>,
    pub stdin: StdinFrom,
    pub sandbox: Option<SandboxMode>,
    pub workspace: Option<PathBuf>,
    pub network: Option<NetworkPolicy>,
    pub limits: LimitsInput,
    pub json: bool,
    pub max_output: Option<u64>,
}

/// Where the command's stdin comes from.
#[derive(Debug, Default, PartialEq, Eq)]
pub enum StdinFrom {
    #[default]
    Inherited,
    File(PathBuf),
    Nothing,
}

#[derive(Parser, Debug)]
#[command(
    name = "dsh",
    version,
    override_help = HELP,
    no_binary_name = true,
    disable_help_flag = true,
    disable_version_flag = true,
    disable_help_subcommand = true
)]
struct Cli {
    #[arg(short = 'h', long, action = ArgAction::Help)]
    help: Option<bool>,
    #[arg(short = 'V', long, action = ArgAction::Version)]
    version: Option<bool>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    #[command(override_help = RUN_HELP, disable_help_flag = true, args_override_self = true)]
    Run(Box<RunArgs>),
    #[command(override_help = SERVE_HELP, disable_help_flag = true, args_override_self = true)]
    Serve(ServeArgs),
}

#[derive(Args, Debug)]
struct ServeArgs {
    #[arg(short = 'h', long, action = ArgAction::Help)]
    help: Option<bool>,
    #[arg(long, conflicts_with = "listen")]
    stdio: bool,
    #[arg(long, value_parser = OsStringValueParser::new())]
    listen: Option<OsString>,
    #[arg(long, allow_hyphen_values = true, value_parser = count("--linger"))]
    linger: Option<u64>,
    #[arg(long, value_parser = OsStringValueParser::new())]
    socket: Option<OsString>,
    #[arg(long, hide = true)]
    exit_when_idle: bool,
}

fn serve_listen(a: ServeArgs) -> Result<Listen, String> {
    let path = |o: OsString| PathBuf::from(OsString::from_vec(o.into_vec()));
    if a.linger == Some(0) {
        return Err("option '--linger' must be at least 1 second".into());
    }
    // In milliseconds it crosses the protocol as a JSON number: exact only
    // up to 2^53 - 1.
    const MAX_LINGER_SECONDS: u64 = ((1 << 53) - 1) / 1000;
    if a.linger.is_some_and(|l| l > MAX_LINGER_SECONDS) {
        return Err(format!(
            "option '--linger' must be at most {MAX_LINGER_SECONDS} seconds"
        ));
    }
    if a.socket.is_some() && !(a.stdio && a.linger.is_some()) {
        return Err("--socket is for --stdio --linger (the lingering server to relay to)".into());
    }
    match (a.stdio, a.listen) {
        (true, _) => Ok(Listen::Stdio {
            linger: a.linger,
            socket: a.socket.map(path),
        }),
        (false, Some(addr)) => {
            let addr = OsString::from_vec(addr.into_vec());
            match addr.as_encoded_bytes().strip_prefix(b"unix:") {
                Some(p) if !p.is_empty() => Ok(Listen::Unix {
                    path: PathBuf::from(OsString::from_vec(p.to_vec())),
                    linger: a.linger,
                    exit_when_idle: a.exit_when_idle,
                }),
                _ => Err(format!(
                    "option '--listen' expects unix:PATH (there is no TCP listener: use ssh), got {addr:?}"
                )),
            }
        }
        (false, None) => Err("dsh serve needs --stdio or --listen unix:PATH".into()),
    }
}

#[derive(Args, Debug)]
struct RunArgs {
    #[arg(short = 'h', long, action = ArgAction::Help)]
    help: Option<bool>,
    #[arg(long, allow_hyphen_values = true, value_parser = millis("--timeout"))]
    timeout: Option<u64>,
    #[arg(long, allow_hyphen_values = true, value_parser = millis("--grace"))]
    grace: Option<u64>,
    #[arg(long, allow_hyphen_values = true, value_parser = OsStringValueParser::new())]
    workdir: Option<OsString>,
    #[arg(long, allow_hyphen_values = true, value_parser = env_var())]
    env: Vec<(String, String)>,
    #[arg(long, allow_hyphen_values = true, value_parser = text("--unset"))]
    unset: Vec<String>,
    #[arg(long, allow_hyphen_values = true, value_parser = OsStringValueParser::new())]
    #[arg(conflicts_with = "no_stdin")]
    stdin_file: Option<OsString>,
    #[arg(long)]
    no_stdin: bool,
    #[arg(long, allow_hyphen_values = true, value_parser = sandbox_mode())]
    sandbox: Option<SandboxMode>,
    #[arg(long, allow_hyphen_values = true, value_parser = OsStringValueParser::new())]
    workspace: Option<OsString>,
    #[arg(long, allow_hyphen_values = true, value_parser = network())]
    network: Option<NetworkPolicy>,
    #[arg(long, allow_hyphen_values = true, value_parser = bytes("--memory"))]
    memory: Option<u64>,
    #[arg(long, allow_hyphen_values = true, value_parser = count("--processes"))]
    processes: Option<u64>,
    #[arg(long, allow_hyphen_values = true, value_parser = count("--cpu-seconds"))]
    cpu_seconds: Option<u64>,
    #[arg(long, allow_hyphen_values = true, value_parser = bytes("--file-size"))]
    file_size: Option<u64>,
    #[arg(long, allow_hyphen_values = true, value_parser = count("--open-files"))]
    open_files: Option<u64>,
    #[arg(long)]
    json: bool,
    #[arg(long, allow_hyphen_values = true, value_parser = bytes("--max-output"))]
    max_output: Option<u64>,
    /// The first word ends the options (as for `timeout` and `env`).
    #[arg(value_name = "WORD", trailing_var_arg = true)]
    #[arg(value_parser = OsStringValueParser::new())]
    words: Vec<OsString>,
}

pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, String> {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                    Ok(Parsed::Text(e.render().to_string()))
                }
                _ => Err(usage_error(&e)),
            }
        }
    };
    match cli.command {
        None => Err("no command given (dsh run ...)".into()),
        Some(Command::Run(run)) => run_request(*run).map(|r| Parsed::Run(Box::new(r))),
        Some(Command::Serve(serve)) => serve_listen(serve).map(Parsed::Serve),
    }
}

fn run_request(a: RunArgs) -> Result<RunRequest, String> {
    if a.words.is_empty() {
        return Err("no command given (dsh run -- WORD...)".into());
    }
    let words = a
        .words
        .into_iter()
        .map(|w| {
            w.into_string()
                .map_err(|w| format!("the command is not valid UTF-8: {w:?}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if a.workspace.is_some() && a.sandbox.is_none() {
        return Err("--workspace needs --sandbox (the root it names is a sandbox's)".into());
    }
    if a.max_output.is_some() && !a.json {
        return Err("--max-output needs --json (without it nothing is kept: the output streams)".into());
    }
    let mut env: BTreeMap<String, Option<String>> = BTreeMap::new();
    for name in a.unset {
        env.insert(name, None);
    }
    for (name, value) in a.env {
        env.insert(name, Some(value));
    }
    // Past 2^53 a number is not exact in the core's (JSON-safe) numbers.
    if let Some(t) = a.timeout.filter(|t| *t > dsh_core::MAX_SAFE_INTEGER) {
        return Err(format!(
            "option '--timeout' must be at most {}, got {t}",
            dsh_core::MAX_SAFE_INTEGER
        ));
    }
    let path = |o: OsString| PathBuf::from(OsString::from_vec(o.into_vec()));
    let num = |v: Option<u64>| v.map(|n| Num(n as f64));
    Ok(RunRequest {
        words,
        timeout_ms: a.timeout,
        grace_ms: a.grace,
        workdir: a.workdir.map(path),
        env,
        stdin: match (a.stdin_file, a.no_stdin) {
            (Some(f), _) => StdinFrom::File(path(f)),
            (None, true) => StdinFrom::Nothing,
            (None, false) => StdinFrom::Inherited,
        },
        sandbox: a.sandbox,
        workspace: a.workspace.map(path),
        network: a.network,
        limits: LimitsInput {
            memory_bytes: num(a.memory),
            processes: num(a.processes),
            cpu_seconds: num(a.cpu_seconds),
            file_size_bytes: num(a.file_size),
            open_files: num(a.open_files),
        },
        json: a.json,
        max_output: a.max_output,
    })
}

/// The message for an error of clap's: the value parsers' own message, or
/// one that names the option clap refused.
fn usage_error(e: &clap::Error) -> String {
    if e.kind() == ErrorKind::ValueValidation {
        if let Some(ours) = e.source() {
            return ours.to_string();
        }
    }
    let arg = match e
        .get(ContextKind::InvalidArg)
        .or(e.get(ContextKind::InvalidSubcommand))
    {
        Some(ContextValue::String(arg)) => arg.split(' ').next().unwrap_or(arg).to_owned(),
        _ => String::new(),
    };
    match e.kind() {
        ErrorKind::UnknownArgument if !arg.starts_with('-') => format!("unexpected argument '{arg}'"),
        ErrorKind::UnknownArgument => format!("unknown option '{arg}'"),
        ErrorKind::InvalidSubcommand => format!("unknown command '{arg}' (dsh run ..., dsh serve ...)"),
        ErrorKind::InvalidValue => format!("option '{arg}' needs a value"),
        ErrorKind::TooManyValues => format!("option '{arg}' takes no value"),
        ErrorKind::ArgumentConflict => match e.get(ContextKind::PriorArg) {
            Some(ContextValue::String(prior)) => {
                format!(
                    "{} and {arg} cannot be combined",
                    prior.split(' ').next().unwrap_or(prior)
                )
            }
            _ => format!("{arg} cannot be combined with an option given before it"),
        },
        _ => e.kind().as_str().map_or_else(|| e.to_string(), str::to_owned),
    }
}

fn network() -> impl TypedValueParser<Value = NetworkPolicy> {
    text("--network").try_map(|v| match v.as_str() {
        "allow" => Ok(NetworkPolicy::Allow),
        "deny" => Ok(NetworkPolicy::Deny),
        "loopback" => Ok(NetworkPolicy::Loopback),
        _ => Err(format!(
            "option '--network': unknown mode '{v}' (expected allow, deny or loopback)"
        )),
    })
}

/// A whole number.
fn count(option: &'static str) -> impl TypedValueParser<Value = u64> {
    text(option).try_map(move |v| {
        v.parse()
            .map_err(|_| format!("option '{option}' expects a whole number, got '{v}'"))
    })
}

/// Bytes: a whole number, optionally with a K, M or G suffix (KiB, MiB,
/// GiB; either case, an optional trailing `B` or `iB`).
fn bytes(option: &'static str) -> impl TypedValueParser<Value = u64> {
    text(option).try_map(move |v| {
        parse_bytes(&v).ok_or_else(|| {
            format!("option '{option}' expects a number of bytes (512, 64K, 100M, 2G), got '{v}'")
        })
    })
}

fn parse_bytes(v: &str) -> Option<u64> {
    let lower = v.to_ascii_lowercase();
    let s = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (digits, shift) = match s.char_indices().last()? {
        (i, 'k') => (&s[..i], 10),
        (i, 'm') => (&s[..i], 20),
        (i, 'g') => (&s[..i], 30),
        _ => (s, 0),
    };
    let n: u64 = digits.parse().ok()?;
    n.checked_mul(1u64 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<RunRequest, String> {
        match parse(args.iter().map(OsString::from))? {
            Parsed::Run(r) => Ok(*r),
            other => panic!("expected a run, got {other:?}"),
        }
    }

    #[test]
    fn the_first_word_ends_the_options() {
        let r = run(&["run", "--timeout", "5", "sh", "-c", "echo $0", "--json"]).unwrap();
        assert_eq!(r.words, ["sh", "-c", "echo $0", "--json"]);
        assert_eq!(r.timeout_ms, Some(5));
        assert!(!r.json);
        let r = run(&["run", "--", "--json"]).unwrap();
        assert_eq!(r.words, ["--json"]);
    }

    #[test]
    fn env_unset_and_stdin() {
        let r = run(&["run", "--env", "A=b=c", "--unset", "HOME", "--no-stdin", "x"]).unwrap();
        assert_eq!(r.env["A"], Some("b=c".into()));
        assert_eq!(r.env["HOME"], None);
        assert_eq!(r.stdin, StdinFrom::Nothing);
        let r = run(&["run", "--stdin-file", "/f", "x"]).unwrap();
        assert_eq!(r.stdin, StdinFrom::File("/f".into()));
    }

    #[test]
    fn byte_sizes_take_suffixes() {
        for (v, n) in [
            ("512", 512),
            ("64K", 64 << 10),
            ("100m", 100 << 20),
            ("2GiB", 2 << 30),
            ("1kb", 1024),
        ] {
            assert_eq!(parse_bytes(v), Some(n), "{v}");
        }
        for v in ["", "K", "1.5M", "-1", "1T", "99999999999999999999G"] {
            assert_eq!(parse_bytes(v), None, "{v}");
        }
    }

    #[test]
    fn errors_name_the_option() {
        for (args, needle) in [
            (&["run", "--bogus", "x"][..], "'--bogus'"),
            (&["run", "--timeout", "soon", "x"], "'--timeout'"),
            (&["run", "--memory", "lots", "x"], "'--memory'"),
            (&["run", "--network", "tcp", "x"], "'--network'"),
            (&["run", "--workspace", "/w", "x"], "--workspace"),
            (&["run", "--max-output", "5", "x"], "--max-output"),
            (&["run", "--stdin-file", "/f", "--no-stdin", "x"], "--no-stdin"),
            (&["run"], "no command"),
            (&["walk"], "'walk'"),
            (&["serve"], "--stdio or --listen"),
            (&["serve", "--listen", "tcp:1"], "'--listen'"),
            (&["serve", "--listen", "unix:"], "'--listen'"),
            (&["serve", "--stdio", "--listen", "unix:/s"], "cannot be combined"),
            (&["serve", "--stdio", "--linger", "0"], "'--linger'"),
            (&["serve", "--stdio", "--linger", "soon"], "'--linger'"),
            (&["serve", "--stdio", "--socket", "/s"], "--socket"),
            (&["serve", "--stdio", "extra"], "unexpected argument 'extra'"),
            (
                &["serve", "--stdio", "--linger", "99999999999999999"],
                "at most 9007199254740 seconds",
            ),
            (&["serve", "--listen", "unix:/s", "--stdio"], "cannot be combined"),
            (&[], "no command"),
        ] {
            let err = match parse(args.iter().map(OsString::from)) {
                Err(e) => e,
                Ok(p) => panic!("{args:?}: parsed {p:?}"),
            };
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }

    #[test]
    fn helps_and_version_are_printed_as_written() {
        let text = |args: &[&str]| match parse(args.iter().map(OsString::from)) {
            Ok(Parsed::Text(t)) => t,
            other => panic!("{args:?}: {other:?}"),
        };
        assert_eq!(text(&["--help"]), HELP);
        assert_eq!(text(&["run", "--help"]), RUN_HELP);
        assert_eq!(text(&["serve", "--help"]), SERVE_HELP);
        assert_eq!(
            text(&["--version"]),
            concat!("dsh ", env!("CARGO_PKG_VERSION"), "\n")
        );
    }
}
