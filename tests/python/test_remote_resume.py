"""dsh_native.remote.Executor against a server that keeps sessions
(`dsh serve --stdio --linger SECONDS`, which relays to a lingering `dsh
serve --listen`): the transport is killed mid-call, as a network loss ends
it, and the client makes it again and resumes the session. A run in flight
gets its result, output read across the drop comes whole and once, calls
made meanwhile wait, a call whose answer was lost says so, and a session
that cannot be resumed fails everything within its linger time."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from typing import Any, Iterator, List, Optional

import pytest

from dsh_native import CancelToken, NotFoundError
from dsh_native.remote import PIPE, AnswerLost, Executor, OutputChunk, Process, TransportError

from conftest import alive, eventually, live_pids, need_dsh_bin
from sshd_server import Sshd
from test_remote import in_thread, read_pid, watchdog  # noqa: F401 (watchdog: autouse, bounds every test)


class Relay:
    """The client's transport: `dsh serve --stdio --linger SECONDS --socket
    TMP/s.sock`, directly or across ssh, through a shell that first waits
    for the seconds in TMP/delay (a slow reconnection), if any, then writes
    its pid (the new transport's, at each reconnection) to TMP/transport.pid.
    With ``holdable``, what the server sends passes through a `cat` whose
    pid is in TMP/cat.pid: stopped, it holds the answers while the calls
    still reach the server. The lingering server the relay starts outlives
    it by design: `end` ends it."""

    def __init__(self, dsh: str, tmp: str) -> None:
        self.dsh, self.tmp = dsh, tmp
        self.socket = os.path.join(tmp, "s.sock")
        self.pidfile = os.path.join(tmp, "transport.pid")
        self.catfile = os.path.join(tmp, "cat.pid")
        self.delay_file = os.path.join(tmp, "delay")

    def command(self, linger: int, sshd: Optional[Sshd] = None, holdable: bool = False) -> List[str]:
        serve = [self.dsh, "serve", "--stdio", "--linger", str(linger), "--socket", self.socket]
        transport = sshd.ssh(*serve) if sshd is not None else serve
        delay, pidfile = shlex.quote(self.delay_file), shlex.quote(self.pidfile)
        script = f'if [ -e {delay} ]; then sleep "$(cat {delay})"; fi; echo $$ > {pidfile}; '
        if holdable:
            # In the background (the stdin given explicitly: a background
            # job's is /dev/null), so that $! is the pipeline's cat.
            script += f'exec 3<&0; "$@" <&3 | cat & echo $! > {shlex.quote(self.catfile)}; wait'
        else:
            script += 'exec "$@"'
        return ["sh", "-c", script, "sh", *transport]

    def hold_answers(self) -> None:
        """Stops the `cat` that carries what the server sends (``holdable``)."""
        stop_process(read_pid(self.catfile))

    def delay(self, seconds: float) -> None:
        """The next transports start this much later."""
        with open(self.delay_file, "w") as f:
            f.write(str(seconds))

    def pid(self) -> int:
        return read_pid(self.pidfile)

    def drop(self) -> int:
        """Kills the transport, as a network loss or a crash ends it, and
        returns its pid once the client has reaped it: the client has seen
        the end, and nothing written from then on can reach the server (a
        killed process that shows as a zombie may still have threads that
        hold its pipes)."""
        pid = self.pid()
        os.killpg(pid, signal.SIGKILL)  # the transport leads a process group of its own
        assert eventually(lambda: not os.path.exists(f"/proc/{pid}"), 10), "the client never reaped its transport"
        return pid

    def replaced(self, old: int) -> bool:
        """A new transport has started since ``old`` was dropped."""
        return eventually(lambda: self.pid() != old, 30)

    def servers(self) -> List[int]:
        """The lingering servers listening at this relay's socket."""
        listen = f"unix:{self.socket}".encode()
        return live_pids("cmdline", lambda argv: b"--listen" in argv and listen in argv)

    def kill_servers(self, sig: int) -> None:
        for pid in self.servers():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def end(self) -> None:
        """Ends the lingering servers (SIGTERM disposes every session they keep)."""
        self.kill_servers(signal.SIGTERM)
        if not eventually(lambda: not self.servers(), 15):
            self.kill_servers(signal.SIGKILL)
        assert eventually(lambda: not self.servers(), 15), "a lingering server outlived the test"


@pytest.fixture
def dsh() -> str:
    return need_dsh_bin()


@pytest.fixture
def tmp() -> Iterator[str]:
    # In /tmp: a unix socket's path holds at most 107 bytes.
    with tempfile.TemporaryDirectory(prefix="dsh-py-resume-", dir="/tmp") as d:
        yield d


@pytest.fixture
def relay(dsh: str, tmp: str) -> Iterator[Relay]:
    r = Relay(dsh, tmp)
    try:
        yield r
    finally:
        r.end()


def started(path: str) -> None:
    assert eventually(lambda: os.path.exists(path)), f"{path} never appeared"


def read_all(p: Process) -> str:
    """Reads ``p``'s output until it has settled and everything was read."""
    reads = []
    while True:
        settled = p.done
        reads.append(p.read_output().delta)
        if settled:
            return "".join(reads)
        time.sleep(0.01)


# a run on its way ---------------------------------------------------------------------------


def test_a_run_in_flight_across_a_drop_returns_its_result(relay: Relay, tmp: str) -> None:
    with Executor(relay.command(30), grace_ms=300) as ex:
        mark = os.path.join(tmp, "started")
        t, out = in_thread(lambda: ex.run(ex.resolve(f"touch {mark}; sleep 1; echo done; exit 7")))
        started(mark)
        old = relay.drop()
        t.join(60)
        assert not t.is_alive(), "the run still waits after the drop"
        result = out.get("value")
        assert result is not None, out
        assert (result.exit_code, result.stdout.text) == (7, "done\n")
        assert relay.replaced(old)
        assert ex.run(ex.resolve("echo after")).stdout.text == "after\n"
        assert not ex.disposed


def test_an_answer_given_while_nobody_was_connected_comes_after_the_resume(relay: Relay, tmp: str) -> None:
    with Executor(relay.command(30), grace_ms=300) as ex:
        mark = os.path.join(tmp, "started")
        t, out = in_thread(lambda: ex.run(ex.resolve(f"touch {mark}; sleep 0.3; echo kept")))
        started(mark)
        relay.delay(1.5)  # the run ends while no transport is there: its answer is kept
        relay.drop()
        t.join(60)
        result = out.get("value")
        assert result is not None, out
        assert result.stdout.text == "kept\n" and result.exit_code == 0


def test_a_streamed_run_across_a_drop_leaves_out_only_what_came_meanwhile(relay: Relay, tmp: str) -> None:
    with Executor(relay.command(30), grace_ms=300) as ex:
        chunks: List[OutputChunk] = []
        first = threading.Event()

        def on_output(chunk: OutputChunk) -> None:
            chunks.append(chunk)
            first.set()

        spec = ex.resolve("for i in $(seq 1 150); do echo \"tick $i é\"; sleep 0.01; done")
        t, out = in_thread(lambda: ex.run(spec, on_output=on_output))
        assert first.wait(30)
        relay.drop()
        t.join(60)
        result = out.get("value")
        assert result is not None, out
        whole = result.stdout.text.encode()
        assert whole == b"".join(f"tick {i} \u00e9\n".encode() for i in range(1, 151))
        # Each chunk is the output at its offset, in order, none twice; what
        # came while no connection was there is left out, and its offset
        # shows where.
        end = 0
        for chunk in chunks:
            assert chunk.stream == "stdout" and chunk.offset >= end
            assert whole[chunk.offset : chunk.offset + len(chunk.data)] == chunk.data
            end = chunk.offset + len(chunk.data)
        assert end == len(whole), "no chunk came after the resume"


# output, by offset ------------------------------------------------------------------------------


def test_output_read_across_drops_comes_whole_and_once(relay: Relay) -> None:
    with Executor(relay.command(30), grace_ms=300) as ex:
        out = ex.start(ex.resolve("for i in $(seq 1 600); do echo \"line $i \u00e9\"; sleep 0.005; done"))
        err = ex.start(ex.resolve("for i in $(seq 1 600); do echo \"err $i\" >&2; sleep 0.005; done"))
        # Readers that never stop asking: reads are on their way at each drop.
        (out_t, out_read), (err_t, err_read) = in_thread(lambda: read_all(out)), in_thread(lambda: read_all(err))
        for _ in range(3):
            time.sleep(0.4)
            assert relay.replaced(relay.drop())
        out_t.join(90)
        err_t.join(90)
        assert out_read.get("value") == "".join(f"line {i} \u00e9\n" for i in range(1, 601)), out_read.get("error")
        errors = err_read.get("value")
        assert isinstance(errors, str), err_read.get("error")
        # Each read that has stderr text is a `[stderr]` section.
        sections = errors.split("[stderr]\n")
        assert sections[0] == "" and "".join(sections) == "".join(f"err {i}\n" for i in range(1, 601))


def test_reads_by_offset_read_as_the_consuming_reads_do(relay: Relay, dsh: str) -> None:
    """A lingering session's output is read by offset; what a caller gets
    is what the server's consuming read gives a session that does not linger."""

    def session(ex: Executor) -> List[Any]:
        seen: List[Any] = []
        p = ex.start(ex.resolve("printf out; echo err >&2"))
        p.wait(30)
        seen.append(p.read_output().delta)
        seen.append(p.read_output().delta)
        # Handed over at its timeout: reads go on just after the result.
        result = ex.run(ex.resolve("echo before; sleep 0.6; echo after", timeout_ms=300, on_expiry="background"))
        assert result.background_id is not None
        seen.append(result.stdout.text)
        handed = result.background_id
        seen.append(ex.read_output(handed).delta)  # by id, before any handle to it
        got = ex.get(handed)
        assert got is not None
        got.wait(30)
        seen.append(got.read_output().delta)
        ex.forget(handed)
        seen.append(got.read_output().delta)
        with pytest.raises(NotFoundError) as info:
            ex.read_output(handed)
        seen.append(str(info.value))
        return seen

    with Executor([dsh, "serve", "--stdio"], grace_ms=300) as plain:
        expected = session(plain)
    assert expected[:6] == ["out\n[stderr]\nerr\n", "", "before\n", "", "after\n", ""]
    with Executor(relay.command(30), grace_ms=300) as lingering:
        assert session(lingering) == expected


# calls made around a drop -------------------------------------------------------------------------


def test_calls_made_while_reconnecting_wait_and_succeed(relay: Relay, tmp: str) -> None:
    with Executor(relay.command(30), grace_ms=300) as ex:
        p = ex.start(ex.resolve("exec cat", stdin=PIPE))
        relay.delay(1)
        relay.drop()
        begun = time.monotonic()
        # Sent once the session is back, whatever they are.
        p.write_stdin("written while away\n")
        assert ex.run(ex.resolve("echo run while away")).stdout.text == "run while away\n"
        assert time.monotonic() - begun >= 0.5, "the calls did not wait for the reconnection"
        p.close_stdin()
        p.wait(30)
        assert p.read_output().delta == "written while away\n"


def test_a_call_whose_answer_was_lost_fails_and_a_read_is_asked_again(relay: Relay) -> None:
    with Executor(relay.command(30), grace_ms=300) as ex:
        p = ex.start(ex.resolve("exec sleep 300"))
        pid = relay.pid()
        # Stopped, the relay takes lines into its pipe but never passes them
        # on; killed, it loses them. The client cannot tell that from an
        # answer lost on its way back.
        stop_process(pid)
        pending = ex._remote.conn._pending  # what the client sent and awaits
        kill_t, killed = in_thread(p.kill)
        list_t, listed = in_thread(ex.list)
        assert eventually(lambda: sorted(c.method for c in list(pending.values())) == ["kill", "list"], 10)
        time.sleep(0.3)  # written, a moment after they were registered
        os.kill(pid, signal.SIGKILL)
        kill_t.join(60)
        list_t.join(60)
        e = killed.get("error")
        assert isinstance(e, AnswerLost) and isinstance(e, TransportError), killed
        assert e.method == "kill" and "before the answer to kill came" in str(e) and "may have taken effect" in str(e)
        # A read is simply asked again.
        assert [q.id for q in listed.get("value") or []] == [p.id], listed
        # The kill never reached the server: the process runs on.
        assert p.status == "running"
        assert p.kill() is True
        p.wait(30)


def stop_process(pid: int) -> None:
    """SIGSTOP to ``pid``, returning once every thread of it is stopped:
    kill(2) returns before a thread running on another CPU (or one woken for
    the signal) has taken the stop, and it may still read what is written
    next, which the tests stop a relay to prevent."""
    os.kill(pid, signal.SIGSTOP)

    def state(task: str) -> str:
        with open(f"/proc/{pid}/task/{task}/stat") as stat:
            return stat.read().rsplit(") ", 1)[1][0]

    def stopped() -> bool:
        try:
            return all(state(t) == "T" for t in os.listdir(f"/proc/{pid}/task"))
        except OSError:
            return False

    assert eventually(stopped, 10), f"process {pid} did not stop"


def queued_in_pipe(pid: int, fd: int) -> int:
    """How many bytes wait unread in the pipe that is ``pid``'s ``fd``."""
    import fcntl
    import struct
    import termios

    with open(f"/proc/{pid}/fd/{fd}", "rb", buffering=0) as pipe:
        return int(struct.unpack("i", fcntl.ioctl(pipe.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0])


def test_a_cancel_lost_with_the_drop_is_sent_again_once_resumed(relay: Relay, tmp: str) -> None:
    with Executor(relay.command(30), grace_ms=300) as ex:
        mark = os.path.join(tmp, "started")
        token = CancelToken()
        t, out = in_thread(lambda: ex.run(ex.resolve(f"touch {mark}; echo up; exec sleep 60"), token))
        started(mark)
        # The relay stopped, the cancel waits in its input pipe, and is lost
        # with it: the server never hears it.
        pid = relay.pid()
        stop_process(pid)
        token.cancel()
        assert eventually(lambda: queued_in_pipe(pid, 0) > 0, 10), "the cancel never reached the relay's pipe"
        relay.drop()
        t.join(30)
        assert not t.is_alive(), "the cancelled run went on after the resume"
        result = out.get("value")
        assert result is not None, out
        assert (result.aborted, result.signal, result.stdout.text) == (True, "SIGTERM", "up\n")


def test_a_write_queued_behind_a_lost_one_is_not_sent(relay: Relay, tmp: str) -> None:
    got = os.path.join(tmp, "got")
    with Executor(relay.command(30), grace_ms=300) as ex:
        p = ex.start(ex.resolve(f"cat > {got}", stdin=PIPE))
        pid = relay.pid()
        # A goes into a relay that passes nothing on, and dies with it.
        stop_process(pid)
        pending = ex._remote.conn._pending
        a_t, a = in_thread(lambda: p.write_stdin("A"))
        assert eventually(lambda: [c.method for c in list(pending.values())] == ["write_stdin"], 10)
        time.sleep(0.3)  # written, a moment after it was registered
        relay.delay(1)
        relay.drop()
        # B is made while the client reconnects: it waits behind A.
        b_t, b = in_thread(lambda: p.write_stdin("B"))
        a_t.join(60)
        b_t.join(60)
        assert isinstance(a.get("error"), AnswerLost), a
        e = b.get("error")
        assert isinstance(e, AnswerLost) and "was not sent" in str(e), b
        # B never reached the program ahead of (or without) A.
        p.close_stdin()
        p.wait(30)
        with open(got) as f:
            assert f.read() == ""


def test_calls_whose_answers_were_lost_after_they_took_effect(relay: Relay, tmp: str) -> None:
    with Executor(relay.command(30, holdable=True), grace_ms=300) as ex:
        p = ex.start(ex.resolve(f"echo $$ > {tmp}/bg.pid; exec sleep 300"))
        pid = read_pid(f"{tmp}/bg.pid")
        relay.hold_answers()  # the calls reach the server; their answers do not come back
        kill_t, killed = in_thread(p.kill)
        spawn_t, spawned = in_thread(lambda: ex.spawn_terminal(["cat"]))
        assert eventually(lambda: not alive(pid), 10), "the kill never reached the server"
        time.sleep(0.3)  # the terminal's spawn too, just after
        relay.drop()
        kill_t.join(60)
        spawn_t.join(60)
        e = killed.get("error")
        assert isinstance(e, AnswerLost) and e.method == "kill", killed
        assert p.status == "killed"  # it did take effect: only its answer was lost
        # A terminal session's id is chosen here: it is looked up instead.
        term = spawned.get("value")
        assert term is not None, spawned
        term.write("hi\n")
        seen = ""
        deadline = time.monotonic() + 20
        while "hi" not in seen and time.monotonic() < deadline:
            seen += term.read(1)
        assert "hi" in seen and term.terminate() == 0


def test_a_terminal_read_whose_answer_was_lost_says_so_once_and_the_session_goes_on(relay: Relay) -> None:
    with Executor(relay.command(30), grace_ms=300) as ex:
        term = ex.spawn_terminal(["cat"])
        term.write("typed\n")
        assert eventually(lambda: not term.exited and term.wait_input_waiting(1), 10)
        pid = relay.pid()
        stop_process(pid)  # as above: what is written now is lost with the relay
        pending = ex._remote.conn._pending
        t, out = in_thread(term.read_output)
        assert eventually(lambda: [c.method for c in list(pending.values())] == ["terminal_read"], 10)
        time.sleep(0.3)
        os.kill(pid, signal.SIGKILL)
        t.join(60)
        e = out.get("error")
        assert isinstance(e, AnswerLost) and e.method == "terminal_read", out
        # The read never reached the server: what it would have brought is
        # still there, for the next read.
        seen = ""
        deadline = time.monotonic() + 20
        while "typed" not in seen.replace("\r", "") and time.monotonic() < deadline:
            seen += term.read(1)
        assert "typed" in seen
        assert term.terminate() == 0


def test_task_done_of_a_process_that_settled_while_away_is_heard_once(relay: Relay) -> None:
    with Executor(relay.command(30), grace_ms=300) as ex:
        heard: List[str] = []
        ex.on_task_done(lambda p: heard.append(p.id))
        p = ex.start(ex.resolve("sleep 0.3"))
        relay.delay(1.5)
        relay.drop()
        p.wait(30)
        assert p.status == "completed" and p.exit_code == 0
        assert eventually(lambda: heard == [p.id], 10)
        time.sleep(0.3)
        assert heard == [p.id]


def test_close_while_reconnecting_disposes_the_session_once_it_is_back(relay: Relay, tmp: str) -> None:
    ex = Executor(relay.command(30), grace_ms=300)
    p = ex.start(ex.resolve(f"echo $$ > {tmp}/bg.pid; exec sleep 300"))
    pid = read_pid(f"{tmp}/bg.pid")
    relay.delay(1)
    relay.drop()
    ex.close()
    assert not alive(pid), "close left the session's process running"
    assert p.status == "killed"


def test_a_terminal_session_goes_on_across_a_drop(relay: Relay) -> None:
    with Executor(relay.command(30), grace_ms=300) as ex:
        term = ex.spawn_terminal(["cat"])
        term.write("before\n")
        seen = ""
        deadline = time.monotonic() + 20
        while "before" not in seen and time.monotonic() < deadline:
            seen += term.read(1)
        assert relay.replaced(relay.drop())
        term.write("after\n")
        while "after" not in seen and time.monotonic() < deadline:
            seen += term.read(1)
        assert "after" in seen
        assert term.terminate() == 0


# when the session cannot come back ------------------------------------------------------------------


def test_without_reconnect_a_drop_fails_every_waiter(relay: Relay, tmp: str) -> None:
    ex = Executor(relay.command(30), grace_ms=300, reconnect=False)
    try:
        mark = os.path.join(tmp, "started")
        t, out = in_thread(lambda: ex.run(ex.resolve(f"touch {mark}; exec sleep 300")))
        started(mark)
        relay.drop()
        t.join(30)
        e = out.get("error")
        assert isinstance(e, TransportError) and not isinstance(e, AnswerLost), out
        assert "killed by SIGKILL" in str(e)
        assert ex.disposed
        with pytest.raises(TransportError):
            ex.list()
    finally:
        ex.close()


def test_a_session_whose_server_died_fails_everything_within_its_linger_time(relay: Relay, tmp: str) -> None:
    ex = Executor(relay.command(2), grace_ms=300)
    try:
        mark = os.path.join(tmp, "started")
        t, out = in_thread(lambda: ex.run(ex.resolve(f"touch {mark}; exec sleep 300")))
        started(mark)
        relay.kill_servers(signal.SIGKILL)
        try:
            relay.drop()
        except ProcessLookupError:
            pass  # the relay saw its server die and ended by itself
        dropped = time.monotonic()
        t.join(30)
        assert not t.is_alive()
        e = out.get("error")
        assert isinstance(e, TransportError) and not isinstance(e, AnswerLost), out
        assert out["at"] - dropped < 2 + 5
        # A new relay started a new server, which does not know the session.
        assert "did not resume the session" in str(e) and "no session to resume" in str(e), str(e)
        assert ex.disposed
        with pytest.raises(TransportError):
            ex.resolve("true")
    finally:
        ex.close()


def test_a_resume_attempt_that_never_answers_is_ended_at_the_connect_timeout_and_tried_again(
    relay: Relay, tmp: str
) -> None:
    count, silent_pid = os.path.join(tmp, "count"), os.path.join(tmp, "silent.pid")
    # The second start is silent (an ssh to a host that drops packets); the others relay.
    script = (
        f"n=$(cat {shlex.quote(count)} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {shlex.quote(count)}; "
        f'if [ $n -eq 2 ]; then echo $$ > {shlex.quote(silent_pid)}; exec sleep 600; fi; exec "$@"'
    )
    with Executor(["sh", "-c", script, "sh", *relay.command(60)], grace_ms=300, connect_timeout_ms=1000) as ex:
        mark = os.path.join(tmp, "started")
        t, out = in_thread(lambda: ex.run(ex.resolve(f"touch {mark}; sleep 1; echo done")))
        started(mark)
        relay.drop()
        dropped = time.monotonic()
        t.join(60)
        assert not t.is_alive(), "the run still waits"
        result = out.get("value")
        assert result is not None, out
        assert result.stdout.text == "done\n"
        # Cut at the connect timeout, not at the linger time (60 s).
        assert out["at"] - dropped < 20, out["at"] - dropped
        assert not alive(read_pid(silent_pid)), "the silent attempt was left running"
        with open(count) as f:
            assert f.read().strip() == "3"


def test_a_transport_that_never_comes_back_gives_up_at_the_linger_time(relay: Relay, tmp: str) -> None:
    ex = Executor(relay.command(2), grace_ms=300)
    try:
        with open(relay.delay_file, "w") as f:
            f.write("60")  # every new transport hangs before it starts
        t, out = in_thread(lambda: ex.run(ex.resolve("exec sleep 300")))
        time.sleep(0.2)
        relay.drop()
        dropped = time.monotonic()
        t.join(30)
        assert not t.is_alive()
        e = out.get("error")
        assert isinstance(e, TransportError), out
        assert 1.5 < out["at"] - dropped < 2 + 5, out["at"] - dropped
        assert "could not be resumed within the 2 s" in str(e), str(e)
    finally:
        ex.close()


# the unix socket ------------------------------------------------------------------------------------------


def test_a_socket_connection_is_made_again_and_a_dead_server_is_given_up_at_once(dsh: str, tmp: str) -> None:
    path = os.path.join(tmp, "listen.sock")
    server = subprocess.Popen([dsh, "serve", "--listen", f"unix:{path}", "--linger", "30"])
    try:
        assert eventually(lambda: os.path.exists(path))
        with Executor(socket=path, grace_ms=300) as ex:
            mark = os.path.join(tmp, "started")
            t, out = in_thread(lambda: ex.run(ex.resolve(f"touch {mark}; sleep 0.5; echo across")))
            started(mark)
            # A unix socket does not drop while its server lives: the drop is
            # made here, by shutting the client's end down under it.
            ex._remote.conn.transport.terminate()
            t.join(30)
            assert out.get("value") is not None and out["value"].stdout.text == "across\n", out
            # The server itself goes: its sessions went with it, and there is
            # nobody to reconnect to.
            t, out = in_thread(lambda: ex.run(ex.resolve("exec sleep 300")))
            time.sleep(0.3)
            server.kill()
            server.wait(30)
            killed = time.monotonic()
            t.join(30)
            e = out.get("error")
            assert isinstance(e, TransportError) and "cannot be started again" in str(e), out
            assert out["at"] - killed < 5
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


# across ssh ----------------------------------------------------------------------------------------------


def test_an_ssh_connection_dropped_mid_run_is_resumed(relay: Relay, sshd: Sshd, tmp: str) -> None:
    with Executor(relay.command(30, sshd), grace_ms=300) as ex:
        p = ex.start(ex.resolve("for i in $(seq 1 300); do echo \"line $i\"; sleep 0.005; done"))
        reader, read = in_thread(lambda: read_all(p))
        mark = os.path.join(tmp, "started")
        t, out = in_thread(lambda: ex.run(ex.resolve(f"touch {mark}; sleep 1; echo over ssh")))
        started(mark)
        old = relay.drop()  # the ssh client, as a network loss ends it
        t.join(60)
        reader.join(60)
        assert out.get("value") is not None and out["value"].stdout.text == "over ssh\n", out
        assert read.get("value") == "".join(f"line {i}\n" for i in range(1, 301)), read.get("error")
        assert relay.replaced(old)


def test_asyncio_calls_wait_across_a_drop(relay: Relay, tmp: str) -> None:
    with Executor(relay.command(30), grace_ms=300) as ex:
        mark = os.path.join(tmp, "started")

        async def main() -> str:
            task = asyncio.ensure_future(ex.run_async(ex.resolve(f"touch {mark}; sleep 0.5; echo async")))
            while not os.path.exists(mark):
                await asyncio.sleep(0.01)
            relay.drop()
            return (await asyncio.wait_for(task, 60)).stdout.text

        assert asyncio.run(main()) == "async\n"
