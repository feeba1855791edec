//! `dsh`: dsh-native from the command line. `dsh run` runs one command
//! with its output streamed live and byte for byte, as `timeout` or `env`
//! would run it, but governed by the executor; `dsh serve` serves the
//! protocol for remote executors (docs/cli.md, docs/protocol.md).

mod args;
mod run;
mod serve;

use std::process::ExitCode;

use dsh_cli::interrupt::Interrupt;
use dsh_cli::status::EXIT_CLI_ERROR;

use args::Parsed;

fn main() -> ExitCode {
    let code = match args::parse(std::env::args_os().skip(1)) {
        Ok(Parsed::Text(text)) => {
            print!("{text}");
            0
        }
        Ok(Parsed::Run(request)) => {
            // Before the executor exists: its threads must inherit the
            // blocked signal mask.
            match Interrupt::install() {
                Ok(interrupt) => run::run(*request, &interrupt).unwrap_or_else(|msg| {
                    eprintln!("dsh: {msg}");
                    EXIT_CLI_ERROR
                }),
                Err(e) => {
                    eprintln!("dsh: cannot watch for signals: {e}");
                    EXIT_CLI_ERROR
                }
            }
        }
        Ok(Parsed::Serve(listen)) => match Interrupt::install() {
            Ok(interrupt) => serve::serve(listen, &interrupt).map_or_else(
                |msg| {
                    eprintln!("dsh serve: {msg}");
                    EXIT_CLI_ERROR
                },
                |()| 0,
            ),
            Err(e) => {
                eprintln!("dsh: cannot watch for signals: {e}");
                EXIT_CLI_ERROR
            }
        },
        Err(msg) => {
            eprintln!("dsh: {msg}\nTry 'dsh --help' or 'dsh run --help' for more information.");
            EXIT_CLI_ERROR
        }
    };
    ExitCode::from(code)
}
