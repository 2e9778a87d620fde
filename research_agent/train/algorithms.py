"""Advantages and group filters: small pure functions over reward lists.

Rewards arrive as a flat list ordered group by group (the G trajectories of one prompt adjacent).
"""

from __future__ import annotations

import math
from collections import defaultdict


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


def anchor_state(traj, t: int) -> str:
    """The environment state a step starts from: what the previous tool call returned.

    GiGPO groups steps of a group's trajectories that start from the same state (here: the same
    observation text — the same search results, the same opened page), so their actions can be
    compared against each other.  Every first turn starts from the question alone.
    """
    if t == 0:
        return "<start>"
    prev = traj.steps[t - 1]
    return f"{prev.action}\x00{prev.observation.strip()}"


def gigpo_advantages(trajs: list, rewards: list[float], group_size: int, *, gamma: float = 0.95,
                     omega: float = 1.0, eps: float = 1e-6) -> list[list[float]]:
    """Per-step advantages of GiGPO (group-in-group policy optimization, E6).

    advantage(step t of trajectory i) = episode advantage of i (GRPO: reward normalized within its
    group) + omega × step advantage, where the step advantage normalizes the discounted return
    gamma^(steps after t) × reward among the group's steps that share t's anchor state.  A step
    whose state no other step of the group reached gets no step term.  Sparse final rewards thus
    still credit individual turns: among the first turns, the ones that led to shorter successful
    trajectories score higher; after identical search results, the better next action does.
    """
    n = len(rewards)
    if len(trajs) != n:
        raise ValueError(f"{len(trajs)} trajectories for {n} rewards")
    episode = group_advantages(rewards, group_size, "grpo", eps)
    out = [[episode[i]] * len(t.steps) for i, t in enumerate(trajs)]
    for g in range(0, n, group_size):
        buckets: dict[str, list[tuple[int, int, float]]] = defaultdict(list)
        for i in range(g, g + group_size):
            steps = trajs[i].steps
            for t in range(len(steps)):
                buckets[anchor_state(trajs[i], t)].append((i, t, gamma ** (len(steps) - 1 - t) * rewards[i]))
        for members in buckets.values():
            if len(members) < 2:
                continue
            rets = [m[2] for m in members]
            mean = sum(rets) / len(rets)
            std = math.sqrt(sum((r - mean) ** 2 for r in rets) / len(rets))
            if std < eps:
                continue
            for i, t, r in members:
                out[i][t] += omega * (r - mean) / (std + eps)
    return out


def sequence_advantages(traj, adv) -> list[list[float] | float]:
    """The advantage of each of ``traj.sequences()``: the trajectory's scalar, or (per-step
    advantages) one value per token, the step's advantage on its completion tokens, 0 elsewhere."""
    seqs = traj.sequences()
    if not isinstance(adv, list):
        return [float(adv)] * len(seqs)
    if len(adv) != len(traj.steps):
        raise ValueError(f"{len(adv)} step advantages for {len(traj.steps)} steps")
    if traj.managed:  # one sequence per step that wrote something, as in Trajectory.sequences
        return [[0.0] * len(s.prompt_ids) + [a] * len(s.completion_ids)
                for a, s in zip(adv, traj.steps, strict=True) if s.completion_ids]
    tokens = [0.0] * len(traj.prompt_ids)
    for a, s in zip(adv, traj.steps, strict=True):
        tokens += [a] * len(s.completion_ids) + [0.0] * len(s.observation_ids)
    return [tokens]
