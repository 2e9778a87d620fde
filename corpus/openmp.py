"""Torch's OpenMP threads, per calling thread: giving a thread's pool back, and one-thread sections.

Why this exists: GNU OpenMP (the runtime torch's Linux wheels ship) gives every thread that enters a
parallel region its own pool of worker threads, kept until that thread ends.  Once the pools together
hold more threads than the machine has cores, libgomp stops spinning between regions (100 spins
instead of its usual ~300,000, a rule ``GOMP_SPINCOUNT`` cannot lift) and every region wakes its
workers through the kernel.  A decode step is hundreds of small regions, so a model generating in
one thread while any other thread has ever run torch work decodes up to twice as slowly: one int8
row of smollm2-135m on the 2-core development machine took 16.6 ms per token from the main thread
and 31-37 ms from ``BatchingPolicy``'s worker, because the main thread still held the pool it used
to load the model (``bench/rollout.py`` shows both).  The agent's trajectory threads made it worse:
each query they encoded left one more pool behind.

So a thread that is about to only wait on another one gives its pool back (``release``), and work
too small to share out across cores runs on the calling thread alone (``one_thread``), which never
creates a pool.  Both act on the calling thread only, are cheap (a released pool is made again, at
the cost of starting its threads, on that thread's next parallel region) and do nothing where the
runtime cannot be found (another platform, another OpenMP) or ``RESEARCH_AGENT_OMP_POOLS=keep``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from pathlib import Path

OMP_PAUSE_SOFT = 1  # OpenMP 5.0's omp_pause_soft: the threads end, the runtime stays usable
_RUNTIMES = ("libgomp", "libiomp5", "libomp")
_lock = threading.Lock()
_runtime: ctypes.CDLL | None = None
_looked = False


def enabled() -> bool:
    """False when ``RESEARCH_AGENT_OMP_POOLS=keep`` (every thread keeps its pool, as OpenMP does)."""
    return os.environ.get("RESEARCH_AGENT_OMP_POOLS", "release").lower() != "keep"


def runtime() -> ctypes.CDLL | None:
    """The OpenMP runtime torch runs on, or None (torch not imported yet, or no such library mapped).

    Found among the libraries this process has mapped, preferring the one inside torch's own folder:
    FAISS wheels map a second, private libgomp whose pools are its own business."""
    global _runtime, _looked
    if _looked or "torch" not in sys.modules:
        return _runtime
    with _lock:
        if _looked:
            return _runtime
        torch_dir = str(Path(sys.modules["torch"].__file__).resolve().parent)
        found: list[str] = []
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
                for line in f:
                    path = line.split(maxsplit=5)[-1].strip()
                    if Path(path).name.startswith(_RUNTIMES) and path not in found:
                        found.append(path)
        except OSError:  # no /proc (macOS, Windows): nothing to do
            found = []
        ours = [p for p in found if p.startswith(torch_dir)] or found[:1]
        for path in ours:
            try:
                lib = ctypes.CDLL(path)
                lib.omp_pause_resource_all.argtypes = [ctypes.c_int]
                lib.omp_set_num_threads.argtypes = [ctypes.c_int]
                _runtime = lib
                break
            except (OSError, AttributeError):  # an OpenMP older than 5.0: leave the pools alone
                continue
        _looked = True
        return _runtime


def release() -> bool:
    """End the calling thread's OpenMP worker threads; True if the runtime did.

    For a thread that from now on waits while another computes: its idle pool would otherwise keep
    the runtime in its slow, oversubscribed mode for the thread that works."""
    lib = runtime() if enabled() else None
    if lib is None:
        return False
    return lib.omp_pause_resource_all(OMP_PAUSE_SOFT) == 0


@contextlib.contextmanager
def one_thread():
    """Torch's parallel regions on the calling thread alone inside the block (no pool is made for it).

    For work on a few items in a thread that is not the one generating: one query's encoding takes
    12.4 ms on one thread against 13.5-15.9 ms with two (all-MiniLM-L6-v2, the 2-core machine), and
    leaves no pool behind."""
    lib = runtime() if enabled() else None
    if lib is None:
        yield
        return
    import torch

    before = torch.get_num_threads()  # also makes torch set this thread up first, which would undo ours
    if before == 1:
        yield
        return
    lib.omp_set_num_threads(1)
    try:
        yield
    finally:
        lib.omp_set_num_threads(before)
