"""G2 for code tasks: pass@1 of the code agent in seed 004's three tool settings, and the bar plot.

  python -m eval code --tasks dataframebench:test --mode all --model qwen2.5-coder-0.5b --limit 100 --out runs/code-base
  python -m eval code --tasks dataframebench:test --mode multi-tool --adapter runs/rl/final --out runs/code-rl
  python -m eval code ... --mode all --rl-run runs/code-rl --out runs/code-base   # adds the "after RL" bar
  python -m eval code --compare base=runs/code-base sft=runs/code-sft rl=runs/code-rl --out runs/cmp
  python -m eval code --rescore --out runs/code-base   # re-test saved submissions after a scorer change

Each mode runs greedily (temperature 0, so pass@1 is one deterministic sample; with test feedback a
turn that repeats failed code is drawn again at a temperature, redraw_repeats, so such a task is
sampled, with a seed, from its first repeat on) into OUT/<mode>/ (run.json, trajectories.jsonl
appended as tasks finish, results.json), so an interrupted run resumes task by task. A first Ctrl-C
(or SIGTERM) starts no more tasks and finishes and saves those in flight; a second one, or the end of
--drain-s, aborts them.
OUT/results.json holds every mode's metrics, OUT/table.md the comparison table and OUT/pass_at_1.png
the seed's bar plot. All JSON and Markdown files are written atomically.

The multi-tool docs come from an API-docs corpus built once from the installed libraries
(``research_agent.code.apidocs.api_docs_browser``, shared with the trainer) under
``<cache>/corpora/api-docs-v3``, or from ``--docs DIR``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from corpus.files import seeded_subset
from eval.compare import save_figure
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
from research_agent.code.agent import CodeAgentConfig, run_code_batch
from research_agent.code.apidocs import api_docs_browser, api_docs_dir
from research_agent.code.env import MODES
from research_agent.code.sandbox import SandboxError, require_contained
from research_agent.configs import ConfigError, add_config_flags, config_from_args
from research_agent.inference.devices import DeviceError, add_device_flags, use_device
from research_agent.store import TrajectoryStore
from research_agent.trajectory import Trajectory

LABELS = {"no-tools": "No tools", "code-only": "Code only", "multi-tool": "Multi-tool"}
COUNTED = ("search", "execute", "submit", "invalid")
TABLE = "table.md"
PLOT = "pass_at_1.png"
# per-mode run.json keys that must match for a resume to continue the same experiment
IDENTITY_KEYS = ("tasks", "mode", "model", "adapter", "endpoint", "agent_config", "docs")


# ---- metrics ----------------------------------------------------------------------------------
def code_metrics(trajs: list[Trajectory]) -> dict[str, Any]:
    """pass@1, submission rate, mean tool calls by type, execution errors, turns, tokens, rewards."""
    from rewards.code import code_shaped_reward, code_torl_reward

    n = len(trajs)
    if n == 0:
        return {"n": 0}

    def mean(values) -> float:
        values = list(values)
        return sum(values) / len(values) if values else 0.0

    stops: dict[str, int] = {}
    for t in trajs:
        stops[t.stop_reason or "unknown"] = stops.get(t.stop_reason or "unknown", 0) + 1
    return {
        "n": n,
        "pass_at_1": mean(bool(t.gold.get("passed")) for t in trajs),
        "submitted": mean(t.count("submit") > 0 for t in trajs),
        "autosubmitted": mean(bool(t.meta.get("autosubmitted")) for t in trajs),
        # turns drawn again because they repeated a failed submission's code or a run that raised
        # (redraw_repeats, redraw_failed_runs), and turns that repeated either all the same
        "redrawn_turns": mean(sum(1 for s in t.steps if s.info.get("redrawn")) for t in trajs),
        "repeated_turns": mean(sum(1 for s in t.steps if s.info.get("repeat_of")) for t in trajs),
        "repeated_failed_runs": mean(sum(1 for s in t.steps if s.info.get("repeat_of_run")) for t in trajs),
        # suggest_search: errors answered with a docs query, and how many of those the next turn searched
        "suggested_searches": mean(sum(1 for s in t.steps if s.info.get("suggested_search")) for t in trajs),
        "suggestions_taken": sum(_suggestions_taken(t) for t in trajs),
        "tool_calls": {a: mean(t.count(a) for t in trajs) for a in COUNTED},
        "refused_calls": mean(sum(1 for s in t.steps if s.info.get("refused")) for t in trajs),
        "execution_error_rate": mean(
            any(s.action == "execute" and s.info.get("ok") is False for s in t.steps) for t in trajs
        ),
        "turns": mean(t.turns for t in trajs),
        "generated_tokens": mean(t.generated_tokens for t in trajs),
        "seconds": mean(t.meta.get("seconds", 0.0) for t in trajs),
        "stop_reasons": stops,
        "reward_shaped": mean(code_shaped_reward(t).score for t in trajs),
        "reward_torl": mean(code_torl_reward(t).score for t in trajs),
    }


def _suggestions_taken(traj: Trajectory) -> int:
    """Suggested searches (``suggest_search``) the very next turn made."""
    return sum(1 for s, nxt in zip(traj.steps, traj.steps[1:], strict=False)
               if s.info.get("suggested_search") and nxt.action == "search")


def comparison_table(rows: dict[str, dict[str, Any]]) -> str:
    """Markdown table, one row per (label, metrics)."""
    head = (
        "| setting | n | pass@1 | submitted | search | execute | submit | invalid | exec errors "
        "| turns | shaped reward |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for label, m in rows.items():
        if not m.get("n"):
            lines.append(f"| {label} | 0 |" + " – |" * 9)
            continue
        c = m["tool_calls"]
        lines.append(
            f"| {label} | {m['n']} | {m['pass_at_1']:.1%} | {m['submitted']:.1%} | {c['search']:.2f} "
            f"| {c['execute']:.2f} | {c['submit']:.2f} | {c['invalid']:.2f} | {m['execution_error_rate']:.1%} "
            f"| {m['turns']:.2f} | {m['reward_shaped']:+.3f} |"
        )
    return "\n".join(lines) + "\n"


def plot_pass_rates(bars: list[tuple[str, float]], path: str | Path, title: str = "") -> Path:
    """Seed 004's bar plot (no tools / code only / multi-tool / multi-tool after RL), written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    palette = ["#bdbdbd", "#90a4ae", "#42a5f5", "#66bb6a", "#ffb74d", "#ba68c8"]
    colors = [palette[i % len(palette)] for i in range(len(bars))]
    fig, ax = plt.subplots(figsize=(2.2 * max(2, len(bars)) + 1, 4.5))
    values = [v for _, v in bars]
    drawn = ax.bar([label for label, _ in bars], values, color=colors, edgecolor="#333", linewidth=1.2)
    for bar, v in zip(drawn, values, strict=True):
        ax.text(
            bar.get_x() + bar.get_width() / 2,
            v + 0.01,
            f"{v:.1%}",
            ha="center",
            va="bottom",
            fontweight="bold",
        )
    ax.set_ylabel("pass@1")
    ax.set_ylim(0, max(max(values, default=0) * 1.5, 0.2))
    ax.set_title(title or "Code agent: pass@1 by tool setting", fontweight="bold")
    fig.tight_layout()
    path = Path(path)
    save_figure(fig, path)
    return path


def rl_result(run_dir: str | Path) -> dict[str, Any]:
    """The multi-tool metrics of an ``eval code`` run made with an adapter: the plot's "after RL" bar."""
    path = Path(run_dir) / RESULTS
    data = read_json(path, "not a `python -m eval code` output directory")
    check_schema(data, path)
    if not data.get("adapter"):
        raise RunDirError(f"{run_dir} was evaluated without --adapter, so it is not an after-RL result")
    metrics = (data.get("modes") or {}).get("multi-tool")
    if not metrics or not metrics.get("n"):
        raise RunDirError(f"{run_dir} has no multi-tool results; run it with --mode multi-tool or all")
    return metrics


def _result_modes(path: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(run info, metrics per mode) of an ``eval code`` output: its results.json (all modes) or one
    mode's results.json (``OUT/MODE/results.json``, the form the per-mode files in docs/results keep)."""
    if path.is_dir():
        path = path / RESULTS
    data = read_json(path, "not a `python -m eval code` results file")
    check_schema(data, path)
    if isinstance(data.get("modes"), dict):
        return data, {m: v for m, v in data["modes"].items() if isinstance(v, dict) and v.get("n")}
    if data.get("mode") in MODES and isinstance(data.get("metrics"), dict):
        return data, {data["mode"]: data["metrics"]}
    raise RunDirError(f"{path} has neither per-mode results nor one mode's metrics")


def compare_code_runs(entries: list[str], out_dir: str | Path) -> str:
    """Side-by-side table and bar plot of finished ``eval code`` results (e.g. base vs after SFT vs after
    RL, or two models): each entry is ``[LABEL=]PATH`` and every mode in it becomes a row and a bar.

    Runs on different task sets or different numbers of tasks are still drawn, with a warning: their
    pass rates are not comparable.
    """
    from corpus.files import atomic_write_text

    rows: dict[str, dict[str, Any]] = {}
    seen: set[tuple[Any, Any]] = set()
    for entry in entries:
        label, sep, raw = entry.partition("=")
        if not sep:
            label, raw = "", entry
        info, modes = _result_modes(Path(raw))
        if not modes:
            raise RunDirError(f"{raw} holds no finished mode")
        name = label or f"{info.get('model', '?')}{' + adapter' if info.get('adapter') else ''}"
        for mode, metrics in modes.items():
            key = name if len(modes) == 1 and label else f"{name}, {LABELS[mode].lower()}"
            rows[key] = metrics
            seen.add((info.get("tasks"), metrics.get("n")))
    if len(seen) > 1:
        print("warning: these runs cover different tasks or numbers of tasks "
              f"({', '.join(f'{t} n={n}' for t, n in sorted(seen, key=str))}); their pass rates are not "
              "comparable", file=sys.stderr)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = comparison_table(rows)
    atomic_write_text(out / TABLE, f"# Code agent: compared runs\n\n{table}")
    tasks = ", ".join(sorted({str(t) for t, _ in seen}))
    plot_pass_rates([(k.replace(", ", "\n"), float(m["pass_at_1"])) for k, m in rows.items()], out / PLOT,
                    title=f"pass@1 on {tasks}")
    return table


# ---- running ----------------------------------------------------------------------------------
# Agent-config fields added after runs were made, at the value that reproduces those runs.
LEGACY_AGENT_CONFIG = {
    "test_feedback": False,  # runs made before the option: a submission ended the task
    "observation_format": "inline",
    "stop_loops": False,
    "submit_hint": False,
    "continue_quotes": False,
    "stub_submits_last_run": False,
    "flag_repeats": False,
    "recall_passing_run": False,
    "submit_last_run_at_limit": False,
    "redraw_repeats": 0,
    "redraw_failed_runs": False,  # runs before the option redrew failed submissions' code only
    # runs before seeded redraws drew unseeded; they resume as seed 0 (a redraw is a sample either way)
    "redraw_seed": 0,
    "suggest_search": False,  # runs before the option made no suggestion
}


def _comparable(run: dict[str, Any]) -> dict[str, Any]:
    """A run's identity as compared on resume: older configs get the legacy values of newer fields,
    and no-tools ignores the observation format and the submit hint (its one turn is over before any
    result is shown)."""
    cfg = run.get("agent_config")
    if isinstance(cfg, dict):
        cfg = {**LEGACY_AGENT_CONFIG, **cfg}
        if run.get("mode") == "no-tools":
            cfg.pop("observation_format", None)
            cfg.pop("submit_hint", None)
            cfg.pop("test_feedback", None)  # one turn: its submission is final either way
    return {**run, "agent_config": cfg}


def _start_mode(mode_dir: Path, run: dict[str, Any]) -> None:
    path = mode_dir / RUN
    if path.exists():
        old = read_json(path, "")
        check_schema(old, path)
        was, now = _comparable(old), _comparable(run)
        diff = [k for k in IDENTITY_KEYS if was.get(k) != now.get(k)]
        if diff:
            details = "; ".join(f"{k}: {was.get(k)!r} → {now.get(k)!r}" for k in diff)
            raise RunDirError(f"{mode_dir} holds a different run ({details}); use a new --out directory")
    elif (mode_dir / TRAJECTORIES).exists():
        raise RunDirError(f"{mode_dir} has trajectories but no {RUN}; use a new --out directory")
    write_json(path, run)


class EvalStopped(RuntimeError):
    """A stop was asked for; the tasks that had started are saved and the run resumes from them."""


def _abort(signum: int) -> None:
    """The signal's default action (the process ends; the tasks in flight rerun on resume)."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


@contextmanager
def drain_on_signals(stop: threading.Event, drain_s: float | None = None, abort=_abort):
    """The first SIGINT/SIGTERM sets ``stop`` (finish the tasks in flight, start no more); a second
    one, or ``drain_s`` seconds of draining, gets the signal's default action (``abort(signum)``),
    which ends the process with the finished tasks saved.

    Without this, stopping an eval threw away every task in flight — with 8 multi-turn tasks at
    several minutes each, up to an hour of CPU.  Without a deadline a drain can outlast a scheduler's
    grace period (64 tasks in flight on a GPU took minutes, and the kill that followed lost the files
    written after the run), hence ``--drain-s``.
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

    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return
    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for timer in timers:  # the drain ended in time
            timer.cancel()
        for sig, handler in old.items():
            signal.signal(sig, handler)


def evaluate_mode(
    tasks: list,
    policy: Any,
    docs_browser: Any,
    config: CodeAgentConfig,
    mode_dir: Path,
    *,
    run_info: dict[str, Any],
    progress: bool = True,
    concurrency: int = 8,
    stop: threading.Event | None = None,
) -> dict[str, Any]:
    """One mode into ``mode_dir`` (resumable by task id); returns and saves its results.

    Raises ``EvalStopped`` once ``stop`` is set, after the tasks in flight are saved, and
    ``StoreLocked`` when another run is writing to ``mode_dir``.
    """
    store = TrajectoryStore(mode_dir)
    with store.lock():
        return _evaluate_mode(tasks, policy, docs_browser, config, store, run_info=run_info, progress=progress,
                              concurrency=concurrency, stop=stop)


def _evaluate_mode(tasks: list, policy: Any, docs_browser: Any, config: CodeAgentConfig, store: TrajectoryStore,
                   *, run_info: dict[str, Any], progress: bool, concurrency: int,
                   stop: threading.Event | None) -> dict[str, Any]:
    mode_dir = store.dir
    mode_dir.mkdir(parents=True, exist_ok=True)
    run = {"schema": RUN_SCHEMA, "mode": config.mode, "agent_config": config.to_dict(), **run_info}
    if config.mode != "multi-tool":
        run["docs"] = None  # only multi-tool reads the docs: the other modes resume whatever index is named
    _start_mode(mode_dir, run)
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        raise ValueError("task ids must be unique (resume matches tasks by id)")
    from eval.runner import answer_code, code_identity

    done = {k: t for k, t in store.scan()[0].items() if k in set(ids)}
    todo = [{"id": t.id, "task": t} for t in tasks if t.id not in done]
    code = code_identity()
    t0 = time.time()
    if todo:
        with store.writer() as writer:

            def on_result(traj: Trajectory) -> None:
                traj.meta["code"] = code  # which code made this answer: a resume may mix versions
                writer.write(traj)
                done[traj.id] = traj

            browser = docs_browser if config.mode == "multi-tool" else None
            run_code_batch(
                todo,
                policy,
                browser,
                config,
                progress=progress,
                on_result=on_result,
                concurrency=concurrency,
                stop=stop,
            )
    if stop is not None and stop.is_set():
        saved = sum(1 for i in ids if i in done)
        raise EvalStopped(f"stopped: {saved} of {len(ids)} {config.mode} tasks saved in {mode_dir}; "
                          "the same command resumes")
    trajs = [done[i] for i in ids if i in done]
    results = {
        **run,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "n_items": len(tasks),
        "n_resumed": len(tasks) - len(todo),
        "code": code,
        "answer_code": answer_code(trajs),
        "eval_seconds": time.time() - t0,
        "metrics": code_metrics(trajs),
    }
    write_json(mode_dir / RESULTS, results)
    return results


def evaluate_code(
    tasks: list,
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
) -> dict[str, Any]:
    """Every mode of ``modes`` into ``out_dir``, then results.json, table.md and pass_at_1.png there.

    pass@1 is greedy: the config's temperature must be 0.  ``rl_run`` (an ``eval code`` output made
    with an adapter) adds its multi-tool pass@1 as the plot's "after RL" bar.
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
        cfg = dataclasses.replace(config, mode=mode)
        per_mode[mode] = evaluate_mode(
            tasks,
            policy,
            docs_browser,
            cfg,
            out / mode,
            run_info=info,
            progress=progress,
            concurrency=concurrency,
            stop=stop,
        )["metrics"]
    return write_summary(out, per_mode, info, config, rl_run=rl_run, rl=rl)


def write_summary(
    out: Path,
    per_mode: dict[str, dict[str, Any]],
    info: dict[str, Any],
    config: CodeAgentConfig,
    *,
    rl_run: str | Path | None = None,
    rl: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """OUT/results.json (every mode's metrics), table.md and pass_at_1.png from per-mode metrics."""
    from corpus.files import atomic_write_text
    from eval.runner import versions

    modes = [m for m in MODES if m in per_mode]
    suffix = "(adapter)" if info.get("adapter") else "(base)"
    rows = {f"{LABELS[m]} {suffix}": per_mode[m] for m in modes}
    bars = [(f"{LABELS[m]}\n{suffix}", per_mode[m].get("pass_at_1", 0.0)) for m in modes]
    if rl is not None:
        rows["Multi-tool (after RL)"] = rl
        bars.append(("Multi-tool\n(after RL)", float(rl["pass_at_1"])))
    table = comparison_table(rows)
    atomic_write_text(out / TABLE, f"# Code agent on {info.get('tasks', '?')}\n\n{table}")
    plot_pass_rates(bars, out / PLOT, title=f"pass@1 on {info.get('tasks', 'code tasks')}")
    summary = {
        "schema": RUN_SCHEMA,
        **info,
        "agent_config": config.to_dict(),
        "modes": per_mode,
        "rl_run": str(rl_run) if rl_run else None,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "versions": versions(),
        "table": table,
        **(extra or {}),
    }
    write_json(out / RESULTS, summary)
    return summary


# ---- re-scoring -------------------------------------------------------------------------------
def rescore_mode(mode_dir: Path, *, progress: bool = True) -> dict[str, Any]:
    """Re-run the tests of every final submission in ``mode_dir`` under the current scorer.

    For when the scoring changed but the model's turns did not (a library installed, the sanitizer,
    the test limits): a submission ends its episode, so the model never saw the verdict being
    replaced and regenerating would reproduce the same greedy turns. Each re-scored step keeps the
    old verdict under ``info["before_rescore"]``; trajectories.jsonl is rewritten atomically. A run
    made with test feedback is refused: there the model did see the verdicts.
    """
    with TrajectoryStore(mode_dir).lock():
        return _rescore_mode(mode_dir, progress=progress)


def _rescore_mode(mode_dir: Path, *, progress: bool) -> dict[str, Any]:
    from tqdm import tqdm

    from corpus.files import atomic_write_text
    from research_agent.code.tasks import load_tasks, run_tests, sanitized_away

    run = read_json(mode_dir / RUN, "not a mode directory of `python -m eval code`")
    check_schema(run, mode_dir / RUN)
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
    ids = [t.id for t in trajs]
    results = {
        **run,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "rescored": True,
        "rescore_flips": flips,
        "n_items": len(ids),
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
    per_mode, info, config = {}, {}, None
    for d in mode_dirs:
        res = rescore_mode(d, progress=progress)
        per_mode[res["mode"]] = res["metrics"]
        info = {k: res.get(k) for k in ("tasks", "limit", "model", "adapter", "endpoint", "docs")}
        config = CodeAgentConfig(**res["agent_config"])
    old = read_json(out / RESULTS, "") if (out / RESULTS).exists() else {}
    rl_run = old.get("rl_run")
    rl = rl_result(rl_run) if rl_run else None
    return write_summary(out, per_mode, info, config, rl_run=rl_run, rl=rl, extra={"rescored": True})


# ---- CLI --------------------------------------------------------------------------------------
def code_config(args: argparse.Namespace) -> CodeAgentConfig:
    """CodeAgentConfig from ``--config``, ``--set`` and the common flags (the mode is --mode)."""
    try:
        return config_from_args(args, CodeAgentConfig, reserved={"mode": "--mode"})
    except ConfigError as e:
        raise SystemExit(f"error: {e}") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m eval code", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--tasks",
        default="dataframebench:test",
        help="dataframebench:train|val|test, humaneval, kodcode:PATH.jsonl, bigcodebench:PATH.jsonl",
    )
    p.add_argument(
        "--mode", default="all", choices=[*MODES, "all"], help="tool setting (all: the three baselines)"
    )
    p.add_argument("--model", default="qwen2.5-coder-0.5b", help="model name, HF id or local path")
    p.add_argument("--adapter", default=None, help="LoRA adapter directory (e.g. after RL)")
    p.add_argument("--endpoint", default=None, help="OpenAI-compatible server URL instead of a local model")
    p.add_argument("--limit", type=int, default=None,
                   help="a seeded random subset of N tasks (same seed: smaller subsets are prefixes)")
    p.add_argument("--seed", type=int, default=0, help="seed of the --limit subset")
    p.add_argument(
        "--ids",
        default=None,
        help="comma-separated task ids (DFB/B0013 or B0013): only these, e.g. to re-run the tasks a "
        "change is about; applied after --limit",
    )
    p.add_argument("--out", required=True, help="output directory (an interrupted run there is resumed)")
    p.add_argument("--rl-run", default=None, help="an `eval code --adapter` output: adds the after-RL bar")
    p.add_argument("--corpus", "--docs", dest="docs", default=None,
                   help="API-docs corpus directory (default: the cached one)")
    p.add_argument(
        "--docs-modules",
        default=None,
        help="comma-separated modules to document when the docs corpus is built (default: all)",
    )
    p.add_argument("--retriever", default="hybrid", help="dense, bm25 or hybrid (docs search)")
    add_config_flags(p, CodeAgentConfig)
    add_device_flags(p, quantize=True)
    p.add_argument("--allow-unsafe-sandbox", action="store_true",
                   help="run model-written code even where the sandbox cannot contain it (docs/security.md); "
                        "without it, an uncontained level is refused before anything runs")
    p.add_argument(
        "--concurrency", type=int, default=8, help="trajectories in flight at once (batched policy)"
    )
    p.add_argument(
        "--rescore",
        action="store_true",
        help="re-run the tests of the final submissions already in --out under the current scorer "
        "(after installing a library or a scorer fix); generates nothing",
    )
    p.add_argument(
        "--compare",
        nargs="+",
        default=None,
        metavar="[LABEL=]RESULTS",
        help="no generation: tabulate and plot finished results (an --out directory or a results.json, "
        "one mode's included) into --out/table.md and pass_at_1.png",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--drain-s", type=float, default=None, metavar="SECONDS",
                   help="after a first Ctrl-C/SIGTERM, finish the tasks in flight for at most this long, then "
                   "stop without them (they rerun on resume); default: wait for all (a scheduler's grace "
                   "period wants less)")
    return p


def select_ids(tasks: list, ids: str | None) -> list:
    """The tasks named in ``ids`` (full ids or the part after the source's ``/``), in task order."""
    if not ids:
        return tasks
    wanted = [w.strip() for w in ids.split(",") if w.strip()]
    by_name = {}
    for t in tasks:
        by_name[t.id] = t
        by_name.setdefault(t.id.rsplit("/", 1)[-1], t)
    missing = [w for w in wanted if w not in by_name]
    if missing:
        raise ValueError(f"task ids not among the loaded tasks: {', '.join(missing)}")
    chosen = {by_name[w].id for w in wanted}
    return [t for t in tasks if t.id in chosen]


def main(argv: list[str] | None = None) -> int:
    from corpus.store import CorpusError
    from research_agent.code.tasks import TaskSourceError, load_tasks

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.drain_s is not None and args.drain_s < 0:
        parser.error("--drain-s must be at least 0")
    modes = list(MODES) if args.mode == "all" else [args.mode]
    try:
        if not args.compare:  # everything else runs model-written code: refuse an uncontained sandbox
            level = require_contained(args.allow_unsafe_sandbox)
            if not args.quiet:
                print(f"code sandbox: {level}", file=sys.stderr)
        if args.rescore:
            summary = rescore(args.out, progress=not args.quiet)
            print(summary["table"])
            return 0
        if args.compare:
            print(compare_code_runs(args.compare, args.out))
            print(f"results: {Path(args.out) / TABLE}, {Path(args.out) / PLOT}", file=sys.stderr)
            return 0
        config = code_config(args)
        if not args.endpoint:
            use_device(args.device, args.dtype)
        if args.limit is not None and args.limit < 1:
            raise ValueError("--limit must be at least 1")
        tasks = load_tasks(args.tasks)
        if args.limit is not None:
            tasks = seeded_subset(tasks, args.limit, args.seed)
        tasks = select_ids(tasks, args.ids)
        if not tasks:
            raise ValueError(f"{args.tasks} has no tasks")
        if args.rl_run:
            rl_result(args.rl_run)
        docs = None
        if "multi-tool" in modes:
            modules = (
                [m.strip() for m in args.docs_modules.split(",") if m.strip()] if args.docs_modules else None
            )
            docs = api_docs_browser(args.docs, modules, retriever=args.retriever, progress=not args.quiet)
        from research_agent.inference.policy import load_policy

        policy = load_policy(args.model, adapter=args.adapter, endpoint=args.endpoint, progress=not args.quiet,
                             device=args.device, dtype=args.dtype, quantize=args.quantize)
        info = {
            "tasks": args.tasks,
            "limit": args.limit,
            **({"seed": args.seed} if args.limit is not None else {}),
            **({"ids": [t.id for t in tasks]} if args.ids else {}),
            "model": args.model,
            "adapter": args.adapter,
            "endpoint": args.endpoint,
            "docs": str(getattr(docs, "path", "")) if docs else None,
            **({"quantize": args.quantize} if args.quantize != "none" else {}),
        }
        stop = threading.Event()
        with drain_on_signals(stop, args.drain_s):
            summary = evaluate_code(
                tasks,
                policy,
                docs,
                modes,
                args.out,
                config=config,
                run_info=info,
                rl_run=args.rl_run,
                progress=not args.quiet,
                concurrency=args.concurrency,
                stop=stop,
            )
    except EvalStopped as e:
        print(str(e), file=sys.stderr)
        return 130
    except (RunDirError, TaskSourceError, CorpusError, ValueError, DeviceError, FileNotFoundError, SandboxError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(summary["table"])
    print(json.dumps({m: v.get("pass_at_1") for m, v in summary["modes"].items()}))
    print(
        f"results: {Path(args.out) / RESULTS}, {Path(args.out) / TABLE}, {Path(args.out) / PLOT}",
        file=sys.stderr,
    )
    return 0


__all__ = [
    "api_docs_browser",
    "api_docs_dir",
    "code_metrics",
    "compare_code_runs",
    "comparison_table",
    "evaluate_code",
    "evaluate_mode",
    "main",
    "plot_pass_rates",
    "rescore",
    "rescore_mode",
    "rl_result",
    "select_ids",
    "write_summary",
]
