"""The one return type of every reward: a score and the named parts it was built from.

A trainer needs one number per trajectory, but a person debugging reward hacking needs to see *why*
a trajectory scored what it did, so every reward also returns its components.  A non-finite score
would silently poison a whole advantage batch, so it is refused at construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class RewardResult:
    """A reward's score plus its breakdown (component name -> value)."""

    score: float
    components: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            self.score = float(self.score)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"reward score must be a number, got {self.score!r}") from exc
        if not math.isfinite(self.score):
            raise ValueError(f"reward score must be finite, got {self.score}; check the reward's inputs")
        self.components = {str(k): float(v) for k, v in dict(self.components).items()}


class Reward(Protocol):
    """Anything called with a trajectory that returns a RewardResult."""

    def __call__(self, traj: Any) -> RewardResult: ...


def clamp(x: float, lo: float = 0.0, hi: float = 1.0) -> float:
    """Clamp into [lo, hi]; NaN maps to lo so a bad judge output can never leak into training."""
    if x != x:  # NaN
        return lo
    return max(lo, min(hi, x))
