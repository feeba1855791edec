import asyncio
import ctypes
import os
import tempfile
import time
from typing import Callable, Iterator, Optional

import pytest

import dsh_native


@pytest.fixture
def ex() -> Iterator[dsh_native.Executor]:
    with dsh_native.Executor(grace_ms=300) as executor:
        yield executor


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
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


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
