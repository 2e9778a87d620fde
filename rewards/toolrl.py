"""C3: format reward and tool-call correctness (ToolRL, Qian et al. 2025).

Format: a trajectory is well formed when every turn parsed as a known action, tool turns carry an
argument, and it ends with exactly one final action (answer, or submit for code) with nothing after
it.  ToolRL keeps format binary so the policy cannot trade content for partial format credit.

Correctness: ToolRL's fine-grained match of predicted calls against reference calls — tool names
(Jaccard), parameter names (Jaccard per matched call) and parameter values (exact per reference
key) — summed and rescaled to [−3, 3], so a near-miss is still better than a wrong tool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .base import RewardResult
from .text import normalize_answer

KNOWN_ACTIONS = ("search", "open", "find", "answer", "invalid", "execute", "submit")
TOOL_ACTIONS = ("search", "open", "find", "execute", "submit")
FINAL_ACTIONS = ("answer", "submit")
# The parameter name a plain-string argument stands for, per tool (used when a step records no dict).
DEFAULT_PARAMETER = {"search": "query", "open": "id", "find": "pattern", "execute": "code", "submit": "code"}


def format_reward(traj: Any) -> RewardResult:
    """1.0 when the actions are well formed and in order, else 0.0 (components say what failed)."""
    steps = list(getattr(traj, "steps", []) or [])
    if not steps:
        return RewardResult(
            0.0,
            {
                "valid_share": 0.0,
                "ends_with_final": 0.0,
                "nothing_after_final": 1.0,
                "arguments_present": 1.0,
                "empty": 1.0,
            },
        )
    valid = [s.valid and s.action in KNOWN_ACTIONS and s.action != "invalid" for s in steps]
    finals = [i for i, s in enumerate(steps) if s.action in FINAL_ACTIONS]
    ends_with_final = bool(finals) and finals[-1] == len(steps) - 1
    first_answer = next((i for i, s in enumerate(steps) if s.action == "answer"), None)
    nothing_after = first_answer is None or first_answer == len(steps) - 1
    tool_steps = [s for s in steps if s.action in TOOL_ACTIONS]
    args_ok = all((s.argument or "").strip() for s in tool_steps)
    valid_share = sum(valid) / len(steps)
    ok = valid_share == 1.0 and ends_with_final and nothing_after and args_ok
    return RewardResult(
        float(ok),
        {
            "valid_share": valid_share,
            "ends_with_final": float(ends_with_final),
            "nothing_after_final": float(nothing_after),
            "arguments_present": float(args_ok),
            "empty": 0.0,
        },
    )


def _as_call(call: Any) -> tuple[str, dict[str, Any]]:
    """(name, parameters) from a dict like {"name", "parameters"|"arguments"} or a (name, params) pair."""
    if isinstance(call, Mapping):
        name = call.get("name") or call.get("tool") or ""
        params = call.get("parameters", call.get("arguments", {}))
    elif isinstance(call, Sequence) and not isinstance(call, str) and len(call) == 2:
        name, params = call
    else:
        raise ValueError(f"a tool call must be a dict with 'name' and 'parameters', got {call!r}")
    if isinstance(params, str):
        params = {DEFAULT_PARAMETER.get(str(name), "input"): params}
    if not isinstance(params, Mapping):
        raise ValueError(f"tool call parameters must be a dict, got {params!r}")
    return str(name), dict(params)


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return normalize_answer(a) == normalize_answer(b)
    return a == b


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def tool_call_match(predicted: Sequence[Any], reference: Sequence[Any]) -> RewardResult:
    """ToolRL correctness in [−3, 3]: 6·(name + params + values)/S_max − 3.

    S_max = 1 + |reference calls| + Σ |reference parameters|.  Each reference call is paired with the
    first unused predicted call of the same name (ToolRL matches calls one to one).
    """
    pred = [_as_call(c) for c in predicted]
    ref = [_as_call(c) for c in reference]
    if not ref:
        score = 3.0 if not pred else -3.0
        return RewardResult(score, {"name": float(not pred), "parameters": 0.0, "values": 0.0, "max": 1.0})
    r_name = _jaccard({n for n, _ in pred}, {n for n, _ in ref})
    used: set[int] = set()
    r_param = r_value = 0.0
    for name, params in ref:
        j = next((i for i, (n, _) in enumerate(pred) if n == name and i not in used), None)
        if j is None:
            continue
        used.add(j)
        p = pred[j][1]
        r_param += _jaccard(set(map(str, p)), set(map(str, params)))
        r_value += sum(1.0 for k, v in params.items() if k in p and _same_value(p[k], v))
    s_max = 1 + len(ref) + sum(len(p) for _, p in ref)
    score = 6.0 * (r_name + r_param + r_value) / s_max - 3.0
    return RewardResult(
        score, {"name": r_name, "parameters": r_param, "values": r_value, "max": float(s_max)}
    )


def predicted_calls(traj: Any) -> list[tuple[str, dict[str, Any]]]:
    """The trajectory's tool calls; step.info["parameters"] wins over the plain-string argument."""
    calls = []
    for s in getattr(traj, "steps", []) or []:
        if s.action not in TOOL_ACTIONS:
            continue
        params = s.info.get("parameters") if isinstance(s.info, dict) else None
        if not isinstance(params, Mapping):
            params = {DEFAULT_PARAMETER[s.action]: s.argument}
        calls.append((s.action, dict(params)))
    return calls


def tool_call_reward(traj: Any) -> RewardResult:
    """ToolRL correctness of the trajectory's calls against gold["reference_calls"] (0 when absent)."""
    gold = getattr(traj, "gold", None) or {}
    reference = gold.get("reference_calls") if isinstance(gold, dict) else None
    if not reference:
        return RewardResult(0.0, {"missing_reference_calls": 1.0})
    try:
        result = tool_call_match(predicted_calls(traj), reference)
    except ValueError:
        return RewardResult(-3.0, {"malformed_reference_calls": 1.0})
    return RewardResult(result.score, {**result.components, "missing_reference_calls": 0.0})
