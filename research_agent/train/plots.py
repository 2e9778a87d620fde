"""The seed's three-panel training figure, redrawn from metrics.jsonl during training."""

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


def plot_training(metrics_path: str | Path, out_png: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in read_metrics(metrics_path) if "step" in r]
    if not rows:
        return
    steps = [r["step"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    ax = axes[0]
    for key, label in (("reward", "reward"), ("pass_rate", "pass rate"), ("answer_rate", "answer rate")):
        if any(key in r for r in rows):
            ax.plot(steps, [r.get(key, 0) for r in rows], label=label)
    ax.set_title("reward and pass rate")
    ax.set_xlabel("step")
    if ax.lines:
        ax.legend()
    ax = axes[1]
    ax.plot(steps, [r.get("loss", 0) for r in rows], label="loss")
    ax.set_title("loss and KL")
    ax.set_xlabel("step")
    if any("kl" in r for r in rows):
        ax2 = ax.twinx()
        ax2.plot(steps, [r.get("kl", 0) for r in rows], color="tab:red", label="KL")
        ax2.legend(loc="upper right")
    ax.legend(loc="upper left")
    ax = axes[2]
    for name in ("search", "open", "find", "execute", "submit"):
        key = f"tool_rate/{name}"
        if any(key in r for r in rows):
            ax.plot(steps, [r.get(key, 0) for r in rows], label=name)
    ax.set_title("tool calls per trajectory")
    ax.set_xlabel("step")
    if ax.lines:
        ax.legend()
    fig.tight_layout()
    tmp = Path(out_png).with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, out_png)
