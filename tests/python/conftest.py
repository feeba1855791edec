import os
import time
from typing import Callable, Iterator

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
def tmp(tmp_path: "os.PathLike[str]") -> str:
    return os.fspath(tmp_path)
