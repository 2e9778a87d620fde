"""Ten hostile programs: each must be contained with a clear result, and the caller left unharmed.

"Unharmed" is checked after each: this process is alive, its files and environment are intact,
and no process of a sandbox uid is left running.

SAFETY: these programs really attack. They run only at a contained isolation level (read-only
filesystem, pid namespace), and the destructive ones aim only at sacrificial files under pytest's
``tmp_path`` — never at the repository or the caller's working directory. An earlier version aimed
``rmtree`` at the caller's cwd and was run with ``RESEARCH_AGENT_SANDBOX=rlimits``: it deleted the repo.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from research_agent.code import sandbox
from research_agent.code.sandbox import (
    CONTAINED_LEVELS,
    SANDBOX_UID_RANGE,
    SandboxError,
    SandboxLimits,
    isolation_level,
    run_python,
)

REPO = str(Path(__file__).resolve().parents[2])


def _level() -> str:
    try:
        return isolation_level()
    except SandboxError as e:  # no level works here, or the named one does not
        return f"none ({e})"


pytestmark = pytest.mark.skipif(
    _level() not in CONTAINED_LEVELS,
    reason=f"hostile programs run only under a contained sandbox, not {_level()!r}",
)

FAST = SandboxLimits(wall_s=4.0, cpu_s=3, memory_mb=512, nproc=32, fsize_mb=4, output_chars=2000)


def _sandbox_processes() -> list[int]:
    left = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                uid = os.stat(f"/proc/{entry}").st_uid
            except FileNotFoundError:
                continue
            if SANDBOX_UID_RANGE[0] <= uid < SANDBOX_UID_RANGE[1]:
                left.append(int(entry))
    return left


@pytest.fixture(autouse=True)
def caller_unharmed():
    pid = os.getpid()
    yield
    assert os.getpid() == pid
    deadline = time.monotonic() + 3
    while _sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _sandbox_processes() == [], "sandbox processes survived the run"


@pytest.fixture
def sacrificial_dir(tmp_path: Path) -> Path:
    """A world-writable directory of throwaway files standing in for the caller's working dir."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    os.chmod(victim, 0o777)
    os.chmod(victim / "precious.txt", 0o666)
    return victim


def test_infinite_loop_hits_wall_clock():
    res = run_python("while True:\n    pass\n", SandboxLimits(wall_s=1.5, cpu_s=30))
    assert not res.ok and res.timed_out
    assert "wall-clock" in res.error
    assert res.seconds < 5


def test_infinite_loop_hits_cpu_limit():
    res = run_python("while True:\n    pass\n", SandboxLimits(wall_s=10, cpu_s=1))
    assert not res.ok and not res.timed_out
    assert "CPU time limit" in res.error


def test_memory_bomb_gets_memory_error():
    # CPU time to spare: near the cgroup's limit the kernel's reclaim counts as the bomb's CPU time, and
    # on a loaded machine (the suite beside two training jobs) 3 s ran out before the memory did
    res = run_python("x = []\nwhile True:\n    x.append(bytearray(50 * 2**20))\n",
                     dataclasses.replace(FAST, cpu_s=30, wall_s=30))
    assert not res.ok
    assert res.error.startswith("MemoryError") and "512 MB" in res.error


def test_fork_bomb_is_contained_and_cleaned_up():
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    res = run_python(code, SandboxLimits(wall_s=2.0, cpu_s=2, nproc=16))
    assert not res.ok
    assert res.seconds < 8
    # the caller can still fork: the bomb did not exhaust the machine's process table for us
    child = os.fork()
    if child == 0:
        os._exit(0)
    assert os.waitpid(child, 0)[1] == 0


def test_gigabyte_of_output_is_cut():
    res = run_python(
        "import sys\nblock = 'x' * 2**20\nfor _ in range(1024):\n    sys.stdout.write(block)\n", FAST
    )
    assert not res.ok
    assert "output limit" in res.error
    assert len(res.stdout) < 2 * FAST.output_chars
    assert res.seconds < 10


def test_writing_outside_the_temp_dir_fails(sacrificial_dir: Path):
    targets = [sacrificial_dir / "pwned.txt", Path("/var/tmp") / f"ra-hostile-{os.getpid()}"]
    code = f"targets = {[str(t) for t in targets]!r}\nok = []\n"
    code += (
        "for t in targets:\n"
        "    try:\n        open(t, 'w').write('pwned'); ok.append(t)\n"
        "    except OSError as e:\n        print('blocked', t, type(e).__name__)\n"
    )
    code += "open('inside.txt', 'w').write('fine')\nprint('wrote', ok)\n"
    res = run_python(code, FAST)
    assert res.ok, res
    assert "wrote []" in res.stdout
    for t in targets:
        assert not t.exists(), f"sandbox wrote {t}"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a separate filesystem needs root")
@pytest.mark.parametrize("level", CONTAINED_LEVELS)
def test_other_mounted_filesystems_are_read_only_too(level: str):
    """A world-writable dir on its own mount (as /home, /data or /work often are) stays unwritten:
    read-only must hold for every mount, not only the root's."""
    victim = Path(tempfile.mkdtemp(prefix="ra-hostile-mnt-", dir="/var/tmp"))
    os.chmod(victim, 0o777)
    target = victim / "pwned.txt"
    program = f"open({str(target)!r}, 'w').write('pwned')"
    driver = (
        "from research_agent.code.sandbox import run_python\n"
        f"res = run_python({program!r})\n"
        "print(res.isolation, res.error)\n"
    )
    # the outer mount namespace makes `victim` a mount of its own, and keeps that mount off the host
    shell = f'mount --bind {victim} {victim} && exec "$0" -c "$1"'
    try:
        out = subprocess.run(
            ["unshare", "--mount", "sh", "-c", shell, sys.executable, driver],
            env={**os.environ, "RESEARCH_AGENT_SANDBOX": level, "PYTHONPATH": REPO},
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
        if "does not work here" in out.stderr:
            pytest.skip(f"{level} is not available here")
        assert out.returncode == 0, out.stderr
        # not in the sandbox's root at all (only the system's and Python's directories are), or read-only
        assert out.stdout.startswith(level), out.stdout
        assert "Read-only file system" in out.stdout or "No such file or directory" in out.stdout, out.stdout
        assert not target.exists(), "the sandbox wrote to another mounted filesystem"
    finally:
        shutil.rmtree(victim, ignore_errors=True)


def test_deleting_files_in_the_working_dir_spares_the_caller(sacrificial_dir: Path):
    precious = sacrificial_dir / "precious.txt"
    code = (
        "import os, shutil\n"
        f"try:\n    os.remove({str(precious)!r}); print('deleted')\n"
        "except OSError as e:\n    print('blocked', type(e).__name__)\n"
        f"shutil.rmtree({str(sacrificial_dir)!r}, ignore_errors=True)\n"
        "shutil.rmtree(os.getcwd(), ignore_errors=True)\n"  # its own work dir: allowed, and private
    )
    res = run_python(code, FAST)
    assert "deleted" not in res.stdout
    assert precious.read_text() == "keep me"


def test_environment_secrets_are_not_visible(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET-123")
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-SECRET-456")
    code = (
        "import os, glob\n"
        "found = [k for k, v in os.environ.items() if 'SECRET' in v]\n"
        "for p in glob.glob('/proc/[0-9]*/environ'):\n"
        "    try:\n        found += ['proc'] if b'SECRET' in open(p, 'rb').read() else []\n"
        "    except OSError:\n        pass\n"
        "print('found', found)\n"
    )
    res = run_python(code, FAST)
    assert res.ok, res
    assert "found []" in res.stdout
    assert "SECRET" not in res.stdout + res.stderr


def test_home_directory_is_hidden():
    """Secrets in the caller's home (SSH keys, API key files) are not there; only the Python put back."""
    home = os.path.realpath(os.path.expanduser("~"))
    exposed = sandbox._environment_dirs()
    code = (
        f"import os\nfound = []\nfor root, dirs, files in os.walk({home!r}):\n"
        f"    dirs[:] = [d for d in dirs if os.path.join(root, d) not in {exposed!r}]\n"
        "    found += [os.path.join(root, f) for f in files]\n"
        "print('files', found)\n"
    )
    res = run_python(code, FAST)
    assert res.ok, res
    assert "files []" in res.stdout


@pytest.mark.parametrize("level", CONTAINED_LEVELS)
def test_the_jail_cannot_be_undone(level: str):
    """Unmounting the tmpfs that hides the home, or remounting / read-write, fails: directly (root of a
    user namespace keeps no capabilities) and from a nested user namespace (its mounts are locked)."""
    home = os.path.realpath(os.path.expanduser("~"))
    target = Path("/var/tmp") / f"ra-hostile-undo-{os.getpid()}"
    code = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "def call(name, *a):\n"
        "    return 'ok' if getattr(libc, name)(*a) == 0 else os.strerror(ctypes.get_errno())\n"
        "def attack(tag):\n"
        f"    print(tag, 'umount home', call('umount2', {home.encode()!r}, 2))\n"
        "    print(tag, 'remount rw', call('mount', None, b'/', None, ctypes.c_ulong(4096 | 32), None))\n"
        "    print(tag, 'remount usr rw', call('mount', None, b'/usr', None, ctypes.c_ulong(4096 | 32), None))\n"
        "    print(tag, 'umount usr', call('umount2', b'/usr', 2))\n"
        "    try:\n"
        f"        open({str(target)!r}, 'w').write('pwned'); print(tag, 'write ok')\n"
        "    except OSError as e:\n        print(tag, 'write', e.strerror)\n"
        "attack('direct')\n"
        "print('nested userns', call('unshare', 0x10000000 | 0x00020000))\n"
        "attack('nested')\n"
    )
    if why := sandbox._probe(level):
        pytest.skip(f"{level} is not available here: {why}")
    res = sandbox._run(code, FAST, None, level)
    assert res.ok, res
    assert " ok" not in res.stdout.replace("nested userns ok", ""), res.stdout
    assert not target.exists()


def test_network_socket_cannot_connect():
    code = "import socket\ns = socket.socket()\ns.settimeout(2)\ns.connect(('1.1.1.1', 80))\nprint('connected')\n"
    res = run_python(code, FAST)
    assert not res.ok
    assert "connected" not in res.stdout
    assert "OSError" in res.error or "unreachable" in res.error.lower()


def test_killing_the_parent_does_not_reach_the_caller():
    code = (
        "import os, signal\n"
        "for pid in (os.getppid(), 1, -1, 0):\n"
        "    try:\n        os.kill(pid, signal.SIGKILL)\n"
        "    except OSError as e:\n        print('blocked', pid, type(e).__name__)\n"
        "print('still here')\n"
    )
    res = run_python(code, FAST)
    assert not res.ok or "still here" in res.stdout
    assert res.error is None or "killed" in res.error  # os.kill(0/-1) may kill the program itself
    # and this test process is alive to assert it (see the fixture)


def test_segfault_via_ctypes_is_reported():
    res = run_python("import ctypes\nctypes.string_at(0)\n", FAST)
    assert not res.ok
    assert "SIGSEGV" in res.error and res.returncode == -11


def test_host_files_outside_the_python_environment_are_not_there():
    """The program's root holds the system's /usr and libraries, the Python environment, a minimal
    /etc and its own /tmp: not this checkout and its .git, not /var, /etc/shadow or a secret left in
    a world-readable file outside the home (issue 30.2)."""
    secret = Path("/var/tmp") / f"ra-hostile-secret-{os.getpid()}"
    secret.write_text("SECRET-host-file")
    os.chmod(secret, 0o644)
    probes = [str(secret), f"{REPO}/.git", f"{REPO}/pyproject.toml", "/etc/shadow", "/etc/hostname",
              "/etc/machine-id", "/var", "/home", "/srv"]
    code = (
        "import os\n"
        f"print('present', [p for p in {probes!r} if os.path.lexists(p)])\n"
        "print('root', sorted(os.listdir('/')))\n"
        "print('etc', sorted(os.listdir('/etc')))\n"
    )
    try:
        res = run_python(code, FAST)
    finally:
        secret.unlink()
    assert res.ok, res
    lines = dict(line.split(" ", 1) for line in res.stdout.splitlines())
    assert lines["present"] == "[]", lines["present"]
    env_tops = {Path(p).parts[1] for p in sandbox._environment_dirs()}
    allowed_root = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "dev", "proc", "sys", "tmp"}
    import ast

    assert set(ast.literal_eval(lines["root"])) <= allowed_root | env_tops
    from research_agent.code import _sandbox_boot

    assert set(ast.literal_eval(lines["etc"])) <= {e.split("/")[0] for e in _sandbox_boot.ETC_ENTRIES} | {"passwd", "group"}
    assert "SECRET" not in res.stdout + res.stderr


def _leftover_cgroups() -> list[str]:
    from research_agent.code import cgroups

    prefix = f"research-agent-sandbox-{os.getpid()}-"
    return [name for d in cgroups._hierarchies().values() if os.path.isdir(d)
            for name in os.listdir(d) if name.startswith(prefix)]


def test_memory_is_bounded_for_the_whole_program():
    """Four children of 200 MB each under memory_mb=256: they cannot all hold their memory at once
    (each alone fits its rlimit); the kernel kills the ones past the program's total (issue 30.3)."""
    from research_agent.code import cgroups

    if not cgroups.available()[0]:
        pytest.skip(f"no cgroup for the sandbox here: {cgroups.available()[1]}")
    code = (
        "import os, time\nkids = []\n"
        "for i in range(4):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        b = bytearray(200 * 2**20)\n"
        "        for j in range(0, len(b), 4096):\n            b[j] = 1\n"
        "        time.sleep(1.5)\n        os._exit(0)\n"
        "    kids.append(pid)\n"
        "codes = [os.waitpid(k, 0)[1] for k in kids]\n"
        "print('held', sum(c == 0 for c in codes))\n"
    )
    res = run_python(code, SandboxLimits(wall_s=20.0, cpu_s=10, memory_mb=256, nproc=16))
    assert res.memory_scope == "cgroup"
    assert res.ok, res
    assert res.stdout.strip() in ("held 0", "held 1"), res.stdout
    assert _leftover_cgroups() == []


def test_without_a_cgroup_the_bound_is_per_process_with_fewer_processes(monkeypatch):
    """Where no cgroup can be made, the result says so and the process cap shrinks so that nproc x
    memory_mb stays within half of this machine's memory."""
    monkeypatch.setattr(sandbox.cgroups, "available", lambda: (False, "no cgroup in this test"))
    limits = SandboxLimits(wall_s=10.0, memory_mb=4096, nproc=64)
    res = run_python("import resource\nprint(resource.getrlimit(resource.RLIMIT_NPROC)[0])\n", limits)
    assert res.ok, res
    assert res.memory_scope == "per-process"
    ram_mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 20
    assert int(res.stdout) == max(4, min(64, ram_mb // 2 // 4096)) < 64
