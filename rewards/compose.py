"""C10: weighted composition of rewards with training-step schedules.

A trainer takes one reward; research wants several, each with its own weight that may change over
training (R1-Searcher: a retrieval reward first, the answer reward later; Atom-Searcher: a decaying
process weight).  `ComposedReward` is that sum: score = Σ wᵢ(step)·rᵢ, with every part's score,
weight and components kept in the breakdown.  `parse_reward_spec` builds one from the trainer's
config string, e.g. "f1_penalty:1.0,carr:0.3" or "f1:step(100,0,1),format:step(100,1,0)".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from .base import RewardResult
from .monitor import RewardHackingMonitor
from .schedule import Schedule

__all__ = ["Schedule", "ComposedReward", "parse_reward_spec", "RewardHackingMonitor", "call_reward"]


def call_reward(reward: Callable[..., RewardResult], traj: Any, step: int = 0) -> RewardResult:
    """Call a reward, passing the training step only to rewards that declare `uses_step = True`."""
    if getattr(reward, "uses_step", False):
        return reward(traj, step=step)
    return reward(traj)


def _name_of(reward: Any) -> str:
    return getattr(reward, "__name__", None) or type(reward).__name__


class ComposedReward:
    """Σ weight(step) · reward(traj) over named parts."""

    uses_step = True

    def __init__(self, parts: Sequence[tuple[Any, ...]]):
        """parts: (reward, weight) or (name, reward, weight); weight a number, string or Schedule."""
        if not parts:
            raise ValueError("a composed reward needs at least one part")
        self.parts: list[tuple[str, Callable[..., RewardResult], Schedule]] = []
        for part in parts:
            if len(part) == 2:
                reward, weight = part
                name = _name_of(reward)
            elif len(part) == 3:
                name, reward, weight = part
            else:
                raise ValueError(f"a part is (reward, weight) or (name, reward, weight), got {part!r}")
            if not callable(reward):
                raise ValueError(f"part {name!r} is not callable")
            if any(n == name for n, _, _ in self.parts):
                raise ValueError(f"reward {name!r} appears twice; give the parts distinct names")
            self.parts.append((str(name), reward, Schedule.from_config(weight)))

    def weights(self, step: int = 0) -> dict[str, float]:
        return {name: sched.value(step) for name, _, sched in self.parts}

    def __call__(self, traj: Any, step: int = 0) -> RewardResult:
        total = 0.0
        components: dict[str, float] = {}
        for name, reward, sched in self.parts:
            w = sched.value(step)
            result = call_reward(reward, traj, step)
            total += w * result.score
            components[name] = result.score
            components[f"{name}.weight"] = w
            components.update({f"{name}.{k}": v for k, v in result.components.items()})
        return RewardResult(total, components)

    def state_dict(self) -> dict[str, Any]:
        return {name: r.state_dict() for name, r, _ in self.parts if hasattr(r, "state_dict")}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, r, _ in self.parts:
            if name in state and hasattr(r, "load_state_dict"):
                r.load_state_dict(state[name])

    def __repr__(self) -> str:
        return "ComposedReward(" + ",".join(f"{n}:{s}" for n, _, s in self.parts) + ")"


def _split_top_level(spec: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    out, depth, cur = [], 0, []
    for ch in spec:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [p.strip() for p in out if p.strip()]


_PART = re.compile(r"^([A-Za-z_][\w-]*)\s*(?::\s*(.+))?$")


def parse_reward_spec(spec: str) -> ComposedReward:
    """ "name:weight,name:weight" -> ComposedReward; a weight may be a schedule call, a missing one is 1."""
    from . import get_reward

    if not isinstance(spec, str) or not spec.strip():
        raise ValueError("reward spec is empty; write e.g. 'f1_penalty:1.0,carr:0.3'")
    parts = []
    for item in _split_top_level(spec):
        m = _PART.match(item)
        if not m:
            raise ValueError(f"cannot read reward spec part {item!r}; write name:weight")
        name, weight = m.group(1), m.group(2) or "1"
        parts.append((name, get_reward(name), Schedule.from_config(weight.strip())))
    return ComposedReward(parts)
