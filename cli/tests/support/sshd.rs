//! A real sshd of the test's own on 127.0.0.1 (keys made here, nothing of
//! the system's configuration used), for the tests that cross a real SSH
//! connection.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const SSHD: &str = "/usr/sbin/sshd";

/// Says the test cannot run here and why (scripts/test counts these).
pub fn skip(why: &str) {
    let line = format!(
        "SKIPPED {}: {why}\n",
        std::thread::current().name().unwrap_or("a test")
    );
    // libtest captures std's stderr: write to the descriptor.
    // SAFETY: `line` is valid for reads of its length.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

pub struct Sshd {
    pub dir: PathBuf,
    pub port: u16,
    server: Child,
}

impl Sshd {
    /// An sshd for root on a free port of 127.0.0.1, or why there is none.
    pub fn start(name: &str) -> Result<Sshd, String> {
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
    pub fn ssh(&self, remote: &str) -> Command {
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
