"""Running a code-agent eval: each tool setting (mode) through the one eval runner, then the summary.

Each mode runs greedily (temperature 0, so pass@1 is one deterministic sample; with test feedback a
turn that repeats failed code is drawn again at a temperature, redraw_repeats, so such a task is
sampled, with a seed, from its first repeat on) into OUT/<mode>/ (run.json, trajectories.jsonl
appended as tasks finish, results.json) by ``eval.runner.evaluate``, which resumes it task by task and
drains it on a signal.  OUT/results.json, table.md and pass_at_1.png sum the modes up (``code_report``).
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

from eval.code_report import rl_result, write_summary
from eval.runner import evaluate
from research_agent.code.agent import CodeAgentConfig
from research_agent.code.env import MODES
from research_agent.code.tasks import CodeTask
from research_agent.tasks import CodeTasks


def evaluate_mode(
    tasks: list[CodeTask],
    policy: Any,
    docs_browser: Any,
    config: CodeAgentConfig,
    mode_dir: str | Path,
    *,
    run_info: dict[str, Any],
    progress: bool = True,
    concurrency: int = 8,
    stop: threading.Event | None = None,
    drain_s: float | None = None,
) -> dict[str, Any]:
    """One mode (``config.mode``) into ``mode_dir``; its results (see ``eval.runner.evaluate``)."""
    multi = config.mode == "multi-tool"
    # only multi-tool reads the docs: the other modes resume whatever index is named
    info = {**run_info, "mode": config.mode, **({} if multi else {"docs": None})}
    return evaluate(CodeTasks(), tasks, policy, mode_dir, config=config, browser=docs_browser if multi else None,
                    run_info=info, progress=progress, concurrency=concurrency, stop=stop, drain_s=drain_s)


def evaluate_code(
    tasks: list[CodeTask],
    policy: Any,
    docs_browser: Any,
    modes: list[str],
    out_dir: str | Path,
    *,
    config: CodeAgentConfig | None = None,
    run_info: dict[str, Any] | None = None,
    rl_run: str | Path | None = None,
    progress: bool = True,
    concurrency: int = 8,
    stop: threading.Event | None = None,
    drain_s: float | None = None,
) -> dict[str, Any]:
    """Every mode of ``modes`` into ``out_dir``, then results.json, table.md and pass_at_1.png there.

    pass@1 is greedy: the config's temperature must be 0.  ``rl_run`` (an ``eval code`` output made
    with an adapter) adds its multi-tool pass@1 as the plot's "after RL" bar.  A stop (``stop``, or a
    first SIGINT/SIGTERM) raises ``EvalStopped`` once the mode's tasks in flight are saved.
    """
    config = config or CodeAgentConfig()
    if config.temperature != 0.0:
        raise ValueError("pass@1 here is greedy: leave temperature at 0")
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise ValueError(f"unknown mode(s) {unknown}; use {', '.join(MODES)} or all")
    rl = rl_result(rl_run) if rl_run else None  # fail before hours of eval, not after
    out = Path(out_dir)
    info = dict(run_info or {})
    per_mode = {}
    for mode in modes:
        per_mode[mode] = evaluate_mode(tasks, policy, docs_browser, dataclasses.replace(config, mode=mode), out / mode,
                                       run_info=info, progress=progress, concurrency=concurrency, stop=stop,
                                       drain_s=drain_s)["metrics"]
    return write_summary(out, per_mode, info, config.to_dict(), rl_run=rl_run, rl=rl)


__all__ = ["evaluate_code", "evaluate_mode"]
