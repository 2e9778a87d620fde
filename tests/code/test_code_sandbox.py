"""Sandbox basics: output, errors reduced to their last line, files, truncation, limits, isolation;
the user's Python environment (a virtualenv under /tmp) inside the sandbox; no silent downgrade."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from research_agent.code import sandbox
from research_agent.code.sandbox import (
    CONTAINED_LEVELS,
    LEVELS,
    ExecResult,
    SandboxError,
    SandboxLimits,
    UnsafeSandboxError,
    isolation_level,
    last_line,
    require_contained,
    run_python,
    truncate,
)

REPO = str(Path(__file__).resolve().parents[2])


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


# --- the user's environment inside the sandbox (issue 28) ---------------------------------------


@pytest.fixture(scope="module")
def tmp_venv():
    """A real virtualenv under /tmp (which contained levels replace with a fresh tmpfs), holding a module
    that only it has."""
    root = Path(tempfile.mkdtemp(prefix="ra-venv-", dir="/tmp"))
    os.chmod(root, 0o755)  # so that only the base interpreter's own location can stop the uid level
    venv = root / "venv"
    try:
        subprocess.run(
            [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
            check=True,
            timeout=120,
        )
        purelib = subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        Path(purelib, "ra_venv_only.py").write_text("WHERE = 'venv'\n")
        yield venv
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run_on(python: Path, level: str, code: str) -> dict:
    """``run_python(code)`` called from a process on ``python`` with ``level`` named: the ExecResult as
    a dict, or ``{"sandbox_error": message}``."""
    driver = (
        "import dataclasses, json, sys\n"
        "from research_agent.code.sandbox import SandboxError, run_python\n"
        "try:\n    print(json.dumps(dataclasses.asdict(run_python(sys.argv[1]))))\n"
        "except SandboxError as e:\n    print(json.dumps({'sandbox_error': str(e)}))\n"
    )
    env = {**os.environ, "RESEARCH_AGENT_SANDBOX": level, "PYTHONPATH": REPO}
    out = subprocess.run(
        [str(python), "-c", driver, code], env=env, capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("level", LEVELS)
def test_the_sandbox_runs_on_the_users_virtualenv(tmp_venv: Path, level: str):
    home = os.path.realpath(os.path.expanduser("~"))
    contained = level in CONTAINED_LEVELS
    code = (
        "import os, sys, ra_venv_only\n"
        "print(sys.prefix)\n"
        "print(ra_venv_only.WHERE)\n"
        f"home = {home!r}\n"
        "print(sorted(os.listdir(home)) if os.path.isdir(home) else [])\n"
    )
    if contained:  # only where the filesystem is read-only: elsewhere this write would land
        code += (
            "try:\n    open(os.path.join(os.path.dirname(ra_venv_only.__file__), 'pwned'), 'w')\n"
            "    print('venv writable')\nexcept OSError:\n    print('venv read-only')\n"
        )
    res = _run_on(tmp_venv / "bin" / "python", level, code)
    if "sandbox_error" in res:
        why = sandbox._probe(level)  # does the level work here at all, for this interpreter?
        if why:
            pytest.skip(f"{level} is not available here: {why}")
        pytest.fail(f"{level} works here but not on a virtualenv under /tmp: {res['sandbox_error']}")
    assert res["ok"], res
    assert res["isolation"] == level
    lines = res["stdout"].splitlines()
    assert lines[0] == str(tmp_venv), "the sandbox ran the base interpreter, not the virtualenv"
    assert lines[1] == "venv"
    if contained:
        assert lines[-1] == "venv read-only"
        # the home shows only the way to the Python installation put back into it, nothing else
        exposed = sandbox._environment_dirs()
        allowed = {Path(p).relative_to(home).parts[0] for p in exposed if p.startswith(home + "/")}
        assert set(ast.literal_eval(lines[2])) <= allowed


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid level exists only for root")
def test_uid_level_says_why_python_under_a_private_dir_cannot_start():
    python = os.path.realpath(sys.executable)
    parents = Path(python).parents
    if all(os.stat(d).st_mode & 0o001 for d in parents):
        pytest.skip(f"{python} is reachable by other users here")
    with pytest.raises(SandboxError, match="Permission denied") as e:
        sandbox._run("print(1)", SandboxLimits(wall_s=10), None, "uid")
    assert "cannot start" in str(e.value)


# --- no silent downgrade (issue 30) -------------------------------------------------------------


@pytest.fixture
def fresh_levels():
    """Forget the probed level before and after: the test changes what the machine looks like."""
    sandbox._find_level.cache_clear()
    yield
    sandbox._find_level.cache_clear()


def _no_unshare(monkeypatch) -> None:
    real = shutil.which
    monkeypatch.setattr(
        shutil, "which", lambda name, *a, **k: None if name == "unshare" else real(name, *a, **k)
    )


def test_without_namespaces_the_default_refuses_instead_of_rlimits(monkeypatch, fresh_levels):
    monkeypatch.delenv("RESEARCH_AGENT_SANDBOX", raising=False)
    _no_unshare(monkeypatch)
    probed = []

    def refused(level: str) -> str:
        probed.append(level)
        return "refused (simulated)"

    monkeypatch.setattr(sandbox, "_probe", refused)
    with pytest.raises(UnsafeSandboxError, match="RESEARCH_AGENT_SANDBOX=rlimits") as e:
        isolation_level()
    assert "unshare" in str(e.value) and "delete" in str(e.value)
    assert "rlimits" not in probed
    with pytest.raises(UnsafeSandboxError):
        run_python("print('never runs')")
    with pytest.raises(UnsafeSandboxError):
        require_contained(allow_unsafe=True)  # the flag does not pick a level: the user names it


def test_without_unshare_the_real_default_is_never_rlimits(monkeypatch, fresh_levels):
    monkeypatch.delenv("RESEARCH_AGENT_SANDBOX", raising=False)
    _no_unshare(monkeypatch)
    try:
        level = isolation_level()
    except UnsafeSandboxError:
        return  # here: no level but rlimits would run, and the sandbox says so
    assert level == "uid"  # root, and this Python is readable by other users
    with pytest.raises(UnsafeSandboxError, match="--allow-unsafe-sandbox"):
        require_contained(allow_unsafe=False)


def test_naming_rlimits_runs_there_and_commands_refuse_it_without_the_flag(monkeypatch, fresh_levels):
    monkeypatch.setenv("RESEARCH_AGENT_SANDBOX", "rlimits")
    _no_unshare(monkeypatch)
    assert isolation_level() == "rlimits"
    res = run_python("print(6 * 7)")
    assert res.ok and res.stdout.strip() == "42" and res.isolation == "rlimits"
    with pytest.raises(UnsafeSandboxError, match="--allow-unsafe-sandbox") as e:
        require_contained(allow_unsafe=False)
    assert "RESEARCH_AGENT_SANDBOX chose it" in str(e.value) and "delete" in str(e.value)
    assert require_contained(allow_unsafe=True) == "rlimits"


def test_a_contained_default_passes_require_contained(fresh_levels):
    level = isolation_level()
    if level not in CONTAINED_LEVELS:
        pytest.skip(f"no contained level here ({level})")
    assert require_contained() == level


def test_a_named_level_that_does_not_work_is_an_error_not_a_fallback(monkeypatch, fresh_levels):
    monkeypatch.setenv("RESEARCH_AGENT_SANDBOX", "namespaces+uid")
    monkeypatch.setattr(sandbox, "_probe", lambda level: "refused (simulated)")
    with pytest.raises(SandboxError, match="does not work here: refused"):
        isolation_level()


def test_an_unknown_level_name_is_an_error(monkeypatch, fresh_levels):
    monkeypatch.setenv("RESEARCH_AGENT_SANDBOX", "chroot")
    with pytest.raises(ValueError, match="not one of"):
        isolation_level()


def test_the_probe_rejects_a_sandbox_that_lost_the_environment(monkeypatch):
    def base_only(code, limits, files, level):
        return ExecResult(True, "/usr\n", "", 0, False, None, 0.1, level)

    monkeypatch.setattr(sandbox, "_run", base_only)
    assert "not this environment" in sandbox._probe("namespaces+uid")
