//! Command-line parsing, by hand: the grammar is a dozen options, and a
//! parser crate would outweigh the rest of the tool. Every error names the
//! argument at fault, because the caller is often a script or a model that
//! has to fix it without a human reading the help.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

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

#[derive(Debug)]
pub enum Parsed {
    Run(Box<Options>),
    Help,
    Version,
}

pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, String> {
    let mut opts = Options {
        request: Request::default(),
        background: false,
        json: false,
        read_stdin: false,
        keep_spill: false,
        spill_dir: None,
    };
    let mut env = BTreeMap::new();
    let mut command = None;
    let mut options_ended = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let raw = arg.as_bytes();
        if options_ended || !raw.starts_with(b"-") || raw == b"-" {
            let arg = arg
                .into_string()
                .map_err(|a| format!("COMMAND is not valid UTF-8: {a:?}"))?;
            if let Some(first) = &command {
                return Err(format!(
                    "unexpected argument '{arg}' after COMMAND '{first}' (quote the whole command as one argument)"
                ));
            }
            command = Some(arg);
            continue;
        }
        // `--name=value`: the name is text; the value is bytes, since a
        // path (--workdir) need not be UTF-8.
        let (name, inline) = match raw.iter().position(|&b| b == b'=') {
            Some(i) if raw.starts_with(b"--") => {
                (&raw[..i], Some(OsStr::from_bytes(&raw[i + 1..]).to_owned()))
            }
            _ => (raw, None),
        };
        let name = std::str::from_utf8(name).map_err(|_| format!("unknown option {arg:?}"))?;
        let mut value_os = |what: &str| match &inline {
            Some(v) => Ok(v.clone()),
            None => args.next().ok_or_else(|| format!("option '{name}' needs {what}")),
        };
        let mut value = |what: &str| {
            value_os(what)?
                .into_string()
                .map_err(|v| format!("option '{name}' expects UTF-8 text, got {v:?}"))
        };
        let flag = |set: &mut bool| match inline {
            Some(_) => Err(format!("option '{name}' takes no value")),
            None => {
                *set = true;
                Ok(())
            }
        };
        match name {
            "--" => options_ended = true,
            "-h" | "--help" => return Ok(Parsed::Help),
            "-V" | "--version" => return Ok(Parsed::Version),
            "--background" => flag(&mut opts.background)?,
            "--json" => flag(&mut opts.json)?,
            "--stdin" => flag(&mut opts.read_stdin)?,
            "--keep-spill" => flag(&mut opts.keep_spill)?,
            "--timeout" | "--timeout-ms" => {
                let v = value("a number of milliseconds")?;
                let ms: u64 = v.parse().map_err(|_| {
                    format!("option '{name}' expects a whole number of milliseconds, got '{v}'")
                })?;
                opts.request.timeout_ms = Some(Num(ms as f64));
            }
            "--workdir" => opts.request.workdir = Some(value_os("a directory")?.into()),
            "--env" => {
                let v = value("NAME=VALUE")?;
                match v.split_once('=') {
                    Some((k, val)) if !k.is_empty() => env.insert(k.to_owned(), val.to_owned()),
                    _ => return Err(format!("option '--env' expects NAME=VALUE, got '{v}'")),
                };
            }
            "--sandbox" => {
                let v = value("a mode")?;
                let mode = v.parse::<SandboxMode>().map_err(|()| {
                    format!(
                        "option '--sandbox': unknown mode '{v}' (expected read-only, workspace-write or danger-full-access)"
                    )
                })?;
                opts.request.sandbox_policy = Some(SandboxPolicyInput {
                    mode,
                    workspace_root: None,
                    session_id: None,
                    network: None,
                });
            }
            "--spill-dir" => {
                // Text: the executor's spill_dir is a string.
                opts.spill_dir = Some(value("a directory")?.into());
                opts.keep_spill = true;
            }
            _ => return Err(format!("unknown option '{name}'")),
        }
    }
    opts.request.command = command.ok_or("no COMMAND given")?;
    if !env.is_empty() {
        opts.request.env = Some(env);
    }
    if opts.json && opts.background {
        return Err("--json cannot be combined with --background (its output is a stream)".into());
    }
    Ok(Parsed::Run(Box::new(opts)))
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
    fn spill_dir_implies_keep_spill() {
        let o = run(&["--spill-dir", "/k", "x"]).unwrap();
        assert!(o.keep_spill);
        assert_eq!(o.spill_dir, Some(PathBuf::from("/k")));
    }
}
