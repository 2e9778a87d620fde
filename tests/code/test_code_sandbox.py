"""Sandbox basics: output, errors reduced to their last line, files, truncation, limits, isolation."""

from __future__ import annotations

import pytest

from research_agent.code.sandbox import (
    LEVELS,
    SandboxLimits,
    isolation_level,
    last_line,
    run_python,
    truncate,
)


def test_isolation_level_is_known_and_reported():
    level = isolation_level()
    assert level in LEVELS
    assert run_python("print('hi')").isolation == level


def test_stdout_and_success():
    res = run_python("print(sum(range(10)))")
    assert res.ok and res.stdout.strip() == "45" and res.returncode == 0 and res.error is None


def test_error_is_last_traceback_line():
    res = run_python("def f():\n    return {}['missing']\nf()\n")
    assert not res.ok and res.returncode == 1
    assert res.error == "KeyError: 'missing'"
    assert "Traceback" in res.stderr


def test_files_are_written_beside_the_program_and_fresh_each_run():
    res = run_python(
        "import helper\nprint(helper.X, open('data/in.txt').read())",
        files={"helper.py": "X = 7\n", "data/in.txt": "abc"},
    )
    assert res.ok, res
    assert res.stdout.split() == ["7", "abc"]
    again = run_python("import os\nprint(sorted(os.listdir('.')))")
    assert again.stdout.strip() == "['main.py']"


def test_file_names_escaping_the_workdir_are_rejected():
    with pytest.raises(ValueError, match="relative path"):
        run_python("pass", files={"../x.py": ""})


def test_output_is_truncated_to_the_budget():
    res = run_python("print('a' * 10000)\nprint('END')", SandboxLimits(output_chars=200))
    assert res.ok
    assert len(res.stdout) < 300 and "truncated" in res.stdout and res.stdout.rstrip().endswith("END")


def test_file_size_limit():
    res = run_python("open('big', 'w').write('x' * (3 << 20))", SandboxLimits(fsize_mb=1))
    assert not res.ok and "File too large" in res.error


def test_process_limit_stops_spawning():
    code = "import subprocess\nps = [subprocess.Popen(['sleep', '5']) for _ in range(20)]\n"
    res = run_python(code, SandboxLimits(nproc=5, wall_s=5))
    assert not res.ok and "Resource temporarily unavailable" in res.error


def test_numpy_and_pandas_fit_in_the_default_limits():
    pytest.importorskip("pandas")
    res = run_python("import numpy as np, pandas as pd\nprint(pd.DataFrame({'a': np.arange(3)}).a.sum())")
    assert res.ok, res.error
    assert res.stdout.strip() == "3"


def test_helpers():
    assert last_line("a\nb\n\n") == "b" and last_line("  ") is None
    assert truncate("abc", 10) == "abc"
    assert "truncated" in truncate("x" * 100, 10)
