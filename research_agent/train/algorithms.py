"""Advantages and group filters: small pure functions over reward lists.

Rewards arrive as a flat list ordered group by group (the G trajectories of one prompt adjacent).
"""

from __future__ import annotations

import math


def group_advantages(rewards: list[float], group_size: int, algorithm: str = "reinforce",
                     eps: float = 1e-6) -> list[float]:
    """Per-trajectory advantages.

    - reinforce: r − mean over the whole batch (REINFORCE with a batch-mean baseline)
    - grpo:      (r − mean of its group) / (std of its group + eps)   (population std, as GRPO)
    - rloo:      r − mean of the *other* members of its group          (leave-one-out)
    """
    n = len(rewards)
    if n == 0:
        return []
    if any(math.isnan(r) for r in rewards):
        raise ValueError("rewards contain NaN")
    if algorithm == "reinforce":
        mean = sum(rewards) / n
        return [r - mean for r in rewards]
    if n % group_size:
        raise ValueError(f"{n} rewards do not split into groups of {group_size}")
    out: list[float] = []
    for g in range(0, n, group_size):
        grp = rewards[g: g + group_size]
        mean = sum(grp) / len(grp)
        if algorithm == "grpo":
            std = math.sqrt(sum((r - mean) ** 2 for r in grp) / len(grp))
            out += [(r - mean) / (std + eps) for r in grp]
        elif algorithm == "rloo":
            if len(grp) < 2:
                raise ValueError("rloo needs a group size of at least 2")
            total = sum(grp)
            out += [r - (total - r) / (len(grp) - 1) for r in grp]
        else:
            raise ValueError(f"unknown algorithm {algorithm!r}; choose reinforce, grpo or rloo")
    return out


def keep_groups(rewards: list[float], correct: list[bool], group_size: int, *, low: float = 0.2,
                high: float = 0.8, zero_variance: bool = True) -> list[bool]:
    """Per-group keep flags (dynamic filtering, Agent RL Scaling Law / DAPO).

    A group is dropped when its accuracy is above ``high`` or below ``low`` (nothing left to
    learn, or nothing to learn from), or when all its rewards are equal (zero advantage).
    """
    keep = []
    for g in range(0, len(rewards), group_size):
        grp = rewards[g: g + group_size]
        acc = sum(correct[g: g + group_size]) / len(grp)
        ok = (low <= 0 or acc >= low) and (high >= 1 or acc <= high)
        if zero_variance and max(grp) - min(grp) < 1e-9:
            ok = False
        keep.append(ok)
    return keep
