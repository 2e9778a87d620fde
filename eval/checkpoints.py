"""G4: reward-hacking check — training reward vs a held-out metric, checkpoint by checkpoint.

A policy that games its reward (citation stuffing, answer-length inflation, format tricks) shows a
training reward that keeps rising while held-out F1 stays flat or falls.  We evaluate every
``checkpoints/step-N`` adapter of a training run on a held-out set, pair it with the mean training
reward logged since the previous checkpoint, let ``RewardHackingMonitor`` judge the trend, and plot
the two curves on one figure so a person can see the divergence too.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path
from statistics import mean
from typing import Any

from eval.benchmarks import CorpusSpec
from eval.compare import _pyplot, save_figure
from eval.rundir import RUN_SCHEMA, write_json
from eval.runner import evaluate
from research_agent.tasks import ResearchTasks
from rewards.compose import RewardHackingMonitor

_STEP_DIR = re.compile(r"^step-(\d+)$")


class TrainingRunError(RuntimeError):
    """The training run directory lacks checkpoints or usable metrics."""


def find_checkpoints(train_dir: str | Path) -> list[tuple[int, Path]]:
    """``checkpoints/step-N`` directories, by step."""
    root = Path(train_dir) / "checkpoints"
    if not root.is_dir():
        raise TrainingRunError(
            f"{train_dir} has no checkpoints/ directory (expected checkpoints/step-N/ adapters)"
        )
    found = sorted(
        (int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _STEP_DIR.match(p.name))
    )
    if not found:
        raise TrainingRunError(f"{root} holds no step-N checkpoint directories")
    return found


def read_training_metrics(train_dir: str | Path) -> list[dict[str, Any]]:
    """Rows of ``metrics.jsonl`` that carry a step and a finite reward (a torn last line is skipped)."""
    path = Path(train_dir) / "metrics.jsonl"
    if not path.exists():
        raise TrainingRunError(f"{path} is missing: the training run logs per-step rewards there")
    rows = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:
                break  # the trainer was writing this line when it stopped
            raise TrainingRunError(f"{path}:{i + 1} is not valid JSON ({e})") from e
        reward = row.get("reward")
        if "step" in row and isinstance(reward, int | float) and math.isfinite(reward):
            rows.append(row)
    if not rows:
        raise TrainingRunError(f"{path} has no rows with 'step' and a finite 'reward'")
    return rows


def reward_at_checkpoints(rows: list[dict[str, Any]], steps: list[int]) -> dict[int, float]:
    """Mean training reward over the steps since the previous checkpoint (noise-averaged, not one batch)."""
    out, prev = {}, -math.inf
    for step in sorted(steps):
        window = [r["reward"] for r in rows if prev < r["step"] <= step]
        if not window:
            earlier = [r for r in rows if r["step"] <= step]
            if not earlier:
                raise TrainingRunError(f"no training reward logged at or before checkpoint step {step}")
            window = [earlier[-1]["reward"]]
        out[step] = float(mean(window))
        prev = step
    return out


def plot_reward_vs_heldout(rows: list[dict[str, Any]], metric: str, path: Path) -> Path:
    """Training reward (left axis) and held-out metric (right axis) per checkpoint; alarms in red."""
    plt = _pyplot()
    steps = [r["step"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, [r["train_reward"] for r in rows], marker="o", color="tab:blue", label="training reward")
    ax.set_xlabel("checkpoint step")
    ax.set_ylabel("training reward", color="tab:blue")
    ax2 = ax.twinx()
    ax2.plot(steps, [r["heldout"] for r in rows], marker="s", color="tab:orange", label=f"held-out {metric}")
    ax2.set_ylabel(f"held-out {metric}", color="tab:orange")
    for r in rows:
        if r["alarms"]:
            ax.axvline(r["step"], color="red", alpha=0.3, linestyle="--")
    ax.set_title("Reward-hacking check" + (" — alarms raised" if any(r["alarms"] for r in rows) else ""))
    fig.tight_layout()
    save_figure(fig, path)
    return path


def check_checkpoints(
    train_dir: str | Path,
    items: list[dict],
    browser: Any,
    config: Any,
    out_dir: str | Path,
    *,
    model: str,
    bench: str = "",
    corpus: CorpusSpec | None = None,
    metric: str = "f1",
    monitor: RewardHackingMonitor | None = None,
    load_policy: Callable[..., Any] | None = None,
    run_info: dict[str, Any] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Evaluate every checkpoint into ``out_dir/step-N`` (resumable), then judge and plot the trend."""
    if load_policy is None:
        from research_agent.inference.policy import load_policy
    checkpoints = find_checkpoints(train_dir)
    rewards = reward_at_checkpoints(read_training_metrics(train_dir), [s for s, _ in checkpoints])
    monitor = monitor or RewardHackingMonitor(window=min(3, max(2, len(checkpoints))))
    out = Path(out_dir)
    rows = []
    for step, ckpt in checkpoints:
        if progress:
            print(f"checkpoint step {step}: evaluating {ckpt}", file=sys.stderr)
        policy = load_policy(model, adapter=str(ckpt))
        info = {"bench": bench, "corpus": (corpus or CorpusSpec()).to_dict(), **(run_info or {}), "model": model,
                "adapter": str(ckpt), "step": step}
        result = evaluate(ResearchTasks(), items, policy, out / f"step-{step}", config=config, browser=browser,
                          run_info=info, progress=progress)
        del policy  # one checkpoint's weights in memory at a time
        m = result["metrics"]
        heldout = float(m.get(metric, 0.0))
        alarms = monitor.update(
            step,
            rewards[step],
            heldout,
            citations_per_claim=m.get("citations_per_claim"),
            support_rate=m.get("support_rate"),
            answer_length=m.get("answer_words"),
        )
        rows.append(
            {
                "step": step,
                "checkpoint": str(ckpt),
                "train_reward": rewards[step],
                "heldout": heldout,
                "metrics": m,
                "alarms": alarms,
            }
        )
    report = {
        "schema": RUN_SCHEMA,
        "train_dir": str(train_dir),
        "bench": bench,
        "metric": metric,
        "model": model,
        "checkpoints": rows,
        "alarms": [list(a) for a in monitor.alarms],
        "hacking_suspected": bool(monitor.alarms),
    }
    write_json(out / "checkpoints.json", report)
    plot_reward_vs_heldout(rows, metric, out / "reward_vs_heldout.png")
    return report
