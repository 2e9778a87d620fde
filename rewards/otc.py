"""C7: tool efficiency (OTC, "Acting Less is Reasoning More", Wang et al. 2025).

With m tool calls used and n the estimated number needed, the tool reward peaks at m = n:
  n = 0:  cos(m·π / (2m + c))                        (1 at m = 0, falls with every call)
  n > 0:  sin(f(m, n)·π / (2n)),  f = m if m < n else 2nm / (m + n)
so too few calls (m → 0) and too many (m → ∞) both tend to 0.  It multiplies the outcome reward of
correct answers only — a wrong answer is never rewarded for being cheap.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from .base import RewardResult
from .qa import em_reward


def otc_tool_reward(m: int, n: int, c: float = 1.0) -> float:
    """OTC's tool-use reward in [0, 1] for m calls against n needed."""
    if m < 0 or n < 0:
        raise ValueError(f"call counts must be >= 0, got m={m}, n={n}")
    if c <= 0:
        raise ValueError("c must be > 0")
    if n == 0:
        return math.cos(m * math.pi / (2 * m + c))
    f = m if m < n else 2 * n * m / (m + n)
    return max(0.0, math.sin(f * math.pi / (2 * n)))


class OTCReward:
    """outcome · r_tool(m, n) for correct answers, the plain outcome otherwise.

    n comes from gold["needed_calls"]; without it the efficiency term is 1 (flagged
    `missing_needed_calls`), so the reward degrades to the outcome reward.
    """

    def __init__(
        self,
        outcome: Callable[[Any], RewardResult] = em_reward,
        c: float = 1.0,
        correct_threshold: float = 1.0,
    ):
        if c <= 0:
            raise ValueError("c must be > 0")
        self.outcome = outcome
        self.c = c
        self.correct_threshold = correct_threshold

    def __call__(self, traj: Any) -> RewardResult:
        outcome = self.outcome(traj)
        m = traj.tool_calls
        gold = getattr(traj, "gold", None) or {}
        n = gold.get("needed_calls") if isinstance(gold, dict) else None
        missing = not isinstance(n, int | float) or isinstance(n, bool) or n < 0
        r_tool = 1.0 if missing else otc_tool_reward(m, int(n), self.c)
        correct = outcome.score >= self.correct_threshold
        score = outcome.score * r_tool if correct else outcome.score
        return RewardResult(
            score,
            {
                "outcome": outcome.score,
                "tool_reward": r_tool,
                "calls": float(m),
                "correct": float(correct),
                "missing_needed_calls": float(missing),
            },
        )


def tool_productivity(
    trajs: Iterable[Any], outcome: Callable[[Any], RewardResult] = em_reward, correct_threshold: float = 1.0
) -> float:
    """OTC's tool productivity: correct answers per tool call (calls floored at 1 to stay finite)."""
    trajs = list(trajs)
    correct = sum(outcome(t).score >= correct_threshold for t in trajs)
    calls = sum(t.tool_calls for t in trajs)
    return correct / max(calls, 1)
