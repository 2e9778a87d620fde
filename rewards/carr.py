"""C4: citation-aware rubric reward (CaRR, "Chaining the Evidence", 2026).

A multi-hop question is decomposed into rubrics: atomic facts, each about one hidden entity
("E2 was born in E3").  A rubric counts only when
  (i)  its entity is identified in the answer or the reasoning,
  (ii) the text of at least one *cited* document supports the fact (a pluggable judge), and
  (iii) it is connected to the final answer: BFS over the bipartite graph of satisfied rubrics and
       the entities and cited documents that tie them together, starting from the answer.
The rubric reward is the share of rubrics that pass all three; it is mixed with the outcome reward
by weight α.  CaRR adds it to correct trajectories only (a wrong answer gets no credit for pretty
evidence); mode="always" mixes it for every trajectory.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from .base import RewardResult
from .judge import OfflineSupportJudge, SupportJudge
from .qa import em_reward, gold_answers
from .text import normalize_answer

MODES = ("correct_only", "always")


def _mentions(text_norm: str, entity: str) -> bool:
    e = normalize_answer(entity)
    return bool(e) and f" {e} " in f" {text_norm} "


def reasoning_text(traj: Any) -> str:
    """Everything the agent wrote: its turns, their recorded thoughts, and the final answer."""
    parts = []
    for s in getattr(traj, "steps", []) or []:
        parts.append(s.completion or "")
        thought = s.info.get("thought") if isinstance(s.info, dict) else None
        if isinstance(thought, str):
            parts.append(thought)
    parts.append(getattr(traj, "answer", None) or "")
    return "\n".join(parts)


def _rubrics(traj: Any) -> list[dict[str, Any]]:
    gold = getattr(traj, "gold", None) or {}
    rubrics = gold.get("rubrics") if isinstance(gold, dict) else None
    if not isinstance(rubrics, list):
        return []
    out = []
    for i, r in enumerate(rubrics):
        if isinstance(r, dict) and str(r.get("fact", "")).strip():
            out.append({**r, "id": str(r.get("id", i))})
    return out


class CaRRReward:
    """CaRR rubric reward mixed with an outcome reward.

    judge: a SupportJudge (claim, text) -> bool; default OfflineSupportJudge().
    outcome: the outcome reward (default exact match); `correct_threshold` on its score decides
    "correct".  alpha: rubric weight (CaRR: 0.3).  mode: "correct_only" (CaRR) or "always".
    """

    def __init__(
        self,
        judge: SupportJudge | None = None,
        outcome: Callable[[Any], RewardResult] = em_reward,
        alpha: float = 0.3,
        mode: str = "correct_only",
        correct_threshold: float = 1.0,
    ):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        self.judge = judge or OfflineSupportJudge()
        self.outcome = outcome
        self.alpha = alpha
        self.mode = mode
        self.correct_threshold = correct_threshold

    def rubric_reward(self, traj: Any) -> RewardResult:
        """Share of rubrics identified, supported by cited text, and connected to the answer."""
        rubrics = _rubrics(traj)
        retrieved = getattr(traj, "retrieved", None) or {}
        cited = list(dict.fromkeys(getattr(traj, "citations", None) or []))
        known = [c for c in cited if c in retrieved]
        base = {"rubrics": float(len(rubrics)), "unknown_citations": float(len(cited) - len(known))}
        if not rubrics:
            return RewardResult(0.0, {**base, "missing_rubrics": 1.0})
        text = normalize_answer(reasoning_text(traj))
        answer = normalize_answer(getattr(traj, "answer", None) or "")
        golds = {normalize_answer(g) for g in gold_answers(traj)}

        identified = {
            r["id"]: _mentions(text, str(r.get("entity", ""))) or not r.get("entity") for r in rubrics
        }
        support = {
            r["id"]: [c for c in known if self.judge(str(r["fact"]), str(retrieved[c]))] for r in rubrics
        }
        satisfied = [r for r in rubrics if identified[r["id"]] and support[r["id"]]]
        connected = self._connected(satisfied, support, golds, answer)
        n = len(rubrics)
        score = len(connected) / n
        return RewardResult(
            score,
            {
                **base,
                "missing_rubrics": 0.0,
                "identified": sum(identified.values()) / n,
                "supported": sum(bool(v) for v in support.values()) / n,
                "satisfied": len(satisfied) / n,
                "connected": score,
            },
        )

    @staticmethod
    def _connected(
        satisfied: list[dict[str, Any]], support: dict[str, list[str]], golds: set[str], answer: str
    ) -> set[str]:
        """Ids of satisfied rubrics reachable from the answer node by BFS.

        Edges: answer — rubric (answer_link, or its entity is a gold answer or the given answer);
        rubric — its entity and every other rubric entity its fact mentions; rubric — each cited
        document that supports it.  Entities and documents are shared nodes, so two rubrics are
        chained when they share an entity or a supporting document.
        """
        entities = {normalize_answer(str(r.get("entity", ""))) for r in satisfied} - {""}
        graph: dict[tuple[str, str], set[tuple[str, str]]] = {}

        def link(a: tuple[str, str], b: tuple[str, str]) -> None:
            graph.setdefault(a, set()).add(b)
            graph.setdefault(b, set()).add(a)

        root = ("answer", "")
        graph[root] = set()
        for r in satisfied:
            node = ("rubric", r["id"])
            graph.setdefault(node, set())
            ent = normalize_answer(str(r.get("entity", "")))
            if r.get("answer_link") is True or (ent and (ent in golds or ent == answer)):
                link(root, node)
            fact = normalize_answer(str(r["fact"]))
            for e in entities:
                if e == ent or _mentions(fact, e):
                    link(node, ("entity", e))
            for doc in support[r["id"]]:
                link(node, ("doc", doc))
        seen = {root}
        queue = deque([root])
        while queue:
            for nxt in graph.get(queue.popleft(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    queue.append(nxt)
        return {key for kind, key in seen if kind == "rubric"}

    def __call__(self, traj: Any) -> RewardResult:
        outcome = self.outcome(traj)
        rubric = self.rubric_reward(traj)
        correct = outcome.score >= self.correct_threshold
        if rubric.components.get("missing_rubrics"):
            mixed = outcome.score  # nothing to check: CaRR degrades to the outcome reward
        elif self.mode == "always" or correct:
            mixed = (1 - self.alpha) * outcome.score + self.alpha * rubric.score
        else:
            mixed = (1 - self.alpha) * outcome.score
        return RewardResult(
            mixed,
            {
                "outcome": outcome.score,
                "rubric_reward": rubric.score,
                "correct": float(correct),
                **{f"rubric_{k}": v for k, v in rubric.components.items()},
            },
        )
