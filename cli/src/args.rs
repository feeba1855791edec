//! Command-line parsing: clap (derive) reads the arguments; the help is
//! our own text (`HELP`, which clap prints through `override_help`), and
//! every error is our own message naming the argument at fault, because the
//! caller is often a script or a model that has to fix it without a human
//! reading the help. The value parsers below give the messages for bad
//! values; `usage_error` those for what clap itself refuses.

use std::collections::BTreeMap;
use std::error::Error as _;
use std::ffi::OsString;
use std::path::PathBuf;

use clap::builder::{OsStringValueParser, TypedValueParser};
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{ArgAction, Parser};
use dsh_cli::values::{env_var, millis, sandbox_mode, text};
use dsh_core::{Num, Request, SandboxMode, SandboxPolicyInput};

pub const HELP: &str = "\
usage: dsh-cli [OPTIONS] [--] COMMAND

Runs COMMAND with `bash -c` through a dsh-native executor: its own process
group, a timeout, bounded output, and every process of the command killed
when it ends, times out or is interrupted.

The command's stdout goes to stdout and its stderr to stderr (collected, then
written when it ends); a one-line summary follows on stderr only when
something is noteworthy (truncated output, a timeout, a signal, an interrupt,
a sandbox denial).

Options:
  -h, --help              print this help and exit
  -V, --version           print the version and exit
      --timeout MS        kill the command after MS milliseconds (default
                          120000): SIGTERM to all its processes, SIGKILL
                          3 s later; also --timeout-ms
      --workdir DIR       run in DIR (default: the current directory); any
                          bytes, UTF-8 or not
      --env NAME=VALUE    set a variable for the command (repeatable); the
                          inherited environment is scrubbed of names that look
                          like credentials (*KEY*, *TOKEN*, *SECRET*,
                          *PASSWORD*, DSH_*), so pass those explicitly
      --stdin             read all of dsh-cli's stdin and give it to the
                          command (otherwise the command's stdin is empty)
      --sandbox MODE      read-only | workspace-write | danger-full-access
                          (Landlock; workspace-write opens the workdir)
      --background        start the command as a background process and
                          stream its output as it arrives (stderr sections
                          are marked [stderr]) until it ends
      --json              print one JSON object with every result field
                          instead of the output (not with --background)
      --keep-spill        keep the files holding the complete stream of a
                          truncated stdout/stderr and print their paths
                          (default dir: a new dsh-cli-XXXX in the temp dir)
      --spill-dir DIR     keep spill files in DIR (implies --keep-spill)
  --                      end of options: the next argument is COMMAND

Exit status:
  N        the command exited with status N
  128+N    the command was killed by signal N (137 for SIGKILL)
  124      the command timed out (it was killed)
  125      dsh-cli itself failed: bad usage, the command could not be
           started (missing workdir, sandbox unavailable), executor error
  130      interrupted by Ctrl-C (SIGINT); the command was killed.
           SIGTERM and SIGHUP to dsh-cli likewise kill the command and exit
           with 143 and 129
A command can exit with 124, 125 or 130 itself; --json tells them apart.
";

#[derive(Debug)]
pub struct Options {
    pub request: Request,
    pub background: bool,
    pub json: bool,
    pub read_stdin: bool,
    pub keep_spill: bool,
    pub spill_dir: Option<PathBuf>,
}

/// What to do: run a command, or print a text (the help, the version) and
/// exit 0.
#[derive(Debug)]
pub enum Parsed {
    Run(Box<Options>),
    Help(String),
    Version(String),
}

/// The grammar. Options may come before or after COMMAND and `--` ends
/// them (clap's own rules); an option that takes a value takes the next
/// argument whatever it looks like (`allow_hyphen_values`), as `--workdir
/// --json` always has. A repeated option's last value wins.
#[derive(Parser, Debug)]
#[command(
    name = "dsh-cli",
    version,
    override_help = HELP,
    no_binary_name = true,
    args_override_self = true,
    disable_help_flag = true,
    disable_version_flag = true
)]
struct Cli {
    #[arg(short = 'h', long, action = ArgAction::Help)]
    help: Option<bool>,
    #[arg(short = 'V', long, action = ArgAction::Version)]
    version: Option<bool>,
    // Two options rather than an alias, so that an error names the one typed.
    #[arg(long, allow_hyphen_values = true, value_parser = millis("--timeout"))]
    #[arg(overrides_with = "timeout_ms")]
    timeout: Option<u64>,
    #[arg(long, allow_hyphen_values = true, value_parser = millis("--timeout-ms"))]
    #[arg(overrides_with = "timeout")]
    timeout_ms: Option<u64>,
    // Bytes: a path need not be UTF-8.
    #[arg(long, allow_hyphen_values = true, value_parser = OsStringValueParser::new())]
    workdir: Option<OsString>,
    #[arg(long, allow_hyphen_values = true, value_parser = env_var())]
    env: Vec<(String, String)>,
    #[arg(long = "stdin")]
    read_stdin: bool,
    #[arg(long, allow_hyphen_values = true, value_parser = sandbox_mode())]
    sandbox: Option<SandboxMode>,
    #[arg(long)]
    background: bool,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    keep_spill: bool,
    // Text: the executor's spill_dir is a string.
    #[arg(long, allow_hyphen_values = true, value_parser = text("--spill-dir"))]
    spill_dir: Option<String>,
    // Every positional argument, so that a second one can be named next to
    // the first in its error.
    #[arg(value_name = "COMMAND", value_parser = command())]
    command: Vec<String>,
}

pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, String> {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            return match e.kind() {
                ErrorKind::DisplayHelp => Ok(Parsed::Help(e.render().to_string())),
                ErrorKind::DisplayVersion => Ok(Parsed::Version(e.render().to_string())),
                _ => Err(usage_error(&e)),
            }
        }
    };
    let mut command = cli.command.into_iter();
    let Some(first) = command.next() else {
        return Err("no COMMAND given".into());
    };
    if let Some(second) = command.next() {
        return Err(format!(
            "unexpected argument '{second}' after COMMAND '{first}' (quote the whole command as one argument)"
        ));
    }
    if cli.json && cli.background {
        return Err("--json cannot be combined with --background (its output is a stream)".into());
    }
    let env: BTreeMap<String, String> = cli.env.into_iter().collect();
    let request = Request {
        command: first,
        workdir: cli.workdir.map(PathBuf::from),
        timeout_ms: cli.timeout.or(cli.timeout_ms).map(|ms| Num(ms as f64)),
        env: (!env.is_empty()).then_some(env),
        sandbox_policy: cli.sandbox.map(|mode| SandboxPolicyInput {
            mode,
            workspace_root: None,
            session_id: None,
            network: None,
        }),
        ..Request::default()
    };
    Ok(Parsed::Run(Box::new(Options {
        request,
        background: cli.background,
        json: cli.json,
        read_stdin: cli.read_stdin,
        keep_spill: cli.keep_spill || cli.spill_dir.is_some(),
        spill_dir: cli.spill_dir.map(PathBuf::from),
    })))
}

/// The message for an error of clap's: the value parsers' own message, or
/// one that names the option (or argument) clap refused.
fn usage_error(e: &clap::Error) -> String {
    if e.kind() == ErrorKind::ValueValidation {
        if let Some(ours) = e.source() {
            return ours.to_string();
        }
    }
    // "--workdir <WORKDIR>" names the option and its value; keep the option.
    let arg = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => arg.split(' ').next().unwrap_or(arg),
        _ => "",
    };
    match e.kind() {
        ErrorKind::UnknownArgument => format!("unknown option '{arg}'"),
        ErrorKind::InvalidValue => format!("option '{arg}' needs {}", what(arg)),
        // `--json=yes`
        ErrorKind::TooManyValues => format!("option '{arg}' takes no value"),
        // Not reached with this grammar; clap's own words, without its prefix.
        _ => e.kind().as_str().map_or_else(|| e.to_string(), str::to_owned),
    }
}

/// What an option's missing value should have been.
fn what(option: &str) -> &'static str {
    match option {
        "--timeout" | "--timeout-ms" => "a number of milliseconds",
        "--workdir" | "--spill-dir" => "a directory",
        "--env" => "NAME=VALUE",
        "--sandbox" => "a mode",
        _ => "a value",
    }
}

fn command() -> impl TypedValueParser<Value = String> {
    OsStringValueParser::new().try_map(|a| {
        a.into_string()
            .map_err(|a| format!("COMMAND is not valid UTF-8: {a:?}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Options, String> {
        match parse(args.iter().map(OsString::from))? {
            Parsed::Run(o) => Ok(*o),
            other => panic!("expected a run, got {other:?}"),
        }
    }

    #[test]
    fn options_before_and_after_the_command() {
        let o = run(&[
            "--timeout",
            "5",
            "echo hi",
            "--json",
            "--env=A=b=c",
            "--env",
            "B=",
        ])
        .unwrap();
        assert_eq!(o.request.command, "echo hi");
        assert_eq!(o.request.timeout_ms, Some(Num(5.0)));
        assert!(o.json);
        let env = o.request.env.unwrap();
        assert_eq!(env["A"], "b=c");
        assert_eq!(env["B"], "");
    }

    #[test]
    fn double_dash_ends_options() {
        let o = run(&["--", "--json"]).unwrap();
        assert_eq!(o.request.command, "--json");
        assert!(!o.json);
    }

    #[test]
    fn errors_name_the_argument() {
        for (args, needle) in [
            (&["--bogus", "x"][..], "'--bogus'"),
            (&["--env", "FOO", "x"], "'FOO'"),
            (&["--env", "=v", "x"], "'=v'"),
            (&["--timeout", "soon", "x"], "'soon'"),
            (&["--sandbox", "jail", "x"], "'jail'"),
            (&["--json=yes", "x"], "'--json'"),
            (&["a", "b"], "'b'"),
            (&["x", "--workdir"], "'--workdir'"),
        ] {
            let err = run(args).unwrap_err();
            assert!(err.contains(needle), "{args:?}: {err}");
        }
        assert!(run(&[]).unwrap_err().contains("COMMAND"));
        assert!(run(&["--json", "--background", "x"]).is_err());
    }

    #[test]
    fn workdir_is_bytes_and_text_options_refuse_what_is_not_utf8() {
        use std::os::unix::ffi::{OsStrExt, OsStringExt};
        let os = |b: &[u8]| OsString::from_vec(b.to_vec());
        let parse_os = |args: Vec<OsString>| match parse(args) {
            Ok(Parsed::Run(o)) => Ok(*o),
            Ok(other) => panic!("expected a run, got {other:?}"),
            Err(e) => Err(e),
        };
        let o = parse_os(vec![os(b"--workdir"), os(b"/srv/\xff"), os(b"x")]).unwrap();
        assert_eq!(o.request.workdir.unwrap().as_os_str().as_bytes(), b"/srv/\xff");
        let o = parse_os(vec![os(b"--workdir=/srv/a=\xfe"), os(b"x")]).unwrap();
        assert_eq!(o.request.workdir.unwrap().as_os_str().as_bytes(), b"/srv/a=\xfe");
        for (args, needle) in [
            (vec![os(b"--env"), os(b"A=\xff"), os(b"x")], "'--env'"),
            (vec![os(b"--env=A=\xff"), os(b"x")], "'--env'"),
            (vec![os(b"--sandbox=\xff"), os(b"x")], "'--sandbox'"),
            (vec![os(b"--spill-dir"), os(b"/k\xff"), os(b"x")], "'--spill-dir'"),
            (vec![os(b"echo \xff")], "COMMAND"),
            (vec![os(b"--w\xff"), os(b"x")], "unknown option"),
        ] {
            let err = parse_os(args.clone()).unwrap_err();
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }

    #[test]
    fn help_and_version_are_printed_as_written() {
        for arg in ["--help", "-h", "--help --bogus", "x --help"] {
            let args = arg.split(' ').map(OsString::from);
            assert!(matches!(parse(args), Ok(Parsed::Help(h)) if h == HELP), "{arg}");
        }
        let version = concat!("dsh-cli ", env!("CARGO_PKG_VERSION"), "\n");
        for arg in ["--version", "-V"] {
            assert!(matches!(parse([OsString::from(arg)]), Ok(Parsed::Version(v)) if v == version));
        }
    }

    #[test]
    fn a_repeated_option_takes_its_last_value() {
        let o = run(&[
            "--timeout",
            "5",
            "--timeout-ms",
            "6",
            "--workdir",
            "/a",
            "--workdir=/b",
            "--json",
            "--json",
            "x",
        ])
        .unwrap();
        assert_eq!(o.request.timeout_ms, Some(Num(6.0)));
        assert_eq!(o.request.workdir, Some(PathBuf::from("/b")));
        let o = run(&["--timeout-ms", "6", "x", "--timeout", "5"]).unwrap();
        assert_eq!(o.request.timeout_ms, Some(Num(5.0)));
        // An option's value is the next argument, whatever it looks like.
        let o = run(&["--workdir", "--json", "--env", "-A=-", "--", "-"]).unwrap();
        assert_eq!(o.request.workdir, Some(PathBuf::from("--json")));
        assert_eq!(o.request.env.unwrap()["-A"], "-");
        assert_eq!(o.request.command, "-");
        assert!(!o.json);
    }

    #[test]
    fn spill_dir_implies_keep_spill() {
        let o = run(&["--spill-dir", "/k", "x"]).unwrap();
        assert!(o.keep_spill);
        assert_eq!(o.spill_dir, Some(PathBuf::from("/k")));
    }
}
