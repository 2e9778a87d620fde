"""The one trajectory store: finished trajectories appended to JSONL, resumed by scanning what is on disk.

Eval runs (``eval qa``, ``eval code``) and trajectory synthesis (``synth trajectories``) all write
through it, so they share one rule for crashes and resumes (OpenResearcher's: what is on disk is the
truth):

* each finished trajectory is appended as one line and fsynced at once, so ``kill -9`` loses at
  most the trajectories in flight;
* a broken *last* line of a file is what an interrupted write leaves: it is dropped (and, when
  repairing, cut off so appends continue cleanly);
* a broken line followed by good ones is corruption, not an interruption: the scan stops with a
  ``StoreError`` naming the line, because skipping it would make results lie about what was run;
* a key seen twice keeps its first record, so a resume never counts a trajectory twice;
* one writer at a time: ``lock()`` holds an exclusive ``flock`` on the directory's lock file from
  the scan to the last write, and a second run fails at once naming the holder. The kernel drops
  the lock when its process dies, ``kill -9`` included, so a resume never waits on a stale lock.

A store is a directory holding either one file (``trajectories.jsonl``) or, given ``shard_size``,
numbered shards (``shard-00000.jsonl`` ...) of at most that many lines.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from research_agent.trajectory import Trajectory

TRAJECTORIES = "trajectories.jsonl"
SHARD_PREFIX = "shard-"
LOCK_FILE = ".trajectories.lock"


class StoreError(RuntimeError):
    """A trajectory file is corrupt, or a directory is not what the command expects."""


class StoreLocked(StoreError):
    """Another run is writing trajectories to the same directory."""


def by_id(traj: Trajectory) -> str:
    return traj.id


def scan_file(path: Path, *, repair: bool = True) -> tuple[list[Trajectory], int]:
    """The complete trajectories of one JSONL file, in order, and how many torn last lines were dropped."""
    if not path.exists():
        return [], 0
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    trajs: list[Trajectory] = []
    good_bytes, dropped = 0, 0
    for i, line in enumerate(lines):
        if not line.strip():
            good_bytes += len(line) + (1 if i < len(lines) - 1 else 0)
            continue
        try:
            trajs.append(Trajectory.from_json(line.decode("utf-8")))
        except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError) as e:
            if any(rest.strip() for rest in lines[i + 1 :]):
                raise StoreError(
                    f"{path}: line {i + 1} is corrupt ({e}) but later lines are fine; "
                    "fix or delete that line by hand, then resume"
                ) from e
            dropped = 1
            if repair:  # an interrupted write: cut the partial line off so appends stay clean
                with open(path, "r+b") as f:
                    f.truncate(good_bytes)
                    f.flush()
                    os.fsync(f.fileno())
            break
        good_bytes += len(line) + 1
    if repair and trajs and not dropped and raw and not raw.endswith(b"\n"):
        with open(path, "ab") as f:  # a complete last record without its newline
            f.write(b"\n")
    return trajs, dropped


class TrajectoryStore:
    """The trajectories of one directory, keyed by ``key`` (the trajectory id unless told otherwise)."""

    def __init__(self, directory: str | Path, *, shard_size: int | None = None,
                 key: Callable[[Trajectory], str] = by_id) -> None:
        if shard_size is not None and shard_size < 1:
            raise ValueError(f"shard_size must be at least 1, got {shard_size}")
        self.dir = Path(directory)
        self.shard_size = shard_size
        self.key = key

    def files(self) -> list[Path]:
        if self.shard_size is None:
            return [self.dir / TRAJECTORIES]
        return sorted(self.dir.glob(f"{SHARD_PREFIX}*.jsonl"))

    def scan(self, *, repair: bool = True) -> tuple[dict[str, Trajectory], int]:
        """{key: trajectory} of every complete record (first wins), and the torn lines dropped."""
        done: dict[str, Trajectory] = {}
        dropped = 0
        for path in self.files():
            trajs, torn = scan_file(path, repair=repair)
            dropped += torn
            for traj in trajs:
                done.setdefault(self.key(traj), traj)
        return done, dropped

    def load(self) -> list[Trajectory]:
        """Every trajectory, read-only (a torn last line is skipped, not repaired)."""
        return list(self.scan(repair=False)[0].values())

    def writer(self) -> TrajectoryWriter:
        return TrajectoryWriter(self)

    @contextlib.contextmanager
    def lock(self) -> Iterator[Path]:
        """Hold the directory's exclusive lock, or raise ``StoreLocked`` at once (no waiting).

        The lock file says who holds it (pid, host, start time, command), for the second run's
        message; it is never deleted, since a run that deleted it could let a third lock a new file
        beside a second still holding the old one.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StoreLocked(
                    f"another run is writing trajectories to {self.dir} ({_holder(fd)}); wait for it to "
                    "finish, or give this one another --out"
                ) from None
            holder = {"pid": os.getpid(), "host": socket.gethostname(),
                      "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": " ".join(sys.argv)}
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(holder) + "\n").encode("utf-8", "backslashreplace"), 0)
            yield path
        finally:
            os.close(fd)  # closing the descriptor releases the lock


def _holder(fd: int) -> str:
    try:
        h = json.loads(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
        return f"pid {h['pid']} on {h['host']}, started {h['started']}: {h['command']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "its lock file does not say which; it may be starting"


class TrajectoryWriter:
    """Appends one JSON line per finished trajectory, flushed and fsynced so a crash loses nothing;
    a sharded store starts a new shard once the last one holds ``shard_size`` lines."""

    def __init__(self, store: TrajectoryStore) -> None:
        self.store = store
        store.dir.mkdir(parents=True, exist_ok=True)
        self._f = None
        self._index, self._count = 0, 0
        if store.shard_size is not None:
            existing = store.files()
            self._index = max(0, len(existing) - 1)
            if existing:
                with open(existing[-1], "rb") as f:
                    self._count = sum(1 for _ in f)

    def _path(self) -> Path:
        if self.store.shard_size is None:
            return self.store.dir / TRAJECTORIES
        return self.store.dir / f"{SHARD_PREFIX}{self._index:05d}.jsonl"

    def write(self, traj: Trajectory) -> None:
        size = self.store.shard_size
        if size is not None and self._count >= size:
            self.close()
            self._index, self._count = self._index + 1, 0
        if self._f is None:
            self._f = open(self._path(), "a", encoding="utf-8")
        self._f.write(traj.to_json() + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())
        self._count += 1

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
