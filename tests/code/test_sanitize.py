"""The submission sanitizer: demo code and a token-cut tail go, the solution stays, line for line."""

from __future__ import annotations

import pytest

from research_agent.code.env import CodeEnvironment
from research_agent.code.sandbox import SandboxLimits
from research_agent.code.sanitize import longest_parsable_prefix, sanitize
from research_agent.code.tasks import load_tasks, run_tests

SOLUTION = """import pandas as pd
from collections import Counter

THRESHOLD = 3  # read by the function: kept


@staticmethod
def helper(x):
    return x * THRESHOLD


def task_func(values):
    df = pd.DataFrame({"v": values})
    return helper(int(df["v"].sum()))
"""


def test_demo_code_after_the_solution_is_dropped():
    code = (
        SOLUTION
        + """
df = pd.read_csv("data.csv")  # demo: not read by any definition
result = task_func([1, 2])
print(result)
for i in range(3):
    print(i)
assert result == 9
if __name__ == "__main__":
    task_func([5])
"""
    )
    out = sanitize(code, "task_func")
    assert out.strip() == SOLUTION.strip()


def test_a_token_cut_tail_is_removed_and_the_rest_kept():
    code = SOLUTION + '\nexample = """Score: 85, Category: Math\nScore: 9'
    with pytest.raises(SyntaxError):
        compile(code, "<s>", "exec")
    assert sanitize(code, "task_func").strip() == SOLUTION.strip()
    assert longest_parsable_prefix(code).strip() == SOLUTION.strip()


def test_import_guards_and_global_chains_are_kept():
    code = """try:
    import numpy as np
except ImportError:
    np = None
BASE = 2
SCALE = BASE * 5
UNUSED = open("x.txt").read()
def task_func(x):
    global COUNT
    return x * SCALE
task_func(3)
"""
    out = sanitize(code, "task_func")
    assert "import numpy as np" in out and "np = None" in out
    assert "BASE = 2" in out and "SCALE = BASE * 5" in out  # SCALE is read, and BASE by SCALE
    assert "UNUSED" not in out and "task_func(3)" not in out
    ns: dict = {}
    exec(compile(out, "<sanitized>", "exec"), ns)
    assert ns["task_func"](3) == 30


def test_code_that_would_lose_the_entry_point_is_returned_unchanged():
    body_only = "    return sorted(x)\n"  # a stub completion: the stub is prepended later
    assert sanitize(body_only, "task_func") == body_only
    other = "def solve(x):\n    return x\nprint(solve(1))\n"
    assert sanitize(other, "task_func") == other  # the tests report the model's own NameError
    assert sanitize("", "task_func") == ""
    assert sanitize("def task_func(:\n", "task_func") == "def task_func(:\n"


def test_dataframebench_reference_with_a_demo_passes_only_sanitized():
    task = next(t for t in load_tasks("dataframebench:val") if t.id == "DFB/V0002")
    demo = task.meta["reference"] + '\n\nprint(task_func(open("missing_file.csv").read()))\n'
    assert run_tests(task, demo).ok
    raw = run_tests(task, demo, sanitized=False)
    assert not raw.ok and "missing_file.csv" in (raw.error or "")


def test_submissions_are_tested_under_the_test_limits_and_flag_sanitizing():
    task = next(t for t in load_tasks("dataframebench:val") if t.id == "DFB/V0002")
    slow_demo = task.meta["reference"] + "\nimport time\ntime.sleep(30)\n"
    env = CodeEnvironment(task, limits=SandboxLimits(wall_s=0.5), test_limits=SandboxLimits(wall_s=60.0))
    _, info, done = env.run("submit", slow_demo)  # the demo's sleep is gone; the execute limit is not used
    assert done and info["passed"] and info["sanitized"]
    # importing pandas alone takes longer than 50 ms (0.3 s was once enough on a warm cache, so CI flaked)
    tight = CodeEnvironment(task, test_limits=SandboxLimits(wall_s=0.05, cpu_s=1))
    _, info, _ = tight.run("submit", task.meta["reference"])
    assert not info["passed"] and not info["sanitized"]
