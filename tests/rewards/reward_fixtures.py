"""Builders for small trajectories used across the reward tests."""

from __future__ import annotations

from typing import Any

from research_agent.trajectory import Step, Trajectory


def make_traj(
    answer: str | None = "Paris",
    golds: list[str] | None = None,
    actions: list[str] | None = None,
    citations: list[str] | None = None,
    retrieved: dict[str, str] | None = None,
    question: str = "What is the capital of France?",
    **gold: Any,
) -> Trajectory:
    """A trajectory with the given action sequence; an answer step is appended when `answer` is set."""
    actions = ["search"] if actions is None else actions
    steps = [
        Step(action=a, argument=f"arg{i}", completion=f"<{a}>arg{i}</{a}>") for i, a in enumerate(actions)
    ]
    if answer is not None and "answer" not in actions:
        steps.append(Step(action="answer", argument=answer, completion=f"<answer>{answer}</answer>"))
    g: dict[str, Any] = {"answers": ["Paris"] if golds is None else golds}
    g.update(gold)
    return Trajectory(
        question=question,
        gold=g,
        steps=steps,
        answer=answer,
        citations=list(citations or []),
        retrieved=dict(retrieved or {}),
    )
