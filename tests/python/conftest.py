import asyncio
import ctypes
import functools
import os
import pathlib
import tempfile
import time
from typing import Any, Callable, Iterator, List, Optional, Union

import pytest

import dsh_native
import dsh_native.remote
from sshd_server import Sshd, Unavailable, running_sshd

REPO = pathlib.Path(__file__).resolve().parents[2]

# The executors a contract test runs against: the local one, `dsh serve
# --stdio` as a child, and the same across a real ssh connection.
TRANSPORTS = ["local", "stdio", "ssh"]

AnyExecutor = Union[dsh_native.Executor, dsh_native.remote.Executor]


def dsh_bin() -> str:
    """The dsh binary the remote executors serve with: $DSH_BIN, else the
    debug build of this checkout."""
    return os.environ.get("DSH_BIN") or str(REPO / "target" / "debug" / "dsh")


def need_dsh_bin() -> str:
    path = dsh_bin()
    if not os.access(path, os.X_OK):
        pytest.skip(f"no dsh binary at {path} (cargo build -p dsh-cli --bin dsh, or set DSH_BIN)")
    return path


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # The contract tests run against every transport, the terminal tests
    # against a remote executor over a pipe too (its Terminal keeps the same
    # contract); every other file keeps the local executor (its `transport`
    # is "local").
    if "transport" not in metafunc.fixturenames:
        return
    if metafunc.definition.path.name == "test_contract.py":
        metafunc.parametrize("transport", TRANSPORTS, indirect=True)
    elif metafunc.definition.path.name == "test_terminal.py":
        metafunc.parametrize("transport", ["local", "stdio"], indirect=True)


@pytest.fixture
def transport(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "local"))


def skip_remote(transport: str, why: str) -> None:
    """Marks a contract test as not applying to a remote executor, and why."""
    if transport != "local":
        pytest.skip(f"not for a remote executor ({transport}): {why}")


@pytest.fixture(scope="session")
def sshd() -> Iterator[Sshd]:
    """Skips (with the reason) where no sshd can be started."""
    try:
        with running_sshd() as server:
            yield server
    except Unavailable as why:
        pytest.skip(str(why))


@pytest.fixture
def make_executor(transport: str, request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """The Executor constructor under test: the local one, or a remote one
    over the transport; every executor it made is closed at the end."""
    if transport == "local":
        yield dsh_native.Executor
        return
    dsh = need_dsh_bin()
    if transport == "stdio":
        command = [dsh, "serve", "--stdio"]
    elif transport == "ssh":
        command = request.getfixturevalue("sshd").serve_command(dsh)
    else:
        raise AssertionError(f"unknown transport {transport!r}")
    made: List[dsh_native.remote.Executor] = []

    @functools.wraps(dsh_native.remote.Executor)
    def make(**config: Any) -> dsh_native.remote.Executor:
        executor = dsh_native.remote.Executor(command, **config)
        made.append(executor)
        return executor

    yield make
    for executor in made:
        executor.close()


@pytest.fixture
def ex(make_executor: Callable[..., Any]) -> Iterator[Any]:
    with make_executor(grace_ms=300) as executor:
        yield executor


def process_cwd(ex: AnyExecutor) -> str:
    """Where a command runs by default: this process's cwd, or the server's."""
    if isinstance(ex, dsh_native.remote.Executor):
        assert ex.host_cwd is not None
        return ex.host_cwd
    return os.getcwd()


def eventually(cond: Callable[[], bool], limit: float = 20.0) -> bool:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


async def until(cond: Callable[[], bool], limit: float = 20.0) -> None:
    """Polls `cond` without blocking the event loop; fails after `limit` s."""
    end = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < end, "the condition never held"
        await asyncio.sleep(0.01)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        # Gone, or going while /proc was read (ESRCH, or an empty read).
        return False
    return state not in ("Z", "X")


def comm(pid: int) -> Optional[str]:
    """The name process ``pid`` runs as (/proc/PID/comm), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def live_pids(proc_file: str, matches: Callable[[List[bytes]], bool]) -> List[int]:
    """Live processes whose /proc/PID/``proc_file`` (a NUL-separated list:
    ``cmdline``, ``environ``) ``matches``; processes that end or cannot be
    read meanwhile are left out."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/{proc_file}", "rb") as f:
                fields = f.read().split(b"\0")
        except OSError:
            continue
        if matches(fields) and alive(int(entry)):
            found.append(int(entry))
    return found


def read_until(p: dsh_native.Process, needle: str) -> str:
    seen = []

    def got() -> bool:
        seen.append(p.read_output().delta)
        return needle in "".join(seen)

    assert eventually(got), f"never saw {needle!r}: {''.join(seen)!r}"
    return "".join(seen)


@pytest.fixture
def tmp() -> Iterator[str]:
    """A fresh directory, removed when the test ends (pytest's tmp_path
    keeps the last three runs' directories)."""
    with tempfile.TemporaryDirectory(prefix="dsh-py-") as d:
        yield d


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (below 1: none), asked of the
    kernel directly, not through dsh_native."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    sys_landlock_create_ruleset = 444  # the same on every architecture
    create_ruleset_version = 1
    return int(libc.syscall(ctypes.c_long(sys_landlock_create_ruleset), None, ctypes.c_size_t(0),
                            ctypes.c_uint(create_ruleset_version)))


def landlock_missing() -> Optional[str]:
    """Why this kernel cannot confine a command, or None when it can. Asked
    of the kernel directly, not through dsh_native, so that a dsh bug that
    breaks confinement fails the sandbox tests instead of skipping them."""
    if landlock_abi() < 1:
        return f"no Landlock on this kernel ({os.strerror(ctypes.get_errno())})"
    return None


@pytest.fixture
def landlock() -> None:
    """Skips the test, with the reason, on a kernel without Landlock.
    DSH_TEST_FAKE_NO_LANDLOCK=1 skips as such a kernel would."""
    if os.environ.get("DSH_TEST_FAKE_NO_LANDLOCK") == "1":
        pytest.skip("Landlock faked away (DSH_TEST_FAKE_NO_LANDLOCK=1)")
    why = landlock_missing()
    if why:
        pytest.skip(why)
