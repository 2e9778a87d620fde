"""Stopping an eval without losing the episodes in flight: the first SIGINT/SIGTERM drains, a second aborts.

Without this, stopping an eval threw away every episode in flight — with 8 multi-turn code tasks at
several minutes each, up to an hour of CPU.  Without a deadline a drain can outlast a scheduler's grace
period (64 tasks in flight on a GPU took minutes, and the kill that followed lost the files written
after the run), hence ``drain_s`` (``--drain-s``).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class EvalStopped(RuntimeError):
    """A stop was asked for; the episodes that had started are saved and the run resumes from them."""


def _abort(signum: int) -> None:
    """The signal's default action (the process ends; the episodes in flight rerun on resume)."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _default(sig: int) -> bool:
    """Whether ``sig`` still has Python's own handling; a program that embeds the eval and handles it
    (the recipe publishes what a stopped stage has) keeps its handler."""
    return signal.getsignal(sig) in (signal.default_int_handler, signal.SIG_DFL)


@contextmanager
def drain_on_signals(stop: threading.Event, drain_s: float | None = None,
                     abort: Callable[[int], None] = _abort) -> Iterator[None]:
    """The first SIGINT/SIGTERM sets ``stop`` (finish the episodes in flight, start no more); a second
    one, or ``drain_s`` seconds of draining, gets the signal's default action (``abort(signum)``),
    which ends the process with the finished episodes saved.

    Only signals left to Python's default handling are taken over, and only from the main thread
    (the only one signals reach).
    """
    timers: list[threading.Timer] = []

    def on_signal(signum, frame):
        if stop.is_set():
            abort(signum)
            return
        stop.set()
        within = f" for up to {drain_s:g} s" if drain_s is not None else ""
        print(f"\nstopping: finishing the tasks in flight{within} (they are saved); signal again to abort them",
              file=sys.stderr, flush=True)
        if drain_s is not None:  # the signal again, not abort(): only the main thread may set a handler
            timers.append(threading.Timer(drain_s, os.kill, args=(os.getpid(), signum)))
            timers[-1].daemon = True
            timers[-1].start()

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM) if _default(sig)}
    try:
        yield
    finally:
        for timer in timers:  # the drain ended in time
            timer.cancel()
        for sig, handler in old.items():
            signal.signal(sig, handler)


__all__ = ["EvalStopped", "drain_on_signals"]
