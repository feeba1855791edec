//! What the exit status of `dsh-cli` and `dsh run` says, and how both
//! write what they print.

use std::io::{self, Write};
use std::str::FromStr;

use nix::sys::signal::Signal;
use serde::Serialize;

use crate::interrupt::Interrupt;

/// The command timed out (it was killed), as `timeout(1)` says it.
pub const EXIT_TIMEOUT: u8 = 124;
/// The tool itself failed: bad usage, a command that could not start.
pub const EXIT_CLI_ERROR: u8 = 125;

/// The status for a command stopped by the signal the tool received.
pub fn interrupted_status(interrupt: &Interrupt) -> u8 {
    let sig = interrupt.signal().unwrap_or(Signal::SIGINT as i32);
    128 + u8::try_from(sig).unwrap_or(2)
}

/// The core reports signals by name (`SIGKILL`, or `SIG34` for one without
/// a name); an exit status needs the number back.
pub fn signal_number(name: &str) -> Option<u8> {
    let n = match Signal::from_str(name) {
        Ok(sig) => sig as i32,
        Err(_) => name.strip_prefix("SIG")?.parse().ok()?,
    };
    u8::try_from(n).ok().filter(|n| *n < 128)
}

/// The status for a command killed by the signal named `name`: 128+N, as
/// a shell reports it; [`EXIT_CLI_ERROR`] for a name without a number.
pub fn signal_status(name: &str) -> u8 {
    signal_number(name).map_or(EXIT_CLI_ERROR, |n| 128 + n)
}

/// Writes and flushes. A reader that went away (`| head`) is not an error
/// of the command's; anything else is dsh-cli's.
pub fn emit(to: impl Write, bytes: &[u8]) -> Result<(), String> {
    emit_with(to, |to| to.write_all(bytes))
}

/// `value` as one line of JSON, serialized straight into `to`: a large
/// output is never copied into a string first (a `--json` run of 100 MB
/// peaked at four times that with two copies). Errors as `emit`'s.
pub fn emit_json(to: impl Write, value: &impl Serialize) -> Result<(), String> {
    emit_with(io::BufWriter::with_capacity(1 << 16, to), |to| {
        serde_json::to_writer(&mut *to, value)?;
        to.write_all(b"\n")
    })
}

fn emit_with<W: Write>(mut to: W, write: impl FnOnce(&mut W) -> io::Result<()>) -> Result<(), String> {
    match write(&mut to).and_then(|()| to.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(format!("cannot write output: {e}")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_numbers_from_names() {
        assert_eq!(signal_number("SIGKILL"), Some(9));
        assert_eq!(signal_number("SIGTERM"), Some(15));
        assert_eq!(signal_number("SIG40"), Some(40));
        assert_eq!(signal_number("KILL"), None);
        assert_eq!(signal_status("SIGKILL"), 137);
    }
}
