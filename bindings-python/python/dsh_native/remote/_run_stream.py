"""A streamed run's chunks (``run(..., on_output=...)``), from the reader
thread to the caller's callback, in order and bounded."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import Callable, Optional, TYPE_CHECKING

from ._checks import _STREAM_AHEAD_BYTES, _STREAM_STALL_S

if TYPE_CHECKING:
    from ._results import OutputChunk


class _RunStream:
    """One streamed run's chunks on their way from the reader thread to
    ``on_output``: taken by the caller's thread (``run``) or handed to its
    event loop one by one (``run_async``); in order, all before the run
    returns. While _STREAM_AHEAD_BYTES wait, the reader waits too (the
    server then holds the run back), unless the callback has taken nothing
    for _STREAM_STALL_S: then chunks are left out (their offsets show the
    gap). The first exception ``on_output`` raises stops the deliveries and
    cancels the run, which raises it once its answer came."""

    __slots__ = (
        "on_output", "cancel_run", "loop", "lock", "changed", "queued", "waiting_bytes", "taken_at",
        "ended", "stopped", "error",
    )  # fmt: skip

    def __init__(
        self,
        on_output: Callable[[OutputChunk], object],
        cancel_run: Callable[[], None],
        loop: Optional[asyncio.AbstractEventLoop],
    ) -> None:
        self.on_output = on_output
        self.cancel_run = cancel_run
        self.loop = loop
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        # For ``run``: the chunks its thread has not taken yet.
        self.queued: "collections.deque[OutputChunk]" = collections.deque()
        self.waiting_bytes = 0
        # When the callback last took a chunk, or chunks began to wait.
        self.taken_at = time.monotonic()
        # The run's answer came: no chunk follows.
        self.ended = False
        # Nothing more is handed over: the callback raised, or the caller
        # gave up on the run.
        self.stopped = False
        self.error: Optional[BaseException] = None

    def arrived(self, chunk: OutputChunk) -> None:
        """On the reader thread, as the server sends it."""
        with self.lock:
            while not self.stopped and self.waiting_bytes + len(chunk.data) > _STREAM_AHEAD_BYTES:
                stalled = time.monotonic() - self.taken_at
                if stalled >= _STREAM_STALL_S:
                    return  # left out: the callback is not taking any
                self.changed.wait(_STREAM_STALL_S - stalled)
            if self.stopped:
                return
            if self.waiting_bytes == 0:
                self.taken_at = time.monotonic()  # idle until now, not stalled
            self.waiting_bytes += len(chunk.data)
            if self.loop is None:
                self.queued.append(chunk)
                self.changed.notify_all()
                return
        try:
            self.loop.call_soon_threadsafe(self.hand, chunk)
        except RuntimeError:  # the loop is closed: nobody awaits the run
            self.stop()

    def end(self) -> None:
        """On the reader thread, once the run's answer came."""
        with self.lock:
            self.ended = True
            self.changed.notify_all()

    def stop(self) -> None:
        """Nothing more is handed over (the chunks waiting are dropped)."""
        with self.lock:
            self.stopped = True
            self.queued.clear()
            self.changed.notify_all()

    def hand(self, chunk: OutputChunk) -> None:
        """Calls ``on_output`` with one chunk, unless the stream stopped."""
        with self.lock:
            self.waiting_bytes -= len(chunk.data)
            self.taken_at = time.monotonic()
            self.changed.notify_all()
            if self.stopped:
                return
        try:
            self.on_output(chunk)
        except BaseException as e:  # Ctrl-C in the callback too: the run is cancelled, then it is raised
            self.error = e
            self.stop()
            self.cancel_run()

    def hand_over(self, timeout: float) -> bool:
        """``run``'s side: waits up to ``timeout`` for chunks and hands over
        those that came; True once the run's answer came and every chunk
        before it was handed over (or left out, once the deliveries
        stopped)."""
        with self.lock:
            if not self.queued and not self.ended:
                self.changed.wait(timeout)
            chunks = list(self.queued)
            self.queued.clear()
            ended = self.ended
        for chunk in chunks:
            self.hand(chunk)
        return ended
