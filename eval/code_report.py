"""What a code-agent eval shows: the comparison table, the seed's pass@1 bar plot, the summary of every mode.

``write_summary`` writes OUT/results.json (every mode's metrics), OUT/table.md and OUT/pass_at_1.png;
``compare_code_runs`` tabulates and plots finished runs side by side (``eval code --compare``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from corpus.files import atomic_write_text
from eval.compare import save_figure
from eval.rundir import CONFIG_VERSION, RESULTS, RUN_SCHEMA, RunDirError, check_schema, read_json, write_json
from eval.runner import versions
from research_agent.code.env import MODES

LABELS = {"no-tools": "No tools", "code-only": "Code only", "multi-tool": "Multi-tool"}
TABLE = "table.md"
PLOT = "pass_at_1.png"


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


def write_summary(
    out: Path,
    per_mode: dict[str, dict[str, Any]],
    info: dict[str, Any],
    agent_config: dict[str, Any],
    *,
    rl_run: str | Path | None = None,
    rl: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """OUT/results.json (every mode's metrics), table.md and pass_at_1.png from per-mode metrics."""
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
        "config_version": CONFIG_VERSION,
        "task_type": "code",
        **info,
        "agent_config": agent_config,
        "modes": per_mode,
        "rl_run": str(rl_run) if rl_run else None,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "versions": versions(),
        "table": table,
        **(extra or {}),
    }
    write_json(out / RESULTS, summary)
    return summary


__all__ = ["LABELS", "PLOT", "TABLE", "compare_code_runs", "comparison_table", "plot_pass_rates", "rl_result",
           "write_summary"]
