"""The metrics of code-agent runs: pass@1, how the tools were used, errors, turns, tokens and rewards."""

from __future__ import annotations

from typing import Any

from research_agent.trajectory import Trajectory

COUNTED = ("search", "execute", "submit", "invalid")


def code_metrics(trajs: list[Trajectory]) -> dict[str, Any]:
    """pass@1, submission rate, mean tool calls by type, execution errors, turns, tokens, rewards."""
    from rewards.code import code_shaped_reward, code_torl_reward

    n = len(trajs)
    if n == 0:
        return {"n": 0}

    def mean(values) -> float:
        values = list(values)
        return sum(values) / len(values) if values else 0.0

    def per_task(flag: str) -> float:
        """Steps whose info carries ``flag``, per task."""
        return mean(sum(1 for s in t.steps if s.info.get(flag)) for t in trajs)

    stops: dict[str, int] = {}
    for t in trajs:
        stops[t.stop_reason or "unknown"] = stops.get(t.stop_reason or "unknown", 0) + 1
    return {
        "n": n,
        "pass_at_1": mean(bool(t.gold.get("passed")) for t in trajs),
        "submitted": mean(t.count("submit") > 0 for t in trajs),
        "autosubmitted": mean(bool(t.meta.get("autosubmitted")) for t in trajs),
        # turns drawn again because they repeated a failed submission's code or a run that raised
        # (redraw_repeats, redraw_failed_runs), and turns that repeated either all the same
        "redrawn_turns": per_task("redrawn"),
        "repeated_turns": per_task("repeat_of"),
        "repeated_failed_runs": per_task("repeat_of_run"),
        "tool_calls": {a: mean(t.count(a) for t in trajs) for a in COUNTED},
        "refused_calls": per_task("refused"),
        "execution_error_rate": mean(
            any(s.action == "execute" and s.info.get("ok") is False for s in t.steps) for t in trajs
        ),
        "turns": mean(t.turns for t in trajs),
        "generated_tokens": mean(t.generated_tokens for t in trajs),
        "seconds": mean(t.meta.get("seconds", 0.0) for t in trajs),
        "stop_reasons": stops,
        "reward_shaped": mean(code_shaped_reward(t).score for t in trajs),
        "reward_torl": mean(code_torl_reward(t).score for t in trajs),
    }


__all__ = ["COUNTED", "code_metrics"]
