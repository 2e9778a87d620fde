"""G3: the one eval runner — any task type's items through the agent, saved as they finish, results JSON.

``evaluate(task_type, items, policy, out)`` is the one entry point (``eval qa``, each mode of ``eval
code``, the checkpoint sweep and tests use it).  It owns what every eval needs and nothing a task type
decides:

- resume: an interrupted run skips the item ids already in ``trajectories.jsonl``;
- identity: run.json names the experiment, and a resume of another one is refused (``rundir.start_run``,
  after ``rundir.migrate`` brings an older run.json to today's layout);
- one run at a time per directory (the trajectory store's lock);
- drain: a first SIGINT/SIGTERM finishes the episodes in flight and stops (``EvalStopped``), a second one
  or ``drain_s`` seconds of draining aborts them (``eval.drain``);
- which code made each answer (``trajectory.meta["code"]``, counted in ``answer_code``);
- results.json: the metrics of the task type (``METRICS``) and everything needed to reproduce or trust a
  number: the agent config, the run settings, library versions and the index manifest.

Episodes run concurrently through the task type's ``run`` (one batched policy).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from eval.code_metrics import code_metrics
from eval.drain import EvalStopped, drain_on_signals
from eval.metrics import qa_metrics
from eval.rundir import CONFIG_VERSION, IDENTITY_KEYS, RESULTS, RUN_SCHEMA, start_run, write_json
from research_agent.store import TrajectoryStore
from research_agent.tasks import TaskType
from research_agent.trajectory import Trajectory

# how each task type's run is summed up in results.json
METRICS: dict[str, Callable[[list[Trajectory]], dict[str, Any]]] = {"research": qa_metrics, "code": code_metrics}
VERSIONED = (
    "research-agent",
    "torch",
    "transformers",
    "peft",
    "sentence-transformers",
    "faiss-cpu",
    "langgraph",
)


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
    if browser is None:
        return {}
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


def evaluate(
    task_type: TaskType,
    items: list[Any],
    policy: Any,
    out: str | Path,
    *,
    config: Any,
    browser: Any = None,
    run_info: dict[str, Any] | None = None,
    progress: bool = True,
    concurrency: int = 8,
    stop: threading.Event | None = None,
    drain_s: float | None = None,
) -> dict[str, Any]:
    """Evaluate ``items`` (tasks of ``task_type``) into ``out`` and return the results (also results.json).

    ``config`` is the agent's config and ``browser`` what its environment searches.  ``run_info`` holds
    the settings that identify the run (benchmark or tasks, model, adapter, limit, seed ...); a resume
    with different identity settings is refused rather than mixing two experiments in one file.  Items
    already answered in ``out`` are not redone.  Setting ``stop`` (or a first SIGINT/SIGTERM) starts no
    more episodes; those in flight are saved, then ``EvalStopped`` is raised and no results are written.
    Raises ``StoreLocked`` when another run is writing to ``out``.
    """
    if task_type.name not in METRICS:
        raise ValueError(f"no eval metrics for task type {task_type.name!r}; add them to eval.runner.METRICS")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    episodes = [task_type.item(it) for it in items]
    ids = [e["id"] for e in episodes]
    if len(set(ids)) != len(ids):
        raise ValueError("items must have unique ids (resume matches them by id)")
    run = {
        "schema": RUN_SCHEMA,
        "config_version": CONFIG_VERSION,
        "task_type": task_type.name,
        "agent_config": config_dict(config),
        **(run_info or {}),
    }
    stop = stop or threading.Event()
    store = TrajectoryStore(out)
    with store.lock():  # a second eval on the same --out would run and write every item again
        start_run(out, run)
        wanted = set(ids)
        done = {k: t for k, t in store.scan()[0].items() if k in wanted}
        todo = [e for e in episodes if e["id"] not in done]
        code = code_identity()
        if done and progress:
            print(f"resuming {out}: {len(done)} of {len(ids)} already answered", file=sys.stderr)
        _warn_older_code(out, done, code)

        t0 = time.time()
        if todo:
            with store.writer() as writer, drain_on_signals(stop, drain_s):

                def on_result(traj: Trajectory) -> None:
                    traj.meta["code"] = code  # which code made this answer: a resume may mix versions
                    writer.write(traj)
                    done[traj.id] = traj

                task_type.run(todo, policy, browser, config, progress=progress, on_result=on_result,
                              concurrency=concurrency, stop=stop)
        if stop.is_set():
            saved = sum(1 for i in ids if i in done)
            raise EvalStopped(f"stopped: {saved} of {len(ids)} saved in {out}; the same command resumes")

        trajs = [done[i] for i in ids if i in done]
        results = {
            **run,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "n_items": len(ids),
            # the items asked: a run directory may also hold answers to questions a benchmark no
            # longer asks (left out as ill-posed), which comparisons must not pair
            "question_ids": ids,
            "n_resumed": len(ids) - len(todo),
            "code": code,
            "answer_code": answer_code(trajs),
            "eval_seconds": time.time() - t0,
            "metrics": METRICS[task_type.name](trajs),
            "versions": versions(),
            "index_manifest": index_manifest(browser),
        }
        write_json(out / RESULTS, results)
    return results


def _warn_older_code(out: Path, done: dict[str, Trajectory], code: str) -> None:
    """Said every time, not only with progress: `eval compare` refuses a run of mixed code."""
    older = {k: n for k, n in answer_code(list(done.values())).items() if k != code}
    if older:
        made = ", ".join(f"{n} by {short_code(k)}" if k != UNRECORDED else f"{n} from before answers recorded "
                         "their code" for k, n in older.items())
        print(f"warning: {sum(older.values())} of the answers resumed in {out} were made by other code "
              f"({made}; this is {short_code(code)}); `eval compare` refuses a run of mixed code: "
              "use a new --out to answer every question again", file=sys.stderr)


def load_run_trajectories(run_dir: str | Path) -> list[Trajectory]:
    """The trajectories of a run (read-only: a broken last line is skipped, not repaired)."""
    return TrajectoryStore(run_dir).load()


__all__ = ["evaluate", "load_run_trajectories", "versions", "index_manifest", "config_dict", "code_identity",
           "answer_code", "short_code", "EvalStopped", "IDENTITY_KEYS", "METRICS", "UNRECORDED", "RESULTS"]
