"""C6: evolving citation rubrics (DR Tulu's RLER, 2025).

A fixed citation check is saturated and then gamed; RLER evolves the rubric with the policy.  Here
the rubric is a ladder of citation requirements, each stricter than the last:
  0 any_citation        — the answer cites something;
  1 retrieved_citation  — a cited id is a document the agent actually retrieved;
  2 supported_citation  — a cited document's text supports a claim of the answer;
  3 all_supported       — every citation is retrieved and supports some claim.
The reward is the current level's check.  When the running mean of the last `window` scores at the
current level reaches `threshold`, the level tightens (and the window restarts), so the policy is
always pushed one step beyond what it has learned.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any

from .base import RewardResult
from .judge import OfflineSupportJudge, SupportJudge
from .text import sentences

LADDER = ("any_citation", "retrieved_citation", "supported_citation", "all_supported")
_MARKER = re.compile(r"\[[^\[\]]*\]")


def answer_claims(answer: str) -> list[str]:
    """Sentences of the answer with citation markers removed."""
    return [c for c in (s.strip() for s in sentences(_MARKER.sub(" ", answer or ""))) if c]


class EvolvingRubricReward:
    """Citation-ladder reward whose level tightens as the policy saturates it."""

    def __init__(
        self,
        threshold: float = 0.8,
        window: int = 64,
        judge: SupportJudge | None = None,
        levels: tuple[str, ...] = LADDER,
    ):
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        if window < 1:
            raise ValueError("window must be >= 1")
        unknown = [lv for lv in levels if lv not in LADDER]
        if unknown or not levels:
            raise ValueError(f"levels must be a non-empty subset of {LADDER}, got {levels}")
        self.threshold = threshold
        self.window = window
        self.judge = judge or OfflineSupportJudge()
        self.levels = tuple(levels)
        self.level = 0
        self.history: deque[float] = deque(maxlen=window)

    def checks(self, traj: Any) -> dict[str, float]:
        """Pass/fail of every ladder rung for this trajectory."""
        cited = list(dict.fromkeys(getattr(traj, "citations", None) or []))
        retrieved = getattr(traj, "retrieved", None) or {}
        known = [c for c in cited if c in retrieved]
        claims = answer_claims(getattr(traj, "answer", None) or "")
        supports = {c: any(self.judge(claim, str(retrieved[c])) for claim in claims) for c in known}
        return {
            "any_citation": float(bool(cited)),
            "retrieved_citation": float(bool(known)),
            "supported_citation": float(any(supports.values())),
            "all_supported": float(bool(cited) and len(known) == len(cited) and all(supports.values())),
        }

    def evaluate(self, traj: Any, level: int | None = None) -> RewardResult:
        """Score at `level` (default: the current one) without changing any state — for eval."""
        level = self.level if level is None else level
        if not 0 <= level < len(self.levels):
            raise ValueError(f"level must be in [0, {len(self.levels) - 1}], got {level}")
        checks = self.checks(traj)
        return RewardResult(checks[self.levels[level]], {**checks, "level": float(level)})

    def observe(self, score: float) -> bool:
        """Record a score at the current level; returns True when the level tightened."""
        self.history.append(float(score))
        full = len(self.history) == self.window
        if full and sum(self.history) / self.window >= self.threshold and self.level < len(self.levels) - 1:
            self.level += 1
            self.history.clear()
            return True
        return False

    def __call__(self, traj: Any) -> RewardResult:
        result = self.evaluate(traj)
        tightened = self.observe(result.score)
        return RewardResult(result.score, {**result.components, "tightened": float(tightened)})

    def state_dict(self) -> dict[str, Any]:
        return {"level": self.level, "history": list(self.history), "levels": list(self.levels)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        level = int(state.get("level", 0))
        if list(state.get("levels", self.levels)) != list(self.levels) or not 0 <= level < len(self.levels):
            raise ValueError(f"state does not match this ladder {self.levels}: {state}")
        self.level = level
        self.history = deque((float(x) for x in state.get("history", [])), maxlen=self.window)
