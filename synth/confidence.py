"""DeepConf-style confidence of a trajectory from its token log-probs.

DeepConf scores a reasoning trace by the confidence of sliding windows ("groups") of tokens and
filters traces whose weakest group is unsure.  Its token confidence is the negative mean of the
top-k log-probs; backends here return the chosen token's log-prob, so token confidence is that
log-prob (higher = surer).  Both statistics follow the paper: the lowest group confidence and the
mean of the bottom 10% of groups.
"""

from __future__ import annotations

import math
from collections import defaultdict

from research_agent.trajectory import Trajectory
from rewards.qa import normalize_answer


def group_confidences(logprobs: list[float], window: int = 16) -> list[float]:
    if not logprobs:
        return []
    if len(logprobs) <= window:
        return [sum(logprobs) / len(logprobs)]
    total = sum(logprobs[:window])
    out = [total / window]
    for i in range(window, len(logprobs)):
        total += logprobs[i] - logprobs[i - window]
        out.append(total / window)
    return out


def trajectory_confidence(traj: Trajectory, window: int = 16) -> dict[str, float]:
    """{"lowest_group", "bottom10", "mean"} over the model's own tokens (observations excluded)."""
    lps = [lp for lp, m in zip(traj.logprobs, traj.token_mask, strict=False) if m]
    groups = group_confidences(lps, window)
    if not groups:
        return {"lowest_group": -math.inf, "bottom10": -math.inf, "mean": -math.inf}
    ordered = sorted(groups)
    k = max(1, math.ceil(0.1 * len(ordered)))
    return {"lowest_group": ordered[0], "bottom10": sum(ordered[:k]) / k, "mean": sum(lps) / len(lps)}


def confidence_filter(trajs: list[Trajectory], keep_top: float = 0.9, stat: str = "lowest_group") -> list[Trajectory]:
    """Keep the ``keep_top`` share of trajectories with the highest confidence statistic."""
    if not trajs:
        return []
    scored = sorted(trajs, key=lambda t: trajectory_confidence(t)[stat], reverse=True)
    return scored[: max(1, math.ceil(keep_top * len(scored)))]


def weighted_vote(trajs: list[Trajectory], stat: str = "bottom10") -> str | None:
    """Confidence-weighted majority vote over the answers of several samples of one question."""
    votes: dict[str, float] = defaultdict(float)
    surface: dict[str, str] = {}
    for t in trajs:
        if not t.answered:
            continue
        key = normalize_answer(t.answer)
        votes[key] += math.exp(trajectory_confidence(t)[stat])
        surface.setdefault(key, t.answer)
    if not votes:
        return None
    return surface[max(votes, key=votes.get)]
