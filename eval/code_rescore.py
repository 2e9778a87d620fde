"""Re-scoring a code-agent eval: the saved final submissions tested again under the current scorer.

For when the scoring changed but the model's turns did not (a library installed, the sanitizer, the
test limits): a submission ends its episode, so the model never saw the verdict being replaced and
regenerating would reproduce the same greedy turns.  ``python -m eval code --rescore --out DIR``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from corpus.files import atomic_write_text
from eval.code_metrics import code_metrics
from eval.code_report import rl_result, write_summary
from eval.rundir import RESULTS, RUN, TRAJECTORIES, RunDirError, check_schema, migrate, read_json, write_json
from research_agent.code.env import MODES
from research_agent.store import TrajectoryStore


def rescore_mode(mode_dir: Path, *, progress: bool = True) -> dict[str, Any]:
    """Re-run the tests of every final submission in ``mode_dir`` under the current scorer.

    Each re-scored step keeps the old verdict under ``info["before_rescore"]``; trajectories.jsonl is
    rewritten atomically. A run made with test feedback is refused: there the model did see the verdicts.
    """
    with TrajectoryStore(mode_dir).lock():
        return _rescore_mode(mode_dir, progress=progress)


def _rescore_mode(mode_dir: Path, *, progress: bool) -> dict[str, Any]:
    from tqdm import tqdm

    from research_agent.code.tasks import load_tasks, run_tests, sanitized_away

    run = read_json(mode_dir / RUN, "not a mode directory of `python -m eval code`")
    check_schema(run, mode_dir / RUN)
    run = migrate(run, mode_dir / RUN)
    if run.get("agent_config", {}).get("test_feedback") and run.get("mode") != "no-tools":
        raise RunDirError(f"{mode_dir} ran with test feedback: the model read each verdict and acted on it, "
                          "so a new verdict needs new turns; re-run it into a new --out instead of --rescore")
    tasks = {t.id: t for t in load_tasks(run["tasks"])}
    trajs = TrajectoryStore(mode_dir).load()
    flips = 0
    for traj in tqdm(trajs, desc=f"rescore {run['mode']}", disable=not progress, unit="task"):
        task_id = traj.gold.get("task_id", traj.id)
        if task_id not in tasks:
            raise RunDirError(f"{mode_dir}: task {task_id} is not in {run['tasks']} any more")
        subs = [s for s in traj.steps if s.action == "submit"]
        if not subs:
            continue
        step, task = subs[-1], tasks[task_id]
        res = run_tests(task, step.argument)
        before = {k: step.info.get(k) for k in ("passed", "error", "sanitized")}
        step.info.update(passed=res.ok, error=res.error, sanitized=sanitized_away(task, step.argument))
        step.info["before_rescore"] = before
        flips += bool(before["passed"]) != res.ok
        traj.gold["passed"] = res.ok
    atomic_write_text(mode_dir / TRAJECTORIES, "".join(t.to_json() + "\n" for t in trajs))
    results = {
        **run,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "rescored": True,
        "rescore_flips": flips,
        "n_items": len(trajs),
        "metrics": code_metrics(trajs),
    }
    write_json(mode_dir / RESULTS, results)
    return results


def rescore(out_dir: str | Path, *, progress: bool = True) -> dict[str, Any]:
    """Re-score every mode under ``out_dir`` (see ``rescore_mode``), then rewrite its summary."""
    out = Path(out_dir)
    mode_dirs = [out / m for m in MODES if (out / m / RUN).exists()]
    if not mode_dirs:
        raise RunDirError(f"{out} holds no `python -m eval code` mode directories")
    per_mode: dict[str, dict[str, Any]] = {}
    info: dict[str, Any] = {}
    agent_config: dict[str, Any] = {}
    for d in mode_dirs:
        res = rescore_mode(d, progress=progress)
        per_mode[res["mode"]] = res["metrics"]
        info = {k: res.get(k) for k in ("tasks", "limit", "model", "adapter", "endpoint", "docs")}
        agent_config = res["agent_config"]
    old = read_json(out / RESULTS, "") if (out / RESULTS).exists() else {}
    rl_run = old.get("rl_run")
    rl = rl_result(rl_run) if rl_run else None
    return write_summary(out, per_mode, info, agent_config, rl_run=rl_run, rl=rl, extra={"rescored": True})


__all__ = ["rescore", "rescore_mode"]
