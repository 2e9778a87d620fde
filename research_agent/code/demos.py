"""Demonstrations for the code agent's SFT cold start, from the tasks' reference solutions.

A small model that never submits (smollm2-135m: 0 submissions in 16 DataFrameBench tasks in either
tool setting) gives outcome-reward RL nothing to learn from: every trajectory of a group scores the
same. The research agent solves this with teacher trajectories (``synth``); for code tasks the data
sets ship a reference solution, so a demonstration can be scripted instead: look the main API up
(multi-tool), run the solution (code-only, multi-tool), submit it.

The script is replayed through the live ``CodeAgent`` by ``ReplayPolicy``, so each demonstration
is rendered exactly as a rollout is, with the student's tokenizer and chat template, the real tool
results (docs search, sandboxed execution) and the real budget notes; its submission is tested, and
only demonstrations whose tests pass are kept.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from research_agent.code.agent import CodeAgent, CodeAgentConfig
from research_agent.code.tasks import CodeTask
from research_agent.policy import Generation
from research_agent.trajectory import Trajectory

# common import aliases → the name the API docs use
_ALIASES = {"pd": "pandas", "np": "numpy", "plt": "matplotlib.pyplot", "sns": "seaborn"}
_LIB_CALL = re.compile(r"\b(pd|np|plt|sns)\.([A-Za-z_]\w*)\s*\(")
_METHOD_CALL = re.compile(r"[\w\])]\.([A-Za-z_]\w*)\s*\(")
# calls too generic to be worth a lookup
_GENERIC = {"DataFrame", "Series", "array", "figure", "subplots", "show", "title", "xlabel", "ylabel", "close",
            "copy", "append", "items", "keys", "values", "get", "format", "join", "split", "strip", "replace",
            "lower", "upper", "sum", "mean", "max", "min", "len", "list", "set_title", "set_xlabel", "set_ylabel"}


def reference_code(task: CodeTask) -> str | None:
    """The task's reference solution without docstrings (they repeat the prompt and cost tokens)."""
    code = (task.meta or {}).get("reference")
    if not isinstance(code, str) or not code.strip():
        return None
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    drop: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str) and len(node.body) > 1):
                drop.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    lines = [line for i, line in enumerate(code.splitlines(), 1) if i not in drop]
    text = "\n".join(lines).strip("\n")
    return re.sub(r"\n{3,}", "\n\n", text)


def _pandas_method(name: str) -> bool:
    try:
        import pandas
    except ImportError:
        return False
    return hasattr(pandas.DataFrame, name) or hasattr(pandas.Series, name)


def search_query(code: str) -> str | None:
    """A docs query for the first specific library call of ``code``: ``pd.merge(`` → ``pandas merge``,
    ``df.groupby(`` → ``pandas DataFrame groupby``; constructors and plotting boilerplate are skipped."""
    found = []
    for m in _LIB_CALL.finditer(code):
        if m.group(2) not in _GENERIC:
            found.append((m.start(), f"{_ALIASES[m.group(1)]} {m.group(2)}"))
    for m in _METHOD_CALL.finditer(code):
        name = m.group(1)
        if name not in _GENERIC and not name.startswith("_") and _pandas_method(name):
            found.append((m.start(), f"pandas DataFrame {name}"))
    return min(found)[1] if found else None


def demo_turns(task: CodeTask, mode: str) -> list[str] | None:
    """The scripted completions of one demonstration (None: the task has no usable reference).

    Each turn is written the way a rollout turn ends: at the environment's stop string.
    """
    code = reference_code(task)
    if code is None:
        return None
    if mode == "no-tools":
        return [f"```python\n{code}\n```"]
    turns = []
    if mode == "multi-tool":
        query = search_query(code)
        if query:
            turns.append(f"Let me check the documentation first.\n<search>{query}</search>")
    turns.append(f"I will run my solution to check that it works.\n```python\n{code}\n```\n")
    turns.append(f"It runs. Submitting it.\n```submit\n{code}\n```\n")
    return turns


class ReplayPolicy:
    """A policy that answers each turn with the next scripted completion (one trajectory at a time).

    The token ids are the student tokenizer's encoding of the text, so what the trainer sees is what
    the model would have had to generate; log-probs are 0 (SFT does not use them).
    """

    def __init__(self, tokenizer, turns: Iterable[str], name: str = "replay"):
        self.tokenizer = tokenizer
        self.name = name
        self._turns = list(turns)
        self._next = 0

    def generate(self, prompts, *, max_new_tokens=128, temperature=0.0, stop=None,
                 stop_loops=False) -> list[Generation]:
        if len(prompts) != 1:
            raise ValueError("ReplayPolicy replays one trajectory: call it with one prompt")
        if self._next >= len(self._turns):
            raise ValueError("the script has no turn left (the agent asked for more turns than it holds)")
        text = self._turns[self._next]
        self._next += 1
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        reason = "stop"
        if len(ids) > max_new_tokens:
            ids, reason = ids[:max_new_tokens], "length"
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return [Generation(text, ids, [0.0] * len(ids), reason)]


def render_demo(task: CodeTask, tokenizer, config: CodeAgentConfig, docs_browser: Any = None) -> Trajectory | None:
    """One demonstration through the live agent; None when the task has no reference."""
    turns = demo_turns(task, config.mode)
    if not turns:
        return None
    policy = ReplayPolicy(tokenizer, turns, name="reference-demo")
    return CodeAgent(policy, task, docs_browser, dataclasses.replace(config, temperature=0.0)).run()


def usable(traj: Trajectory) -> bool:
    """A demonstration worth imitating: it submitted, and the submission passed the tests."""
    return bool(traj.gold.get("passed")) and traj.stop_reason == "submit" and not traj.has_void_turn


def read_demos(path: Path) -> list[Trajectory]:
    """Finished demonstrations in ``path``; a broken line (a kill mid-write) is skipped."""
    out = []
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                out.append(Trajectory.from_json(line))
            except (ValueError, TypeError):
                continue
    return out


def build_demos(tasks: list[CodeTask], tokenizer, config: CodeAgentConfig, path: Path, *,
                docs_browser: Any = None, limit: int = 0, progress: bool = True) -> list[Trajectory]:
    """Render (or resume rendering) the demonstrations of ``tasks`` into ``path``; returns the usable ones.

    Every rendered task is appended (fsynced) whether or not it passed, so a resumed build does not
    run the same tests again; ``limit`` > 0 stops after that many tasks.
    """
    from tqdm import tqdm

    path.parent.mkdir(parents=True, exist_ok=True)
    tasks = tasks[:limit] if limit > 0 else tasks
    done = {t.id: t for t in read_demos(path)}
    todo = [t for t in tasks if t.id not in done]
    failures = 0
    with open(path, "a", encoding="utf-8") as f:
        for task in tqdm(todo, desc="demos", disable=not progress):
            try:
                traj = render_demo(task, tokenizer, config, docs_browser)
            except Exception as e:  # one bad task (too long, a sandbox error) must not stop the build
                failures += 1
                print(f"demo {task.id}: {type(e).__name__}: {e}", file=sys.stderr)
                continue
            if traj is None:
                continue
            f.write(traj.to_json() + "\n")
            f.flush()
            os.fsync(f.fileno())
            done[traj.id] = traj
    demos = [done[t.id] for t in tasks if t.id in done]
    kept = [t for t in demos if usable(t)]
    if progress:
        print(f"demonstrations: {len(kept)} of {len(demos)} rendered tasks passed their tests"
              + (f" ({failures} could not be rendered)" if failures else ""), file=sys.stderr)
    return kept
