"""A real sshd of its own on 127.0.0.1 (keys made here, nothing of the
system's configuration used), for the remote executor's tests and
benchmarks (bench/python/remote.py imports it too)."""

from __future__ import annotations

import contextlib
import getpass
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Iterator, List

DAEMON = "/usr/sbin/sshd"


class Unavailable(Exception):
    """No sshd can run here; the message says why."""


class Sshd:
    def __init__(self, directory: str, port: int, user: str, process: "subprocess.Popen[bytes]") -> None:
        self.dir, self.port, self.user, self.process = directory, port, user, process

    def ssh(self, *remote: str) -> List[str]:
        """`ssh ... user@127.0.0.1 <remote>`: the client command line."""
        return [
            "ssh", "-p", str(self.port), "-i", os.path.join(self.dir, "client"),
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
            f"{self.user}@127.0.0.1", shlex.join(remote),
        ]  # fmt: skip

    def serve_command(self, dsh: str) -> List[str]:
        """`dsh serve --stdio` across this sshd, as a harness would start it."""
        return self.ssh(dsh, "serve", "--stdio")


@contextlib.contextmanager
def running_sshd() -> Iterator[Sshd]:
    """An sshd for as long as the block runs; Unavailable (with the reason)
    where none can be started."""
    if not os.path.exists(DAEMON):
        raise Unavailable(f"no {DAEMON} (Debian's openssh-server)")
    for tool in ("ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            raise Unavailable(f"no {tool} on PATH (Debian's openssh-client)")
    if os.geteuid() != 0:
        raise Unavailable("sshd's privilege separation needs root here")
    directory = tempfile.mkdtemp(prefix="dsh-py-sshd-")
    try:
        for key in ("host", "client"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(directory, key)],
                           check=True, capture_output=True, timeout=30)  # fmt: skip
        shutil.copy(os.path.join(directory, "client.pub"), os.path.join(directory, "authorized_keys"))
        os.makedirs("/run/sshd", exist_ok=True)  # privilege separation wants it
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        config = os.path.join(directory, "sshd_config")
        with open(config, "w") as f:
            f.write(
                f"Port {port}\nListenAddress 127.0.0.1\nHostKey {directory}/host\n"
                f"AuthorizedKeysFile {directory}/authorized_keys\nPidFile {directory}/sshd.pid\n"
                "PermitRootLogin yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                "UsePAM no\nStrictModes no\nLogLevel ERROR\n"
            )
        log = open(os.path.join(directory, "sshd.log"), "wb")
        process = subprocess.Popen([DAEMON, "-D", "-e", "-f", config], stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=log)  # fmt: skip
        log.close()
        server = Sshd(directory, port, getpass.getuser(), process)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        with open(os.path.join(directory, "sshd.log"), "rb") as f:
                            said = f.read().decode(errors="replace").strip()
                        raise Unavailable(f"sshd did not listen on 127.0.0.1:{port}: {said or 'no message'}")
                    time.sleep(0.02)
            probe = subprocess.run(server.ssh("true"), capture_output=True, timeout=30)
            if probe.returncode != 0:
                raise Unavailable(f"ssh to the test sshd fails: {probe.stderr.decode(errors='replace').strip()}")
            yield server
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
