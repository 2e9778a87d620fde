"""Task loaders on the real packaged benchmarks, and on small KodCode / BigCodeBench files in their formats."""

from __future__ import annotations

import json

import pytest

from research_agent.code.tasks import TaskSourceError, load_tasks, run_tests


@pytest.fixture(scope="module")
def humaneval():
    return load_tasks("humaneval")


def test_humaneval_loads_all_164(humaneval):
    assert len(humaneval) == 164
    t = humaneval[0]
    assert t.id == "HumanEval/0" and t.entry_point == "has_close_elements" and t.source == "humaneval"
    assert "def has_close_elements" in t.prompt and "check(has_close_elements)" in t.test_code


def test_humaneval_correct_solution_passes_and_wrong_fails(humaneval):
    t = humaneval[0]
    assert run_tests(t, t.meta["reference"]).ok
    wrong = run_tests(t, t.meta["stub"] + "    return False\n")
    assert not wrong.ok and wrong.error == "AssertionError"
    body_only = t.meta["reference"][len(t.meta["stub"]) :]
    assert run_tests(t, body_only).ok  # a bare completion of the stub is accepted too


def test_humaneval_infinite_loop_solution_times_out(humaneval):
    from research_agent.code.sandbox import SandboxLimits

    t = humaneval[0]
    res = run_tests(
        t,
        "def has_close_elements(numbers, threshold):\n    while True:\n        pass\n",
        SandboxLimits(wall_s=1.5),
    )
    assert not res.ok and res.timed_out


def test_dataframebench_splits_have_their_sizes_and_filled_placeholders():
    sizes = {split: len(load_tasks(f"dataframebench:{split}")) for split in ("train", "val", "test")}
    assert sizes == {"train": 709, "val": 16, "test": 100}
    t = load_tasks("dataframebench:val", limit=1)[0]
    assert "{library_import}" not in t.prompt and "{library_instruction}" not in t.prompt
    assert "import pandas as pd" in t.prompt and "Use pandas" in t.prompt
    assert t.entry_point == "task_func" and "unittest.main" in t.test_code


def test_dataframebench_reference_passes_and_broken_fails():
    tasks = load_tasks("dataframebench:val")
    t = next(t for t in tasks if t.id == "DFB/V0002")  # pandas + stdlib only
    assert run_tests(t, t.meta["reference"]).ok
    bad = run_tests(t, t.meta["reference"] + "\n\ndef task_func(*a, **k):\n    return None\n")
    assert not bad.ok and bad.error.startswith("FAILED")


def test_the_starter_codes_imports_and_constants_run_before_a_bare_function():
    """Models answer with just the function, dropping the starter's imports and constants; the tests
    run the starter's preamble first (BigCodeBench's calibrated scoring), and the solution wins."""
    import dataclasses

    from research_agent.code.tasks import starter_preamble

    t = next(t for t in load_tasks("dataframebench:val") if t.id == "DFB/V0002")
    preamble = starter_preamble(t)
    assert preamble.startswith("import pandas as pd") and "def task_func" not in preamble
    bare = "\n".join(line for line in t.meta["reference"].splitlines() if not line.startswith(("import ", "from ")))
    assert "import" not in bare.split("def task_func")[0]
    assert run_tests(t, bare).ok
    no_starter = dataclasses.replace(t, prompt=t.prompt.split("```")[0])  # a prompt without starter code
    assert starter_preamble(no_starter) == "" and not run_tests(no_starter, bare).ok
    # a module constant of the starter is there for the function, and the solution's own value wins
    constant = dataclasses.replace(t, prompt="```python\nLIMIT = 1\n\ndef task_func():\n    pass\n```",
                                   test_code="assert task_func() == 2\n", meta={"test_style": "script"})
    assert not run_tests(constant, "def task_func():\n    return LIMIT\n").ok
    assert run_tests(constant, "def task_func():\n    return LIMIT + 1\n").ok
    assert run_tests(constant, "LIMIT = 2\n\ndef task_func():\n    return LIMIT\n").ok


def test_unknown_spec_lists_known_ones():
    with pytest.raises(ValueError, match="humaneval.*kodcode"):
        load_tasks("mbpp")


def _write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_kodcode_loader_and_tests(tmp_path):
    path = tmp_path / "kodcode.jsonl"
    row = {
        "question_id": "Leetcode_1",
        "subset": "Leetcode",
        "gpt_difficulty": "easy",
        "question": "Write a function add(a, b) that returns the sum.",
        "solution": "def add(a, b):\n    return a + b\n",
        "test": "from solution import add\n\ndef test_small():\n    assert add(1, 2) == 3\n\n"
        "def test_negative():\n    assert add(-1, -2) == -3\n",
        "test_info": [
            {
                "function_name": "add",
                "parameter_list": "(a, b)",
                "function_declaration": "def add(a, b):",
                "docstring": None,
            }
        ],
    }
    _write_jsonl(path, [row])
    (t,) = load_tasks(f"kodcode:{path}")
    assert t.id == "Leetcode_1" and t.entry_point == "add" and "def add(a, b):" in t.prompt
    assert run_tests(t, t.meta["reference"]).ok
    bad = run_tests(t, "def add(a, b):\n    return a - b\n")
    assert not bad.ok and "2 of 2 tests failed" in bad.error
    # tests import the module: a constant nothing in it reads stays; the demo call still goes
    t.test_code += "\nfrom solution import OFFSET\n\ndef test_offset():\n    assert OFFSET == 0\n"
    assert run_tests(
        t, "OFFSET = 0\n\ndef add(a, b):\n    return a + b\n\nprint(add(open('nope').read(), 1))\n"
    ).ok


def test_bigcodebench_loader_and_tests(tmp_path):
    path = tmp_path / "bcb-hard.jsonl"
    test = (
        "import unittest\nclass TestCases(unittest.TestCase):\n    def test_one(self):\n"
        "        self.assertEqual(task_func([3, 1, 2]), [1, 2, 3])\n"
    )
    row = {
        "task_id": "BigCodeBench/13",
        "complete_prompt": "def task_func(xs):\n    '''Sort.'''\n",
        "instruct_prompt": "Sort the list xs ascending.\nYou should write self-contained code starting with:\n"
        "```\ndef task_func(xs):\n```",
        "canonical_solution": "    return sorted(xs)\n",
        "code_prompt": "def task_func(xs):\n",
        "test": test,
        "entry_point": "task_func",
        "libs": "[]",
    }
    _write_jsonl(path, [row])
    (t,) = load_tasks(f"bigcodebench:{path}")
    assert t.id == "BigCodeBench/13" and t.prompt.startswith("Sort the list")
    assert run_tests(t, t.meta["reference"]).ok
    bad = run_tests(t, "def task_func(xs):\n    return xs\n")
    assert not bad.ok and "FAILED (failures=1)" in bad.error and "AssertionError" in bad.error


def test_bad_task_files_raise_clear_errors(tmp_path):
    with pytest.raises(TaskSourceError, match="does not exist"):
        load_tasks(f"kodcode:{tmp_path / 'none.jsonl'}")
    path = tmp_path / "broken.jsonl"
    path.write_text('{"question": "q"}\nnot json\n')
    with pytest.raises(TaskSourceError, match=r"broken.jsonl:2 is not valid JSON"):
        load_tasks(f"kodcode:{path}")
    path.write_text('{"question": "q"}\n')
    with pytest.raises(TaskSourceError, match="missing field.*test"):
        load_tasks(f"kodcode:{path}")


def test_every_library_dataframebench_imports_is_installed():
    """A missing library scores a right solution as a failure (ModuleNotFoundError): the `code` extra
    must cover every import of the tasks and their tests."""
    import importlib.util
    import re

    missing = set()
    for split in ("train", "val", "test"):
        for t in load_tasks(f"dataframebench:{split}"):
            text = "\n".join([t.prompt, t.test_code, t.meta.get("reference") or ""])
            mods = re.findall(r"^[ \t]*import[ \t]+([A-Za-z_]\w*)[\w. \t,]*$", text, re.M)
            mods += re.findall(r"^[ \t]*from[ \t]+([A-Za-z_]\w*)[\w.]*[ \t]+import[ \t]", text, re.M)
            for mod in mods:
                if importlib.util.find_spec(mod) is None:
                    missing.add(mod)
    assert not missing, f"install these (pyproject's `code` extra): {sorted(missing)}"
