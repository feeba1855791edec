//! `dsh-cli [--background] [--timeout-ms N] [--workdir DIR] COMMAND`
//!
//! Runs COMMAND through a dsh-native executor and prints the result; with
//! `--background`, starts it and streams `read_output` deltas until it ends.

use std::process::ExitCode;
use std::time::Duration;

use dsh_core::{ConfigInput, Executor, Num, Request};

const USAGE: &str = "usage: dsh-cli [--background] [--timeout-ms N] [--workdir DIR] COMMAND";

struct Args {
    background: bool,
    request: Request,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut background = false;
    let mut request = Request::default();
    let mut command = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--background" => background = true,
            "--timeout-ms" => {
                let v = args.next().ok_or("--timeout-ms needs a value")?;
                let ms: f64 = v
                    .parse()
                    .map_err(|_| format!("--timeout-ms: not a number: {v}"))?;
                request.timeout_ms = Some(Num(ms));
            }
            "--workdir" => request.workdir = Some(args.next().ok_or("--workdir needs a value")?),
            "-h" | "--help" => return Err(USAGE.into()),
            _ if command.is_none() => command = Some(arg),
            _ => return Err(format!("unexpected argument {arg:?}\n{USAGE}")),
        }
    }
    request.command = command.ok_or(USAGE)?;
    Ok(Args { background, request })
}

fn show(label: &str, value: impl std::fmt::Debug) {
    println!("{label:>10}: {value:?}");
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    let result = (|| -> Result<(), dsh_core::DshError> {
        let exec = Executor::new(ConfigInput::default())?;
        let spec = exec.resolve(args.request)?;
        if args.background {
            let process = exec.start(&spec)?;
            println!("started {} ({})", process.id(), process.command());
            loop {
                let settled = process.wait_timeout(Some(Duration::from_millis(100)));
                let read = process.read_output();
                if !read.delta.is_empty() {
                    print!("{}", read.delta);
                }
                if settled {
                    break;
                }
            }
            println!();
            show("status", process.status().as_str());
            show("exit_code", process.exit_code());
            show("signal", process.signal());
        } else {
            let r = exec.run_blocking(&spec, None)?;
            show("exit_code", r.exit_code);
            show("signal", r.signal);
            show("timed_out", r.timed_out);
            show("aborted", r.aborted);
            show("timeout_ms", r.timeout_ms);
            show("stdout", &r.stdout);
            show("stderr", &r.stderr);
        }
        exec.dispose_blocking()
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dsh-cli: {e}");
            ExitCode::FAILURE
        }
    }
}
