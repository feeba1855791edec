//! `dsh run` on the far side of a real SSH connection: an sshd of the
//! test's own on 127.0.0.1 (keys made here, nothing of the system's
//! configuration used), `ssh … dsh run -- …` as a harness would call it.
//! What a remote caller relies on: the command's status and bytes come
//! through, and a dropped connection leaves nothing running.

use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;
use std::time::Duration;

mod support;
use support::sshd::{skip, Sshd};
use support::{alive, gone_within, wait_bounded};

/// `dsh run -- <command>` as a remote command line.
fn remote_run(command: &str) -> String {
    format!(
        "{} run -- '{}'",
        env!("CARGO_BIN_EXE_dsh"),
        command.replace('\'', r"'\''")
    )
}

#[test]
fn over_ssh_the_status_and_every_byte_come_through() {
    let sshd = match Sshd::start("bytes") {
        Ok(s) => s,
        Err(why) => return skip(&why),
    };
    let mut child = sshd
        .ssh(&remote_run("echo out; echo err >&2; exit 3"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut out, mut err) = (String::new(), String::new());
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(
        (
            wait_bounded(&mut child, "ssh").code().unwrap_or(-1),
            out.as_str(),
            err.as_str()
        ),
        (3, "out\n", "err\n")
    );
    // 8 MiB of every byte value, through the connection unchanged.
    let data: Vec<u8> = (0..8u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let file = sshd.dir.join("data");
    std::fs::write(&file, &data).unwrap();
    let mut child = sshd
        .ssh(&remote_run(&format!("cat {}", file.display())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut got = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut got).unwrap();
    assert_eq!(wait_bounded(&mut child, "ssh").code().unwrap_or(-1), 0);
    assert!(
        got == data,
        "{} bytes of {} came through, or they differ",
        got.len(),
        data.len()
    );
}

#[test]
fn a_dropped_connection_leaves_nothing_running() {
    let sshd = match Sshd::start("drop") {
        Ok(s) => s,
        Err(why) => return skip(&why),
    };
    let mut client = sshd
        .ssh(&remote_run("sleep 300 & echo $!; wait"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(client.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let sleeper: i32 = line.trim().parse().unwrap_or_else(|_| panic!("no pid: {line:?}"));
    assert!(alive(sleeper));
    // The connection goes: its client is killed, as a network loss would.
    client.kill().unwrap();
    client.wait().unwrap();
    gone_within(sleeper, Duration::from_secs(1), "after the connection dropped");
}
