"""G3: run the agent over a benchmark, save trajectories as they finish, write results JSON.

``evaluate`` is the one entry point (the CLI, the checkpoint sweep and tests all use it).  It runs
questions concurrently through ``run_batch`` (one batched policy), appends each finished
trajectory to ``trajectories.jsonl`` at once, and resumes an interrupted run by skipping the
question ids already on disk.  The results JSON records everything needed to reproduce or trust a
number: the agent config, the run settings, library versions and the corpus index manifest.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from eval.benchmarks import CorpusSpec
from eval.metrics import qa_metrics
from eval.rundir import (
    RESULTS,
    RUN,
    RUN_SCHEMA,
    TRAJECTORIES,
    RunDirError,
    check_schema,
    read_json,
    write_json,
)
from research_agent.store import TrajectoryStore
from research_agent.trajectory import Trajectory

VERSIONED = (
    "research-agent",
    "torch",
    "transformers",
    "peft",
    "sentence-transformers",
    "faiss-cpu",
    "langgraph",
)
# run.json keys that must match for a resume to continue the same experiment
IDENTITY_KEYS = ("bench", "model", "adapter", "endpoint", "agent_config", "corpus", "memory", "format_hints")


def config_dict(config: Any) -> dict[str, Any]:
    """An agent config as plain JSON (dataclass, pydantic model or mapping)."""
    if config is None:
        return {}
    if hasattr(config, "to_dict"):
        return dict(config.to_dict())
    if dataclasses.is_dataclass(config):
        return dataclasses.asdict(config)
    if hasattr(config, "model_dump"):
        return dict(config.model_dump())
    return dict(config)


def versions() -> dict[str, str]:
    """Python, key libraries and the git commit: a number without its code version is not a result."""
    out = {"python": platform.python_version()}
    for pkg in VERSIONED:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    try:
        root = Path(__file__).resolve().parent.parent
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if commit.returncode == 0:
            out["git_commit"] = commit.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return out


@functools.cache
def code_identity() -> str:
    """Which code answers: the git commit, plus ``+dirty.<hash>`` of the uncommitted changes to tracked
    Python files; outside a checkout, the installed ``research-agent`` version.  Every answer records it
    (``trajectory.meta["code"]``), so a resumed run shows which answers older code made."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode == 0:
            diff = subprocess.run(["git", "-C", str(root), "diff", "HEAD", "--", "*.py"], capture_output=True,
                                  timeout=30).stdout
            commit = head.stdout.strip()
            return f"{commit}+dirty.{hashlib.sha1(diff).hexdigest()[:10]}" if diff else commit
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return f"research-agent {metadata.version('research-agent')}"
    except metadata.PackageNotFoundError:
        return "unknown"


UNRECORDED = "unrecorded"  # an answer saved before answers recorded their code


def short_code(identity: str) -> str:
    """A code identity for people: the commit's first 10 digits, the rest as it is."""
    head, plus, rest = identity.partition("+")
    return (head[:10] if len(head) == 40 else head) + plus + rest


def answer_code(trajs: list[Trajectory]) -> dict[str, int]:
    """How many of the answers each version of the code made (``UNRECORDED`` for answers from before
    the identity was recorded)."""
    counts: dict[str, int] = {}
    for t in trajs:
        key = str(t.meta.get("code") or UNRECORDED)
        counts[key] = counts.get(key, 0) + 1
    return counts


def index_manifest(browser: Any) -> dict[str, Any]:
    """The corpus index manifest (embedding model, counts, checksums), wherever the browser keeps it."""
    manifest = getattr(browser, "manifest", None)
    if callable(manifest):
        manifest = manifest()
    if isinstance(manifest, dict):
        return manifest
    if dataclasses.is_dataclass(manifest):
        return dataclasses.asdict(manifest)
    for attr in ("path", "root", "index_dir"):
        root = getattr(browser, attr, None)
        if root and (Path(root) / "manifest.json").exists():
            return json.loads((Path(root) / "manifest.json").read_text(encoding="utf-8"))
    return {"backend": type(browser).__name__}


def _same_adapter(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """An adapter is the same when its files are, wherever it lies (a run restored into another
    directory, as a recipe stage resumed in a later session, names it by another path); a run that
    recorded no hash of its adapter is known by the path alone."""
    if old.get("adapter_sha256") and new.get("adapter_sha256"):
        return old["adapter_sha256"] == new["adapter_sha256"]
    return old.get("adapter") == new.get("adapter")


def _start_run(out_dir: Path, run: dict[str, Any]) -> None:
    """Write run.json; on resume first check that the directory holds the same experiment.

    Only identity settings must match: a larger ``limit`` with the same seed extends the subset
    (smaller subsets are prefixes), so the questions already answered are kept.
    """
    path = out_dir / RUN
    if path.exists():
        old = read_json(path, "")
        check_schema(old, path)
        diff = [k for k in IDENTITY_KEYS if (not _same_adapter(old, run) if k == "adapter" else old.get(k) != run.get(k))]
        if diff:
            details = "; ".join(f"{k}: {old.get(k)!r} → {run.get(k)!r}" for k in diff)
            raise RunDirError(
                f"{out_dir} holds a different run ({details}); use a new --out directory "
                "or delete the old one"
            )
    elif (out_dir / TRAJECTORIES).exists():
        raise RunDirError(
            f"{out_dir} has trajectories but no {RUN}: it was not written by this eval; "
            "use a new --out directory"
        )
    write_json(path, run)


def evaluate(
    items: list[dict],
    policy: Any,
    browser: Any,
    config: Any,
    out_dir: str | Path,
    *,
    bench: str = "",
    corpus: CorpusSpec | None = None,
    run_info: dict[str, Any] | None = None,
    progress: bool = True,
    concurrency: int = 8,
    guidance: Callable[[dict], str] | None = None,
) -> dict[str, Any]:
    """Evaluate ``items`` into ``out_dir`` and return the results dict (also saved as results.json).

    ``guidance(item)`` is text put before each question (e.g. case memory, B6).

    Already-finished question ids in ``out_dir/trajectories.jsonl`` are not redone.  ``run_info``
    holds the settings that identify the run (model, adapter, limit, seed ...); a resume with
    different identity settings is refused rather than mixing two experiments in one file.
    """
    from research_agent.agent import run_batch

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    run = {
        "schema": RUN_SCHEMA,
        "bench": bench,
        "agent_config": config_dict(config),
        "corpus": (corpus or CorpusSpec()).to_dict(),
        **(run_info or {}),
    }
    store = TrajectoryStore(out_dir)
    with store.lock():  # a second eval on the same --out would run and write every question again
        _start_run(out_dir, run)

        wanted = {str(it["id"]): it for it in items}
        if len(wanted) != len(items):
            raise ValueError("benchmark items must have unique ids (resume matches questions by id)")
        done = {k: t for k, t in store.scan()[0].items() if k in wanted}
        todo = [it for it in items if str(it["id"]) not in done]
        code = code_identity()
        if done and progress:
            print(f"resuming {out_dir}: {len(done)} of {len(items)} questions already answered", file=sys.stderr)
        older = {k: n for k, n in answer_code(list(done.values())).items() if k != code}
        if older:  # said every time, not only with progress: `eval compare` refuses such a run
            made = ", ".join(f"{n} by {short_code(k)}" if k != UNRECORDED else f"{n} from before answers recorded "
                             "their code" for k, n in older.items())
            print(f"warning: {sum(older.values())} of the answers resumed in {out_dir} were made by other code "
                  f"({made}; this is {short_code(code)}); `eval compare` refuses a run of mixed code: "
                  "use a new --out to answer every question again", file=sys.stderr)

        t0 = time.time()
        if todo:
            with store.writer() as writer:

                def on_result(traj: Trajectory) -> None:
                    item = wanted.get(traj.id, {})
                    for key, value in item.items():  # gold must travel with the record, whatever the agent kept
                        if key not in ("id", "question"):
                            traj.gold.setdefault(key, value)
                    traj.meta["code"] = code  # which code made this answer: a resume may mix versions
                    writer.write(traj)
                    done[traj.id] = traj

                run_batch(
                    todo, policy, browser, config, progress=progress, on_result=on_result, concurrency=concurrency,
                    guidance=guidance,
                )

        trajs = [done[str(it["id"])] for it in items if str(it["id"]) in done]
        results = {
            **run,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "n_items": len(items),
            # the questions asked: a run directory may also hold answers to questions a benchmark no
            # longer asks (left out as ill-posed), which comparisons must not pair
            "question_ids": [str(it["id"]) for it in items],
            "n_resumed": len(items) - len(todo),
            "code": code,
            "answer_code": answer_code(trajs),
            "eval_seconds": time.time() - t0,
            "metrics": qa_metrics(trajs),
            "versions": versions(),
            "index_manifest": index_manifest(browser),
        }
        write_json(out_dir / RESULTS, results)
    return results


def load_run_trajectories(run_dir: str | Path) -> list[Trajectory]:
    """The trajectories of a run (read-only: a broken last line is skipped, not repaired)."""
    return TrajectoryStore(run_dir).load()


__all__ = ["evaluate", "load_run_trajectories", "versions", "index_manifest", "config_dict", "code_identity",
           "answer_code", "short_code", "UNRECORDED", "RESULTS"]
