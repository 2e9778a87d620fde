"""Reward library: pure functions of a trajectory record, each returning a score and its breakdown.

`REWARDS` maps the names a training config uses to reward callables; `get_reward` hands out a
fresh copy of the stateful ones (RLER's level, judge caches) so two runs never share state.  See
rewards/README.md for the table of formulas, defaults and papers.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from .atomic import AtomicThoughtReward
from .base import RewardResult
from .carr import CaRRReward
from .code import code_shaped_reward, code_torl_reward
from .compose import ComposedReward, RewardHackingMonitor, Schedule, parse_reward_spec
from .otc import OTCReward
from .qa import em_reward, f1_reward, f1_with_action_penalty
from .report import ReportReward
from .rler import EvolvingRubricReward
from .toolrl import format_reward, tool_call_reward

REWARDS: dict[str, Callable[..., RewardResult]] = {
    "em": em_reward,
    "f1": f1_reward,
    "f1_penalty": f1_with_action_penalty,
    "format": format_reward,
    "tool_call": tool_call_reward,
    "carr": CaRRReward(),
    "atomic": AtomicThoughtReward(),
    "otc": OTCReward(),
    "rler": EvolvingRubricReward(),
    "code_shaped": code_shaped_reward,
    "code_torl": code_torl_reward,
    "report": ReportReward(),
}


def get_reward(name: str) -> Callable[..., Any]:
    """The reward called `name` (a fresh deep copy if it is an object), or a spec "a:w,b:w" composed."""
    if isinstance(name, str) and (":" in name or "," in name):
        return parse_reward_spec(name)
    if name not in REWARDS:
        raise ValueError(f"unknown reward {name!r}; known rewards: {', '.join(sorted(REWARDS))}")
    reward = REWARDS[name]
    return reward if callable(reward) and hasattr(reward, "__code__") else copy.deepcopy(reward)


__all__ = [
    "REWARDS",
    "get_reward",
    "RewardResult",
    "ComposedReward",
    "Schedule",
    "parse_reward_spec",
    "RewardHackingMonitor",
]
