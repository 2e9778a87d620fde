"""Paired comparison of two eval runs on the questions both answered: is a difference beyond noise?

Small models on small held-out sets move by one or two questions between runs; a table of means
cannot tell that from an effect.  Pairing by question id removes the between-question variance:
EM changes are counted as wins (wrong → right) and losses (right → wrong) and judged with an exact
two-sided sign test; the mean F1 difference gets a seeded paired-bootstrap 95 % interval.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

from eval.metrics import score_trajectory
from research_agent.store import TrajectoryStore


def sign_test_p(wins: int, losses: int) -> float:
    """Exact two-sided binomial sign test (ties dropped); 1.0 when nothing changed."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_stats(base: dict[str, dict[str, float]], other: dict[str, dict[str, float]], *,
                 resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """``base`` / ``other``: question id → per-question scores (``score_trajectory`` rows)."""
    common = sorted(set(base) & set(other))
    wins = sum(1 for q in common if other[q]["em"] > base[q]["em"])
    losses = sum(1 for q in common if other[q]["em"] < base[q]["em"])
    diffs = [other[q]["f1"] - base[q]["f1"] for q in common]
    out: dict[str, Any] = {"n": len(common), "em_wins": wins, "em_losses": losses,
                           "em_ties": len(common) - wins - losses, "sign_test_p": sign_test_p(wins, losses)}
    if not common:
        out.update(f1_diff=0.0, f1_ci=(0.0, 0.0))
        return out
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    out["f1_diff"] = sum(diffs) / n
    out["f1_ci"] = (means[int(0.025 * resamples)], means[min(resamples - 1, int(0.975 * resamples))])
    return out


def run_scores(run_dir: str | Path, asked: set[str] | None = None) -> dict[str, dict[str, float]]:
    """Question id → per-question scores of an eval run directory (only the ``asked`` ids, if given)."""
    return {t.id: score_trajectory(t) for t in TrajectoryStore(run_dir).load() if asked is None or t.id in asked}


def paired_table(labels: list[str], stats: list[dict[str, Any]], base_label: str) -> str:
    lines = [f"Paired against {base_label} (questions both runs answered; EM wins = wrong there, right here):", "",
             "| run | n | EM wins | EM losses | sign test p | mean F1 diff | 95% CI |", "|---|---|---|---|---|---|---|"]
    for label, s in zip(labels, stats, strict=True):
        lo, hi = s["f1_ci"]
        p = s["sign_test_p"]
        shown = f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"
        lines.append(f"| {label} | {s['n']} | {s['em_wins']} | {s['em_losses']} | {shown} | "
                     f"{s['f1_diff']:+.3f} | [{lo:+.3f}, {hi:+.3f}] |")
    return "\n".join(lines)
