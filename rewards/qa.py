"""C1/C2: exact match, token F1, and F1 with action penalties (seed 003, Search-R1 study).

Pure F1 lets a policy collapse into answer avoidance (no answer scores 0, like a wrong one, but costs
no risk); the action penalties make "never searched" and "never answered" strictly worse than a
wrong attempt, which is what makes F1 beat EM as a training reward in that study.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from .base import RewardResult
from .text import normalize_answer, tokens

__all__ = [
    "normalize_answer",
    "exact_match",
    "token_f1",
    "gold_answers",
    "em_reward",
    "f1_reward",
    "f1_with_action_penalty",
]


def _golds(golds: str | Iterable[str] | None) -> list[str]:
    if golds is None:
        return []
    if isinstance(golds, str):
        return [golds]
    return [str(g) for g in golds if g is not None]


def exact_match(pred: str | None, golds: str | Iterable[str] | None) -> float:
    """1.0 if the normalized prediction equals any normalized gold answer, else 0.0."""
    p = normalize_answer(pred or "")
    return float(any(p == normalize_answer(g) for g in _golds(golds)))


def _f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    if not pred_tokens or not gold_tokens:
        # SQuAD convention: both empty counts as a match, one empty as a miss.
        return float(pred_tokens == gold_tokens)
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(pred: str | None, golds: str | Iterable[str] | None) -> float:
    """SQuAD token F1 against the best of several gold answers (0.0 with no gold)."""
    p = tokens(pred or "")
    return max((_f1(p, tokens(g)) for g in _golds(golds)), default=0.0)


def gold_answers(traj: Any) -> list[str]:
    """The trajectory's gold answers ([] when none are recorded)."""
    gold = getattr(traj, "gold", None) or {}
    answers = gold.get("answers", gold.get("answer", [])) if isinstance(gold, dict) else []
    return _golds(answers)


def _answer(traj: Any) -> str:
    return (getattr(traj, "answer", None) or "").strip()


def em_reward(traj: Any) -> RewardResult:
    """Exact match of the final answer (0 with no answer or no gold; `missing_gold` flags the latter)."""
    golds = gold_answers(traj)
    em = exact_match(_answer(traj), golds) if golds and _answer(traj) else 0.0
    return RewardResult(em, {"em": em, "missing_gold": float(not golds)})


def f1_reward(traj: Any) -> RewardResult:
    """Token F1 of the final answer (0 with no answer or no gold)."""
    golds = gold_answers(traj)
    f1 = token_f1(_answer(traj), golds) if golds and _answer(traj) else 0.0
    return RewardResult(f1, {"f1": f1, "missing_gold": float(not golds)})


def f1_with_action_penalty(traj: Any, alpha: float = 0.1, beta: float = 0.1) -> RewardResult:
    """F1 − α·[no search happened] − β·[no answer given] (seed 003: α = β = 0.1)."""
    f1 = f1_reward(traj)
    searched = traj.count("search") > 0
    answered = bool(_answer(traj))
    no_search = 0.0 if searched else alpha
    no_answer = 0.0 if answered else beta
    return RewardResult(
        f1.score - no_search - no_answer,
        {
            "f1": f1.score,
            "no_search_penalty": -no_search,
            "no_answer_penalty": -no_answer,
            "missing_gold": f1.components["missing_gold"],
        },
    )
