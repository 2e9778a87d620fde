"""C5: atomic-thought reward (Atom-Searcher, 2025).

The agent's reasoning is cut into atomic thought units — tagged (<plan>, <reflection>,
<verification>, ...) or, without tags, sentences — taken from each turn's completion and from
step.info["thought"].  Each unit is scored (offline heuristic or an LLM judge), the scores are
averaged, and the result is mixed with the outcome reward under a weight that decays with the
training step: dense process guidance early, the outcome dominating later (Atom-Searcher's
schedule), which limits how long a policy can profit from merely *sounding* careful.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .base import RewardResult, clamp
from .judge import CachedJudge
from .qa import f1_reward
from .schedule import Schedule
from .text import content_words, sentences

ATOM_TAGS = ("plan", "reflection", "verification", "hypothesis", "analysis", "risk_analysis", "summary")
_TAGGED = re.compile(r"<(" + "|".join(ATOM_TAGS) + r")>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
# Action blocks are not thoughts: their text is a query or an answer.
_ACTION_BLOCK = re.compile(
    r"<(search|open|find|answer|execute|submit|code)>.*?</\1>", re.DOTALL | re.IGNORECASE
)
_ANY_TAG = re.compile(r"</?\w+>")


@dataclass(frozen=True)
class ThoughtUnit:
    kind: str  # a tag name, or "sentence"
    text: str
    step: int  # index of the step the thought belongs to


def _units_from(text: str, step: int) -> list[ThoughtUnit]:
    tagged = [ThoughtUnit(m.group(1).lower(), m.group(2).strip(), step) for m in _TAGGED.finditer(text)]
    if tagged:
        return [u for u in tagged if u.text]
    free = _ANY_TAG.sub(" ", _ACTION_BLOCK.sub(" ", text))
    return [ThoughtUnit("sentence", s, step) for s in sentences(free) if content_words(s)]


def split_atomic_thoughts(traj: Any) -> list[ThoughtUnit]:
    """All thought units of a trajectory, in order."""
    units: list[ThoughtUnit] = []
    for i, s in enumerate(getattr(traj, "steps", []) or []):
        units += _units_from(s.completion or "", i)
        thought = s.info.get("thought") if isinstance(s.info, dict) else None
        if isinstance(thought, str):
            units += _units_from(thought, i)
    return units


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


class HeuristicThoughtScorer:
    """Offline unit scores in [0, 1]: mean of grounded, non-repetitive, leads to an action.

    grounded: share of the unit's content words found in the question or in observations the agent
    had seen *before* that turn (a plan may name the question; a claim must come from evidence).
    non-repetitive: 0 when the unit nearly repeats an earlier one (Jaccard >= `repeat`).
    leads to an action: the unit's turn produced a valid action.
    """

    def __init__(self, repeat: float = 0.8):
        self.repeat = repeat

    def __call__(self, traj: Any, units: list[ThoughtUnit]) -> list[float]:
        steps = list(getattr(traj, "steps", []) or [])
        seen = [content_words(getattr(traj, "question", "") or "")]
        for s in steps:
            seen.append(seen[-1] | content_words(s.observation or ""))
        scores, earlier = [], []
        for u in units:
            words = content_words(u.text)
            grounded = len(words & seen[u.step]) / len(words) if words else 0.0
            fresh = float(all(_jaccard(words, w) < self.repeat for w in earlier))
            earlier.append(words)
            s = steps[u.step] if u.step < len(steps) else None
            acts = float(s is not None and s.valid and s.action != "invalid")
            scores.append((grounded + fresh + acts) / 3)
        return scores


THOUGHT_PROMPT = """Rate one reasoning step of a research agent from 0 to 10.
High: specific, grounded in the evidence, moves the search forward. Low: vague, repeated, wrong.

Question: {question}
Step ({kind}): {text}

Reply with the number only."""
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


class LLMThoughtScorer:
    """Scores units with an LLM judge (prompt -> str), cached; unparsable replies score 0."""

    def __init__(
        self, judge: Callable[[str], str], cache_path: str | None = None, prompt: str = THOUGHT_PROMPT
    ):
        self.judge = judge if isinstance(judge, CachedJudge) else CachedJudge(judge, cache_path)
        self.prompt = prompt
        self.errors = 0

    def __call__(self, traj: Any, units: list[ThoughtUnit]) -> list[float]:
        out = []
        for u in units:
            try:
                reply = self.judge(self.prompt.format(question=traj.question, kind=u.kind, text=u.text))
                m = _NUMBER.search(reply)
                out.append(clamp(float(m.group()) / 10) if m else 0.0)
            except Exception:
                self.errors += 1
                out.append(0.0)
        return out


# Atom-Searcher decays the process weight so the outcome reward dominates late in training.
DEFAULT_WEIGHT = Schedule.linear(0.5, 0.0, 500)


class AtomicThoughtReward:
    """(1 − w(step))·outcome + w(step)·mean unit score; w decays (default linear 0.5 → 0 over 500 steps)."""

    uses_step = True

    def __init__(
        self,
        outcome: Callable[[Any], RewardResult] = f1_reward,
        weight: Schedule | float | str = DEFAULT_WEIGHT,
        scorer: Callable[[Any, list[ThoughtUnit]], list[float]] | None = None,
        max_units: int = 64,
    ):
        if max_units < 1:
            raise ValueError("max_units must be >= 1")
        self.outcome = outcome
        self.weight = Schedule.from_config(weight)
        self.scorer = scorer or HeuristicThoughtScorer()
        self.max_units = max_units

    def __call__(self, traj: Any, step: int = 0) -> RewardResult:
        outcome = self.outcome(traj)
        units = split_atomic_thoughts(traj)[: self.max_units]
        scores = [clamp(float(s)) for s in self.scorer(traj, units)] if units else []
        process = sum(scores) / len(scores) if scores else 0.0
        w = clamp(self.weight.value(step))
        return RewardResult(
            (1 - w) * outcome.score + w * process,
            {"outcome": outcome.score, "thought": process, "weight": w, "units": float(len(units))},
        )
