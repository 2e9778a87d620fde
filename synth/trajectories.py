"""Trajectory synthesis (D2): run the agent graph with a teacher over questions, write JSONL shards.

OpenResearcher's resume rule: what is on disk is the truth.  Each finished trajectory is appended
to the current shard and flushed to disk at once, so ``kill -9`` loses at most the trajectories in
flight; on restart the shards are scanned, a torn last line is dropped, and only (question,
sample) pairs not already written are run.  Nothing is redone, nothing is duplicated.

One run at a time per output directory: a run holds an exclusive ``flock`` on ``OUT/.synth.lock``
from its scan to its last write, and a second run on the same directory fails at once with
``OutputLocked``, naming the run that holds it (two runs would each see the same pairs missing and
write every one twice).  The kernel drops the lock when its process dies, ``kill -9`` included, so
a resume never waits on a stale lock file.
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

from research_agent.agent import AgentConfig, run_batch
from research_agent.trajectory import Trajectory

SHARD_PREFIX = "shard-"
LOCK_FILE = ".synth.lock"


class OutputLocked(RuntimeError):
    """Another run is writing trajectories to the same output directory."""


@contextlib.contextmanager
def output_lock(out_dir: str | Path) -> Iterator[Path]:
    """Hold the output directory's exclusive lock, or raise ``OutputLocked`` at once (no waiting).

    The lock file says who holds it (pid, host, start time, command), for the second run's message;
    it is never deleted, since a run that deleted it could let a third lock a new file beside a
    second still holding the old one.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputLocked(
                f"another run is writing trajectories to {out} ({_holder(fd)}); wait for it to finish, "
                "or give this one another --out"
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


def _key(item_id: str, sample: int) -> str:
    return f"{item_id}::{sample}"


def _parse(raw: bytes) -> Trajectory | None:
    if not raw.endswith(b"\n"):
        return None  # torn by a kill mid-write
    try:
        return Trajectory.from_json(raw.decode("utf-8"))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def scan_shards(out_dir: str | Path, repair: bool = True) -> tuple[dict[str, Trajectory], int]:
    """Read every shard; return {key: trajectory} and the number of broken lines dropped.

    With ``repair`` a shard holding broken lines (a kill mid-write) is rewritten with only its
    complete lines, so appending continues from a clean state.
    """
    done: dict[str, Trajectory] = {}
    dropped = 0
    for shard in sorted(Path(out_dir).glob(f"{SHARD_PREFIX}*.jsonl")):
        data = shard.read_bytes()
        good: list[bytes] = []
        for raw in data.splitlines(keepends=True):
            traj = _parse(raw)
            if traj is None:
                dropped += 1
                continue
            good.append(raw)
            done[traj.meta.get("key", _key(traj.id, 0))] = traj
        if repair and sum(map(len, good)) < len(data):
            tmp = shard.with_suffix(".repair")
            tmp.write_bytes(b"".join(good))
            os.replace(tmp, shard)
    return done, dropped


class ShardWriter:
    """Append trajectories to numbered shards of at most ``shard_size`` lines, fsync'd per line."""

    def __init__(self, out_dir: str | Path, shard_size: int = 500):
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.shard_size = shard_size
        existing = sorted(self.dir.glob(f"{SHARD_PREFIX}*.jsonl"))
        self.index = max(0, len(existing) - 1)
        self.count = 0
        if existing:
            with open(existing[-1], "rb") as f:
                self.count = sum(1 for _ in f)
        self._f = None

    def write(self, traj: Trajectory) -> None:
        if self.count >= self.shard_size:
            self.close()
            self.index += 1
            self.count = 0
        if self._f is None:
            self._f = open(self.dir / f"{SHARD_PREFIX}{self.index:05d}.jsonl", "a", encoding="utf-8")
        self._f.write(traj.to_json() + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())
        self.count += 1

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def synthesize_trajectories(items: list[dict], policy, browser, out_dir: str | Path, *,
                            samples: int = 1, config: AgentConfig | None = None, concurrency: int = 8,
                            progress: bool = True,
                            on_result: Callable[[Trajectory], None] | None = None) -> dict:
    """Run the teacher over ``items`` × ``samples``, resuming from what ``out_dir`` already holds.

    Raises ``OutputLocked`` when another run holds ``out_dir``, before reading or writing anything."""
    with output_lock(out_dir):
        return _synthesize(items, policy, browser, out_dir, samples=samples, config=config,
                           concurrency=concurrency, progress=progress, on_result=on_result)


def _synthesize(items: list[dict], policy, browser, out_dir: str | Path, *, samples: int,
                config: AgentConfig | None, concurrency: int, progress: bool,
                on_result: Callable[[Trajectory], None] | None) -> dict:
    config = config or AgentConfig()
    done, dropped = scan_shards(out_dir)
    batch = []
    for item in items:
        for s in range(samples):
            key = _key(str(item["id"]), s)
            if key not in done:
                batch.append({**item, "id": key})
    if progress:
        print(f"{len(done)} trajectories already written, {dropped} broken lines dropped, {len(batch)} to run",
              file=sys.stderr, flush=True)
    writer = ShardWriter(out_dir)

    def record(traj: Trajectory) -> None:
        traj.meta["key"] = traj.id
        traj.meta["sample"] = int(traj.id.rpartition("::")[2])
        traj.id = traj.id.rpartition("::")[0]
        writer.write(traj)
        if on_result:
            on_result(traj)

    try:
        run_batch(batch, policy, browser, config, progress=progress, on_result=record, concurrency=concurrency)
    finally:
        writer.close()
    final, _ = scan_shards(out_dir, repair=False)
    return {"written": len(final), "new": len(batch), "dropped_broken_lines": dropped}


def load_trajectories(out_dir: str | Path) -> list[Trajectory]:
    return list(scan_shards(out_dir, repair=False)[0].values())


def filter_trajectories(trajs: list[Trajectory], *, min_reward: float = 0.8, require_format: bool = True,
                        confidence_keep: float | None = None) -> tuple[list[Trajectory], dict]:
    """Correct (F1 ≥ min_reward), well-formed (answered, no void turn, searched) and confident."""
    from rewards.qa import token_f1

    from .confidence import confidence_filter

    stats = {"input": len(trajs), "incorrect": 0, "bad_format": 0, "low_confidence": 0}
    kept = []
    for t in trajs:
        if require_format and (not t.answered or t.has_void_turn or t.count("search") == 0):
            stats["bad_format"] += 1
            continue
        if token_f1(t.answer, t.gold.get("answers", [])) < min_reward:
            stats["incorrect"] += 1
            continue
        kept.append(t)
    if confidence_keep is not None and kept:
        before = len(kept)
        kept = confidence_filter(kept, keep_top=confidence_keep)
        stats["low_confidence"] = before - len(kept)
    stats["kept"] = len(kept)
    return kept, stats


def export_sft(trajs: list[Trajectory], path: str | Path) -> int:
    """Write SFT examples as text turns (D3): each model completion and the observation after it.

    Teacher and student may not share a tokenizer, so the export is text; the SFT trainer renders
    it with the student's tokenizer exactly as the agent would (``research_agent.train.sft``), with
    observations masked out of the loss.  ``messages`` is the same episode in chat format for other
    tools.  A managed-context trajectory is marked ``"context": "managed"``: the trainer then rebuilds
    each turn's prompt from the question, the notes and the previous turn, as the agent did.
    """
    from corpus.files import atomic_write_text

    lines = []
    for t in trajs:
        messages = [{"role": "user", "content": t.question}]
        turns = []
        for s in t.steps:
            messages.append({"role": "assistant", "content": s.completion})
            if s.observation:
                messages.append({"role": "tool", "content": s.observation.strip()})
            turns.append({"completion": s.completion, "observation": s.observation})
        record = {"id": t.id, "question": t.question, "template": t.meta.get("template", "fast"),
                  "answers": t.gold.get("answers", []), "turns": turns, "messages": messages}
        if t.managed:
            record["context"] = "managed"
        lines.append(json.dumps(record, ensure_ascii=False))
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)
