"""Trajectory synthesis (D2): run the agent graph with a teacher over questions, write JSONL shards.

The output directory is a sharded trajectory store (``research_agent.store``, shared with the eval
runs): each finished trajectory is appended and fsynced at once, so ``kill -9`` loses at most the
trajectories in flight; on restart the shards are scanned, a torn last line is dropped, and only
(question, sample) pairs not already written are run.  Nothing is redone, nothing is duplicated.
One run at a time per output directory: a second run on the same directory fails at once with
``OutputLocked``, naming the run that holds it (two runs would each see the same pairs missing and
write every one twice).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

from research_agent.agent import AgentConfig, run_batch
from research_agent.store import LOCK_FILE, StoreLocked, TrajectoryStore
from research_agent.trajectory import Trajectory

__all__ = ["LOCK_FILE", "OutputLocked", "export_sft", "filter_trajectories", "load_trajectories",
           "output_lock", "scan_shards", "shard_store", "synthesize_trajectories"]

SHARD_SIZE = 500
# the synth-specific names of the store's lock, for callers that predate the one store
OutputLocked = StoreLocked


def _key(item_id: str, sample: int) -> str:
    return f"{item_id}::{sample}"


def _stored_key(traj: Trajectory) -> str:
    return traj.meta.get("key", _key(traj.id, 0))


def shard_store(out_dir: str | Path) -> TrajectoryStore:
    """The synth output directory as a trajectory store: shards keyed by (question, sample)."""
    return TrajectoryStore(out_dir, shard_size=SHARD_SIZE, key=_stored_key)


def output_lock(out_dir: str | Path):
    """Hold ``out_dir``'s exclusive lock, or raise ``OutputLocked`` at once (no waiting)."""
    return shard_store(out_dir).lock()


def scan_shards(out_dir: str | Path, repair: bool = True) -> tuple[dict[str, Trajectory], int]:
    """Read every shard; return {key: trajectory} and the number of torn lines dropped."""
    return shard_store(out_dir).scan(repair=repair)


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
    writer = shard_store(out_dir).writer()

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
    return shard_store(out_dir).load()


def filter_trajectories(trajs: list[Trajectory], *, min_reward: float = 0.8, require_format: bool = True,
                        confidence_keep: float | None = None, require_support: bool = False,
                        per_kind: int | None = None, seed: int = 0) -> tuple[list[Trajectory], dict]:
    """Correct (F1 ≥ min_reward), well-formed (answered, no void turn, searched) and confident.

    ``require_support`` adds the citation check of rejection sampling: a sampled run that guessed
    the right answer without a retrieved chunk stating it teaches guessing, so the answer's cited
    chunks must have been retrieved and support it (``research_agent.citations``).  ``per_kind``
    caps each (source, kind) group after filtering, so a data mix can favour the kinds a student
    lacks without hand-picking ids; the draw is seeded."""
    from rewards.qa import token_f1

    from .confidence import confidence_filter

    stats = {"input": len(trajs), "incorrect": 0, "bad_format": 0, "unsupported": 0, "low_confidence": 0,
             "over_kind_cap": 0}
    kept = []
    for t in trajs:
        if require_format and (not t.answered or t.has_void_turn or t.count("search") == 0):
            stats["bad_format"] += 1
            continue
        if token_f1(t.answer, t.gold.get("answers", [])) < min_reward:
            stats["incorrect"] += 1
            continue
        if require_support and not citations_check(t):
            stats["unsupported"] += 1
            continue
        kept.append(t)
    if confidence_keep is not None and kept:
        before = len(kept)
        kept = confidence_filter(kept, keep_top=confidence_keep)
        stats["low_confidence"] = before - len(kept)
    if per_kind is not None:
        before = len(kept)
        kept = cap_per_kind(kept, per_kind, seed)
        stats["over_kind_cap"] = before - len(kept)
    stats["kept"] = len(kept)
    return kept, stats


def citations_check(t: Trajectory) -> bool:
    """The answer cites at least one chunk, every cited chunk was retrieved, and they support it."""
    from research_agent.citations import check_citations

    if not t.citations:
        return False
    check = check_citations(t.answer or "", t.citations, t.retrieved)
    return not check["unretrieved"] and check["support_rate"] > 0


def trajectory_kind(t: Trajectory) -> str:
    return str(t.gold.get("kind") or t.meta.get("kind") or "")


def cap_per_kind(trajs: list[Trajectory], cap: int, seed: int = 0) -> list[Trajectory]:
    """At most ``cap`` of each (teacher, kind) group, drawn with ``seed``; the input order is kept."""
    import random

    groups: dict[tuple[str, str], list[int]] = {}
    for i, t in enumerate(trajs):
        groups.setdefault((str(t.meta.get("model", "")), trajectory_kind(t)), []).append(i)
    rng = random.Random(seed)
    chosen: set[int] = set()
    for key in sorted(groups):
        idx = groups[key]
        chosen.update(idx if len(idx) <= cap else rng.sample(idx, cap))
    return [t for i, t in enumerate(trajs) if i in chosen]


def export_sft(trajs: list[Trajectory], path: str | Path, tokenizer=None, tokenizer_name: str = "") -> int:
    """Write SFT examples (D3): the text turns our trainer renders, and what other trainers need.

    Teacher and student may not share a tokenizer, so ``turns`` is text: our SFT trainer renders it
    with the student's tokenizer exactly as the agent would (``research_agent.tasks``), observations
    masked out of the loss.  Given the student's ``tokenizer``, each record also carries that same
    rendering as token ids and chat ``messages`` that render to the same text (``synth.export``), so
    a trainer of another project learns the format the agent runs.  A managed-context trajectory is
    marked ``"context": "managed"``: its prompts are rebuilt per step, so its ids come per step.
    """
    from corpus.files import atomic_write_text

    from .export import sft_record

    lines = [json.dumps(sft_record(t, tokenizer, tokenizer_name), ensure_ascii=False) for t in trajs]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return len(lines)
