"""Scores split by question kind, for benchmarks whose gold names one (the factbook's ``kind``).

A run's mean hides a kind it never solves: research-qwen-v2 answers 34 % of the two-hop
borders-both questions and one capital-of-bordering question in 63, and only this split shows
where the next round of training has to go.
"""

from __future__ import annotations

from pathlib import Path

from eval.metrics import score_trajectory
from research_agent.store import TrajectoryStore


def kind_scores(run_dir: str | Path, asked: set[str] | None = None) -> dict[str, list[dict[str, float]]]:
    """Kind → per-question scores of a run's answers (only the ``asked`` ids, if given); answers
    whose gold names no kind are left out."""
    out: dict[str, list[dict[str, float]]] = {}
    for t in TrajectoryStore(run_dir).load():
        kind = (t.gold or {}).get("kind") if isinstance(t.gold, dict) else None
        if kind and (asked is None or t.id in asked):
            out.setdefault(str(kind), []).append(score_trajectory(t))
    return out


def _mean(rows: list[dict[str, float]], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows) if rows else 0.0


def kind_table(labels: list[str], runs: list[dict[str, list[dict[str, float]]]]) -> str:
    """One row per kind, one column per run: EM and searches a question; "" when no run has kinds."""
    kinds = sorted({k for r in runs for k in r})
    if not kinds:
        return ""
    lines = ["By question kind (EM, and searches a question in brackets):", "",
             "| kind | n | " + " | ".join(labels) + " |", "|---|---|" + "---|" * len(labels)]
    for kind in kinds:
        counts = [len(r.get(kind, [])) for r in runs]
        cells = []
        for rows, n in zip((r.get(kind, []) for r in runs), counts, strict=True):
            if not rows:
                cells.append("–")
                continue
            cell = f"{_mean(rows, 'em'):.3f} ({_mean(rows, 'searches'):.2f})"
            cells.append(cell if n == counts[0] else f"{cell}, n={n}")
        lines.append(f"| {kind} | {counts[0]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
