"""Small pieces the native module calls back into."""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

if TYPE_CHECKING:
    from ._native import Terminal


def resolve_future(future: "asyncio.Future[Any]", result: Any, error: Optional[BaseException]) -> None:
    """Settles ``future`` unless it was cancelled meanwhile (runs on its loop)."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class Readiness:
    """Wake-ups for a terminal's async readers: one wait in the core at a
    time, and every reader waiting then woken, on its own loop, once there
    is output or it has ended. A woken reader takes the output itself when
    it runs (``next_chunk``): one given up in between has taken nothing, and
    every read, async or not, takes from the core in one order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: List[Tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]] = []
        self._asked = False

    def wait(self, terminal: "Terminal") -> "asyncio.Future[None]":
        loop = asyncio.get_running_loop()
        woken: "asyncio.Future[None]" = loop.create_future()
        asking = False
        try:
            with self._lock:
                self._waiting = still_waiting(self._waiting)
                self._waiting.append((loop, woken))
                asking = not self._asked
                self._asked = True
            if asking:
                terminal._when_output_ready(self._ready)
                asking = False
        except BaseException:
            # Not asked after all (refused, or Ctrl-C on the way): the next
            # reader asks, or every later read would wait for nothing.
            if asking:
                with self._lock:
                    self._asked = False
            raise
        return woken

    def _ready(self) -> None:
        """On the callback thread: there is output, or it has ended."""
        with self._lock:
            waiting, self._waiting, self._asked = self._waiting, [], False
        wake_all(waiting)


def still_waiting(
    waiting: List[Tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]],
) -> List[Tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]]:
    """The waiters that still wait: not those given up, nor those whose loop
    is closed (a quiet program would otherwise gather any number)."""
    return [w for w in waiting if not (w[1].done() or w[0].is_closed())]


def wake_all(waiting: List[Tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]]) -> None:
    """Wakes each waiter on its own loop (from any thread); a waiter whose
    loop is closed is nobody's."""
    for loop, woken in waiting:
        try:
            loop.call_soon_threadsafe(_wake, woken)
        except RuntimeError:
            pass


def _wake(woken: "asyncio.Future[None]") -> None:
    if not woken.done():
        woken.set_result(None)


async def next_chunk(terminal: "Terminal", readiness: Readiness) -> str:
    """``Terminal.__anext__``: the output is taken here, in one step with
    the return, never for a reader that is no longer there."""
    while True:
        text = terminal.read_output()
        if text:
            return text
        if terminal.output_ended:
            raise StopAsyncIteration
        await readiness.wait(terminal)
