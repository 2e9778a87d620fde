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

Two things the first demonstrations did not teach (smollm2 after 1 epoch on 47 of them wrote valid
actions but re-ran the same block to the turn limit, after a SyntaxError as after a clean run):

- what an execution is for: running a file of definitions prints "(no output)" and checks nothing.
  The execution now calls the function the way the task's first self-contained test does
  (``example_call``) and prints the result;
- what to do after a failure: a share of the demonstrations (``recovery``) first runs a broken
  version — the solution cut off mid-line (a SyntaxError, how a token limit ends a turn) or
  without its library import (a NameError) — reads the error, runs the fixed code, then submits.
  A recovery demonstration is kept only when the broken run really failed with that error and the
  fixed run did not; otherwise the plain demonstration is rendered instead.

With the environment's submit note on (the default), a demonstration ends the way the note offers:
an empty ```submit block after the clean run, which submits the code that ran. Writing the solution
out a second time cost ~400 tokens per demonstration and asked a 135M model to copy a long block
exactly; the decision to stop is what it had not learned, and the short block makes it one token
pattern to learn.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from research_agent.code.agent import CodeAgent, CodeAgentConfig
from research_agent.code.apidocs import accessor_class
from research_agent.code.sanitize import parse
from research_agent.code.tasks import CodeTask
from research_agent.inference.policy import Generation
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
        tree = parse(code)
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
    for cls in (pandas.DataFrame, pandas.Series):
        raw = inspect.getattr_static(cls, name, None)
        # a method or an accessor (df.plot(...)), not a property: ``.index(`` on a list is not pandas
        if raw is not None and (callable(raw) or accessor_class(raw) is not None):
            return True
    return False


def library_calls(code: str) -> list[tuple[str, str, str]]:
    """Every specific library call of ``code`` in order, once each, as (library, name, docs query):
    ``pd.merge(`` → ("pandas", "merge", "pandas merge"), ``df.groupby(`` → ("pandas", "groupby",
    "pandas DataFrame groupby"); constructors and plotting boilerplate are skipped."""
    found, lib_names = [], set()
    for m in _LIB_CALL.finditer(code):
        lib_names.add(m.start(2))  # pd.merge( is not also a method call named merge
        if m.group(2) not in _GENERIC:
            lib = _ALIASES[m.group(1)]
            found.append((m.start(), lib, m.group(2), f"{lib} {m.group(2)}"))
    for m in _METHOD_CALL.finditer(code):
        name = m.group(1)
        if m.start(1) in lib_names:
            continue
        if name not in _GENERIC and not name.startswith("_") and _pandas_method(name):
            found.append((m.start(), "pandas", name, f"pandas DataFrame {name}"))
    calls: list[tuple[str, str, str]] = []
    for _, *call in sorted(found):
        if tuple(call) not in calls:
            calls.append(tuple(call))
    return calls


def search_query(code: str) -> str | None:
    """The docs query the demonstrations show: the one for the first specific library call of ``code``."""
    calls = library_calls(code)
    return calls[0][2] if calls else None


def _calls(node: ast.AST, name: str) -> ast.Call | None:
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name:
            return n
    return None


def _uses_self(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "self" for n in ast.walk(node))


def _print(expr: ast.expr) -> ast.stmt:
    return ast.Expr(ast.Call(ast.Name("print", ast.Load()), [expr], []))


def _setup_and_call(body: list[ast.stmt], entry: str) -> str | None:
    kept: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):  # a docstring
            continue
        call = _calls(stmt, entry)
        if call is None:
            if _uses_self(stmt) or not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Expr)):
                return None  # fixtures, mocks, control flow: not a self-contained example
            kept.append(stmt)
            continue
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            if _uses_self(stmt):
                return None
            kept += [stmt, _print(ast.Name(stmt.targets[0].id, ast.Load()))]
        elif isinstance(stmt, ast.Expr) and not _uses_self(call):  # e.g. self.assertEqual(task_func(x), y)
            kept.append(_print(call))
        else:
            return None
        text = "\n".join(ast.unparse(ast.fix_missing_locations(s)) for s in kept)
        return text if len(text) <= 800 else None
    return None


def example_call(task: CodeTask) -> str | None:
    """Statements that call the entry point as the task's first self-contained test does, printing
    the result (None when no test sets up its input without fixtures, mocks or ``self``)."""
    try:
        tree = parse(task.test_code or "")
    except SyntaxError:
        return None
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test") and not fn.decorator_list:
                found = _setup_and_call(fn.body, task.entry_point)
                if found:
                    return found
    return None


def _without_import(code: str) -> str | None:
    """``code`` minus a top-level ``import X as Y`` whose alias the rest uses (→ NameError when called)."""
    lines = code.splitlines()
    for line in lines:
        m = re.fullmatch(r"import\s+[\w.]+\s+as\s+(\w+)\s*", line)
        if not m:
            continue
        alias = re.compile(rf"import\s+[\w.]+\s+as\s+{m.group(1)}\s*")
        rest = [x for x in lines if not alias.fullmatch(x)]  # every import of that alias (a file may repeat it)
        if re.search(rf"\b{m.group(1)}\.", "\n".join(rest)):
            return "\n".join(rest)
    return None


def _cut_off(code: str) -> str | None:
    """``code`` cut in the middle of a line past its half, so that it no longer compiles."""
    lines = code.splitlines()
    for n in range(max(1, len(lines) * 3 // 5), len(lines) + 1):
        line = lines[n - 1].rstrip()
        if len(line.strip()) < 8:
            continue
        indent = len(line) - len(line.lstrip())
        # most cuts of a line still parse (``x = df.su``); the first one from two thirds on that does not
        for end in [*range(len(line) * 2 // 3, len(line)), *range(len(line) * 2 // 3 - 1, indent + 1, -1)]:
            cut = "\n".join(lines[: n - 1] + [line[:end]])
            try:
                compile(cut, "cut", "exec")
            except SyntaxError:
                return cut
    return None


def broken_version(code: str, kind: str) -> tuple[str, str] | None:
    """(broken code, the error class its run must show) for ``kind`` 'cut' or 'import'."""
    if kind == "cut":
        cut = _cut_off(code)
        return (cut, "SyntaxError") if cut else None
    if kind == "import":
        dropped = _without_import(code)
        return (dropped, "NameError") if dropped else None
    raise ValueError(f"unknown breakage {kind!r}")


_FIX_NOTE = {"SyntaxError": "The code was cut off before the end (SyntaxError). Here is the complete version.",
             "NameError": "A name is not defined (NameError): the import is missing. Adding it and running again."}


def demo_turns(task: CodeTask, mode: str, *, example: bool = True, broken: str | None = None,
               empty_submit: bool = False) -> list[str] | None:
    """The scripted completions of one demonstration (None: the task has no usable reference, or
    the requested breakage does not apply to it).

    ``example``: executions end with ``example_call`` (when the tests give one). ``broken``: first
    run the solution broken that way ('cut' or 'import', see ``broken_version``), then fix it.
    ``empty_submit``: end with an empty ```submit block, which submits the code that last ran (what
    the environment's submit note offers after a clean run) instead of writing the solution again.
    Each turn is written the way a rollout turn ends: at the environment's stop string.
    """
    code = reference_code(task)
    if code is None:
        return None
    if mode == "no-tools":
        return [f"```python\n{code}\n```"]
    call = example_call(task) if example else None
    run = f"{code}\n\n{call}" if call else code
    turns = []
    if mode == "multi-tool":
        query = search_query(code)
        if query:
            turns.append(f"Let me check the documentation first.\n<search>{query}</search>")
    check = "on an example " if call else ""
    if broken:
        bad = broken_version(code, broken)
        if bad is None or (broken == "import" and not call):  # an uncalled function raises no NameError
            return None
        bad_run = f"{bad[0]}\n\n{call}" if call and broken != "cut" else bad[0]
        turns.append(f"I will run my solution {check}to check that it works.\n```python\n{bad_run}\n```\n")
        turns.append(f"{_FIX_NOTE[bad[1]]}\n```python\n{run}\n```\n")
    else:
        turns.append(f"I will run my solution {check}to check that it works.\n```python\n{run}\n```\n")
    done = "It works" if call else "It runs"
    body = "" if empty_submit else f"{code}\n"
    turns.append(f"{done}. Submitting it.\n```submit\n{body}```\n")
    return turns


def breakage(task: CodeTask, recovery: float) -> str | None:
    """Which breakage ``task``'s demonstration shows: a stable draw from its id, so a resumed build
    renders the same demonstration; about ``recovery`` of the tasks get one, 'cut' and 'import' alike."""
    h = int(hashlib.sha256(task.id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    if h >= recovery:
        return None
    return "cut" if int(h * 1e6) % 2 == 0 else "import"


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


def _replay(task: CodeTask, turns: list[str], tokenizer, config: CodeAgentConfig, docs_browser: Any) -> Trajectory:
    policy = ReplayPolicy(tokenizer, turns, name="reference-demo")
    # a demonstration submits once: a reference that fails its tests is recorded as failed and never
    # imitated, so test feedback (which would ask the script for a fix it does not hold) is off here
    config = dataclasses.replace(config, temperature=0.0, test_feedback=False)
    return CodeAgent(policy, task, docs_browser, config).run()


def _runs(traj: Trajectory) -> list:
    return [s for s in traj.steps if s.action == "execute"]


def render_demo(task: CodeTask, tokenizer, config: CodeAgentConfig, docs_browser: Any = None,
                broken: str | None = None) -> Trajectory | None:
    """One demonstration through the live agent; None when the task has no reference.

    Tried in order until one behaves as scripted: the recovery script (``broken``, else the other
    breakage; its first run must fail with the expected error and its second must not), the plain
    script with the example call (its run must not fail: an example may need what the test file
    sets up), the plain script.
    """
    if config.mode == "no-tools":
        turns = demo_turns(task, config.mode)
        return _replay(task, turns, tokenizer, config, docs_browser) if turns else None
    kinds = [broken] + [k for k in ("cut", "import") if k != broken] if broken else []
    for kind in kinds:  # the drawn breakage first; the other when it does not apply to this task
        turns = demo_turns(task, config.mode, broken=kind, empty_submit=config.submission.submit_hint)
        if turns:
            traj = _replay(task, turns, tokenizer, config, docs_browser)
            runs = _runs(traj)
            expected = broken_version(reference_code(task) or "", kind)
            if (len(runs) == 2 and expected and runs[0].error and expected[1] in runs[0].error
                    and not runs[1].error):
                traj.meta["demo"] = f"recovery:{kind}"
                return traj
    turns = demo_turns(task, config.mode, empty_submit=config.submission.submit_hint)
    if not turns:
        return None
    traj = _replay(task, turns, tokenizer, config, docs_browser)
    if example_call(task) and any(s.error for s in _runs(traj)):
        turns = demo_turns(task, config.mode, example=False, empty_submit=config.submission.submit_hint)
        traj = _replay(task, turns, tokenizer, config, docs_browser)
    return traj


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
                docs_browser: Any = None, limit: int = 0, recovery: float = 0.0,
                progress: bool = True) -> list[Trajectory]:
    """Render (or resume rendering) the demonstrations of ``tasks`` into ``path``; returns the usable ones.

    ``recovery``: the share of tasks whose demonstration first runs a broken version and fixes it.

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
                traj = render_demo(task, tokenizer, config, docs_browser, broken=breakage(task, recovery))
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
        recovering = sum(1 for t in kept if str(t.meta.get("demo", "")).startswith("recovery"))
        print(f"demonstrations: {len(kept)} of {len(demos)} rendered tasks passed their tests, "
              f"{recovering} of them recovering from a failed run"
              + (f" ({failures} could not be rendered)" if failures else ""), file=sys.stderr)
    return kept
