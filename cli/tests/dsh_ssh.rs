//! `dsh run` on the far side of a real SSH connection: an sshd of the
//! test's own on 127.0.0.1 (keys made here, nothing of the system's
//! configuration used), `ssh … dsh run -- …` as a harness would call it.
//! What a remote caller relies on: the command's status and bytes come
//! through, and a dropped connection leaves nothing running.

use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::{alive, wait_bounded};

const SSHD: &str = "/usr/sbin/sshd";

/// Says the test cannot run here and why (scripts/test counts these).
fn skip(why: &str) {
    let line = format!(
        "SKIPPED {}: {why}\n",
        std::thread::current().name().unwrap_or("a test")
    );
    // libtest captures std's stderr: write to the descriptor.
    // SAFETY: `line` is valid for reads of its length.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

struct Sshd {
    dir: PathBuf,
    port: u16,
    server: Child,
}

impl Sshd {
    /// An sshd for root on a free port of 127.0.0.1, or why there is none.
    fn start(name: &str) -> Result<Sshd, String> {
        if !Path::new(SSHD).exists() {
            return Err(format!(
                "no {SSHD} (Debian's openssh-server; scripts/test installs it)"
            ));
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("sshd's privilege separation needs root here".into());
        }
        let dir = std::env::temp_dir().join(format!("dsh-ssh-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        for key in ["host", "client"] {
            let out = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(dir.join(key))
                .output()
                .map_err(|e| format!("ssh-keygen: {e}"))?;
            if !out.status.success() {
                return Err(format!("ssh-keygen: {}", String::from_utf8_lossy(&out.stderr)));
            }
        }
        std::fs::copy(dir.join("client.pub"), dir.join("authorized_keys")).map_err(|e| e.to_string())?;
        // Privilege separation wants its empty directory.
        std::fs::create_dir_all("/run/sshd").map_err(|e| e.to_string())?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let config = dir.join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host\nAuthorizedKeysFile {d}/authorized_keys\n\
                 PidFile {d}/sshd.pid\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nLogLevel ERROR\n",
                d = dir.display()
            ),
        )
        .map_err(|e| e.to_string())?;
        let server = Command::new(SSHD)
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("sshd: {e}"))?;
        let sshd = Sshd { dir, port, server };
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if start.elapsed() > Duration::from_secs(10) {
                return Err("sshd did not listen within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(sshd)
    }

    /// `ssh … root@127.0.0.1 <remote>`: the remote command line is one
    /// string, as ssh hands it to the remote user's shell.
    fn ssh(&self, remote: &str) -> Command {
        let mut c = Command::new("ssh");
        c.args(["-p", &self.port.to_string(), "-i"])
            .arg(self.dir.join("client"))
            .args([
                "-o",
                "BatchMode=yes",
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "LogLevel=ERROR",
                "root@127.0.0.1",
                remote,
            ]);
        c
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

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
    let dropped = Instant::now();
    while alive(sleeper) && dropped.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = dropped.elapsed();
    if alive(sleeper) {
        // SAFETY: kill(2) takes integers; clean up before failing.
        unsafe { libc::kill(sleeper, libc::SIGKILL) };
    }
    assert!(
        took < Duration::from_secs(1),
        "the command ran on {took:?} after the connection dropped"
    );
}
