"""The seed's training figure (reward, loss and KL, tool calls), redrawn from metrics.jsonl during training."""

from __future__ import annotations

import json
import os
from pathlib import Path


def read_metrics(path: str | Path) -> list[dict]:
    rows = []
    if not Path(path).exists():
        return rows
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


REWARD_KEYS = (("reward", "reward"), ("pass_rate", "pass rate"), ("answer_rate", "answer (code: submit) rate"))
TOOLS = ("search", "open", "find", "execute", "submit")


def panels(rows: list[dict]) -> list[str]:
    """The figure's panels that have data: an SFT run logs no reward or tool calls, and an empty
    panel reads as a broken run."""
    out = []
    if any(k in r for r in rows for k, _ in REWARD_KEYS):
        out.append("reward")
    out.append("loss")
    if any(f"tool_rate/{t}" in r for r in rows for t in TOOLS):
        out.append("tools")
    if any(k.startswith("curriculum/") for r in rows for k in r):
        out.append("curriculum")
    if kind_names(rows):
        out.append("kinds")
    return out


KIND_WINDOW = 8  # steps: one step draws a handful of questions of a kind, too few to read alone


def kind_names(rows: list[dict]) -> list[str]:
    """The task kinds the rollouts logged (``kind/<kind>/n``)."""
    return sorted({k[len("kind/"):-len("/n")] for r in rows for k in r if k.startswith("kind/") and k.endswith("/n")})


def kind_pass_rates(rows: list[dict], window: int = KIND_WINDOW) -> dict[str, list[float | None]]:
    """Per kind, its pass rate over the trajectories of the last ``window`` steps at each step (None
    while it has none): per-step rates of a kind drawn a few times a step are mostly noise."""
    out: dict[str, list[float | None]] = {}
    for kind in kind_names(rows):
        series: list[float | None] = []
        for i in range(len(rows)):
            part = rows[max(0, i - window + 1):i + 1]
            n = sum(r.get(f"kind/{kind}/n", 0) for r in part)
            passed = sum(r.get(f"kind/{kind}/n", 0) * r.get(f"kind/{kind}/pass_rate", 0.0) for r in part)
            series.append(passed / n if n else None)
        out[kind] = series
    return out


def plot_training(metrics_path: str | Path, out_png: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in read_metrics(metrics_path) if "step" in r]
    if not rows:
        return
    steps = [r["step"] for r in rows]
    shown = panels(rows)
    fig, axes = plt.subplots(1, len(shown), figsize=(5 * len(shown), 4), squeeze=False)
    for ax, panel in zip(axes[0], shown, strict=True):
        ax.set_xlabel("step")
        if panel == "reward":
            for key, label in REWARD_KEYS:
                if any(key in r for r in rows):
                    ax.plot(steps, [r.get(key, 0) for r in rows], label=label)
            ax.set_title("reward and pass rate")
            ax.legend()
        elif panel == "loss":
            ax.plot(steps, [r.get("loss", 0) for r in rows], label="loss")
            ax.set_title("loss and KL" if any("kl" in r for r in rows) else "loss")
            if any("kl" in r for r in rows):
                ax2 = ax.twinx()
                ax2.plot(steps, [r.get("kl", 0) for r in rows], color="tab:red", label="KL")
                ax2.legend(loc="upper right")
            ax.legend(loc="upper left")
        elif panel == "kinds":
            for kind, series in kind_pass_rates(rows).items():
                ax.plot(steps, [float("nan") if v is None else v for v in series], label=kind)
            ax.set_title(f"pass rate per task kind (last {KIND_WINDOW} steps)")
            ax.set_ylim(-0.02, 1.02)
            ax.legend(fontsize="small")
        elif panel == "curriculum":
            kinds = sorted({k for r in rows for k in r if k.startswith("curriculum/")})
            for key in kinds:
                ax.plot(steps, [r.get(key, 0) for r in rows], label=key.split("/", 1)[1])
            ax.set_title("curriculum: draw probability per kind")
            ax.legend(fontsize="small")
        else:
            for name in TOOLS:
                key = f"tool_rate/{name}"
                if any(key in r for r in rows):
                    ax.plot(steps, [r.get(key, 0) for r in rows], label=name)
            ax.set_title("tool calls per trajectory")
            ax.legend()
    fig.tight_layout()
    tmp = Path(out_png).with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, out_png)
