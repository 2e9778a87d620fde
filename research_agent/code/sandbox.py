"""Run untrusted Python (model-written code) in a separate, limited, disposable process.

Every call gets a fresh working directory, a new session (process group), a wall-clock timeout
and rlimits on CPU time, address space, process count and file size; the environment is rebuilt
from scratch so API keys never reach the program; output is capped and truncated; on timeout the
whole group (and pid namespace) is killed. Where the OS allows, the program also runs in new
pid/net/mount namespaces, in a new read-only root that holds only the system's libraries and the
Python environment, and as an unprivileged uid — the only way RLIMIT_NPROC (fork bombs) binds when
the caller is root, which it is in containers. Where a cgroup can be made (``cgroups.py``), memory is
bounded for all of the program's processes together, not only per process.

The program runs on the caller's interpreter — ``sys.executable`` as the user started it, not its
resolved target, so a virtualenv (``venv``, ``virtualenv``, ``uv``) keeps its site-packages — and
the environment's directories are bound read-only into the new root at their own paths.

Isolation levels, strongest first (``isolation_level()`` probes once and caches):

- ``namespaces+uid``: root with util-linux ``unshare``: pid+net+mount namespaces, a minimal
  read-only root (no home, no other checkouts, a minimal /etc), fresh tmpfs /tmp, unprivileged uid.
  No network, no view of other processes or of the host's files.
- ``userns``: non-root with unprivileged user namespaces: the same namespaces and mounts, own uid
  (root of its user namespace with every capability dropped, so it cannot undo the mounts).
- ``uid``: root without namespaces: unprivileged uid and rlimits; network is NOT blocked, and
  Python installed under a private (0700) directory such as a home cannot start.
- ``rlimits``: rlimits, a process group and a temp dir only. The program runs as the caller's
  user with the caller's filesystem access: it CAN delete the caller's files. Only for trusted code.

The default is the strongest level that works here, checked by running a real program through it;
``rlimits`` is never a default. Set ``RESEARCH_AGENT_SANDBOX`` to one of the names to choose a level
(a weaker one only this way). Commands that run model-written code call ``require_contained`` so
that they refuse an uncontained level unless the user passed ``--allow-unsafe-sandbox``.
See docs/security.md for what each level promises and what it does not.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import random
import selectors
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from research_agent.code import cgroups

LEVELS = ("namespaces+uid", "userns", "uid", "rlimits")
# Levels under which the filesystem outside the work dir is read-only or hidden for the program.
CONTAINED_LEVELS = ("namespaces+uid", "userns")
# What running model-written code at an uncontained level means (the refusal message says it).
UNCONTAINED_MEANS = {
    "uid": (
        "the program runs as an unprivileged uid under rlimits only: it can reach the network, "
        "see this machine's processes, and read (and write) every file that is world-readable "
        "(world-writable), /tmp included"
    ),
    "rlimits": (
        "the program runs as your own user ({user}) under rlimits only: it can read, change and "
        "delete every file you can (the repository, your home, SSH keys, API key files), reach "
        "the network, and signal your processes"
    ),
}
# The host's directories in the contained levels' new root (the boot script binds them read-only);
# the Python environment's own directories are added to these (``_environment_dirs``).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_log = logging.getLogger(__name__)
# Output beyond this is not read: the program is killed (protects the caller from output bombs).
MAX_OUTPUT_BYTES = 1 << 20
# Unprivileged uids are drawn from here, one per run, so concurrent sandboxes never share an
# RLIMIT_NPROC count and leftovers are recognisable.
SANDBOX_UID_RANGE = (1_000_000, 2_000_000)
_BOOT = Path(__file__).with_name("_sandbox_boot.py")
_UNSHARE_ROOT = ["--pid", "--fork", "--kill-child", "--mount-proc", "--net", "--mount"]
_UNSHARE_USER = ["--user", "--map-root-user", *_UNSHARE_ROOT]
_SIGNAL_HINTS = {
    signal.SIGSEGV: "segmentation fault",
    signal.SIGXCPU: "CPU time limit exceeded",
    signal.SIGXFSZ: "file size limit exceeded",
    signal.SIGKILL: "killed",
    signal.SIGABRT: "aborted",
    signal.SIGBUS: "bus error",
}


class SandboxError(RuntimeError):
    """The sandbox itself could not start (not a failure of the program it runs)."""


class UnsafeSandboxError(SandboxError):
    """Model-written code would run uncontained, and the user did not say that this is acceptable."""


@dataclass
class SandboxLimits:
    """Resource limits of one execution (ToRL-style small outputs).

    The seed's 10 s timeout is kept as CPU time, so a busy loop still ends after 10 s; wall clock
    gets 30 s, because on two shared cores the imports of pandas + scikit-learn alone took over
    10 s of wall clock while a model generated (qwen's first `execute` in code-only mode timed out
    on imports, not on its code)."""

    wall_s: float = 30.0
    cpu_s: int = 10
    memory_mb: int = 1024  # RLIMIT_AS: virtual memory, so numpy/pandas need a few hundred MB
    nproc: int = 64
    fsize_mb: int = 16
    output_chars: int = 4000  # per stream, after truncation


# The shared default of every ``limits=`` argument; never mutated here (use dataclasses.replace).
DEFAULT_LIMITS = SandboxLimits()
# Running a task's tests: same memory and process caps, more time. A DataFrameBench test file
# imports pandas, matplotlib and scikit-learn and runs several cases; on two shared cores that
# alone can take 10 s of wall clock, and a solution that is right must not fail on the machine's
# load (BigCodeBench allows 240 s a task). CPU time stays bounded so an infinite loop still ends.
TEST_LIMITS = SandboxLimits(wall_s=60.0, cpu_s=30)


@dataclass
class ExecResult:
    """How one execution ended. ``error`` is what the model sees: the last traceback line or the limit hit."""

    ok: bool
    stdout: str
    stderr: str
    returncode: int | None
    timed_out: bool
    error: str | None
    seconds: float
    isolation: str
    # "cgroup": memory_mb bounds all of the program's processes together; "per-process": each alone
    memory_scope: str = "per-process"


def truncate(text: str, limit: int) -> str:
    """Keep the head and the tail (errors are usually at the end), marking what was cut."""
    if len(text) <= limit:
        return text
    half = max(limit // 2, 1)
    return f"{text[:half]}\n... [{len(text) - 2 * half} characters truncated] ...\n{text[-half:]}"


def last_line(text: str) -> str | None:
    """The last non-empty line: for a traceback, the exception (ToRL shows only this to the model)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else None


def _python() -> str:
    """The interpreter the user runs, unresolved: a venv's ``bin/python`` finds its ``pyvenv.cfg`` (and
    so its site-packages) only under its own name, not under the base interpreter it links to."""
    return os.path.abspath(sys.executable)


def _scrubbed_env(workdir: str) -> dict[str, str]:
    """A fresh environment: nothing inherited, so no API key or token can leak into the program."""
    path = ["/usr/local/bin", "/usr/bin", "/bin"]
    bindir = os.path.dirname(_python())
    return {
        "PATH": ":".join(path if bindir in path else [bindir, *path]),  # `python` is the user's python
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": workdir,
        # One BLAS/OpenMP thread: threads reserve address space (RLIMIT_AS) and the cores are shared.
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "POLARS_MAX_THREADS": "1",
    }


def _inside(path: str, dirs: list[str] | tuple[str, ...]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def _environment_dirs() -> list[str]:
    """The Python environment's directories, bound read-only at their own paths into the contained
    levels' new root: its prefix, its base interpreter's prefix, its site-packages and the
    interpreter's directory, each as the user names it and as its resolved target (a prefix reached
    through a symlink still works). Outermost only, and none that the system directories (/usr, ...)
    bring already. Nothing else of the host is bound: not the home around a pyenv, not the checkout
    around a ``.venv``, not an editable project's source."""
    python = _python()
    wanted = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]
    wanted += [os.path.dirname(python), os.path.dirname(os.path.realpath(python))]
    wanted += site.getsitepackages() if hasattr(site, "getsitepackages") else []
    system = [d for d in SYSTEM_DIRS if os.path.isdir(d)]  # a symlinked /lib resolves into /usr
    paths = set()
    for p in wanted:
        for q in (os.path.abspath(p), os.path.realpath(p)):
            if os.path.isdir(q) and not _inside(q, system) and q != "/":
                paths.add(q)
    env: list[str] = []
    for p in sorted(paths):
        if not _inside(p, env):
            env.append(p)
    return env


def _command(level: str) -> list[str]:
    boot = [_python(), "-I", "-S", str(_BOOT)]
    if level == "namespaces+uid":
        return ["unshare", *_UNSHARE_ROOT, *boot]
    if level == "userns":
        return ["unshare", *_UNSHARE_USER, *boot]
    return boot


def _describe(report: dict, limits: SandboxLimits, stderr: str) -> str | None:
    if "signal" in report:
        sig = report["signal"]
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        hint = _SIGNAL_HINTS.get(sig, "signal")
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and report.get("cpu_s", 0) >= limits.cpu_s):
            return f"CPU time limit of {limits.cpu_s} s exceeded"
        if sig == signal.SIGXFSZ:
            return f"file size limit of {limits.fsize_mb} MB exceeded"
        return f"killed by {name} ({hint})"
    if report.get("returncode", 0) != 0:
        line = last_line(stderr) or f"exit status {report['returncode']}"
        if line.startswith("MemoryError"):
            line += f" (memory limit {limits.memory_mb} MB)"
        return line
    return None


def _collect(
    proc: subprocess.Popen, status_r: int, deadline: float
) -> tuple[bytes, bytes, bytes, str | None]:
    """Read stdout, stderr and the status pipe until EOF, the deadline, or the output cap."""
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray(), status_r: bytearray()}
    sel = selectors.DefaultSelector()
    for fd in bufs:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    stop: str | None = None
    while sel.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            stop = "timeout"
            break
        for key, _ in sel.select(timeout=min(left, 0.5)):
            chunk = os.read(key.fd, 65536)
            if not chunk:
                sel.unregister(key.fd)
                continue
            bufs[key.fd] += chunk
        if len(bufs[proc.stdout.fileno()]) + len(bufs[proc.stderr.fileno()]) > MAX_OUTPUT_BYTES:
            stop = "output"
            break
    sel.close()
    return bytes(bufs[proc.stdout.fileno()]), bytes(bufs[proc.stderr.fileno()]), bytes(bufs[status_r]), stop


def _kill(proc: subprocess.Popen, uid: int | None) -> None:
    """Kill the session's process group; with a private uid also anything of that uid that escaped it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if uid is not None and os.geteuid() == 0:
        for _ in range(3):  # a fork bomb may fork between scan and kill: repeat
            for pid in _pids_of_uid(uid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _pids_of_uid(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    pids.append(int(entry))
            except FileNotFoundError:
                pass
    return pids


def _run(code: str, limits: SandboxLimits, files: dict[str, str] | None, level: str) -> ExecResult:
    start = time.monotonic()
    root = os.geteuid() == 0
    uid = random.randrange(*SANDBOX_UID_RANGE) if root and level in ("namespaces+uid", "uid") else None
    mount = level in CONTAINED_LEVELS
    host_dir = None if mount else tempfile.mkdtemp(prefix="ra-sandbox-")
    if host_dir and uid is not None:
        os.chown(host_dir, uid, uid)
    workdir = "/tmp/work" if mount else host_dir
    cgroup, memory_scope = None, "per-process"
    if cgroups.available()[0]:
        cgroup, _ = cgroups.create(limits.memory_mb, limits.nproc)
        memory_scope = "cgroup" if cgroup else memory_scope
    nproc = int(limits.nproc) if cgroup else _per_process_nproc(limits)
    payload = {
        "code": code,
        "files": dict(files or {}),
        "workdir": workdir,
        "mount": mount,
        "uid": uid,
        "python": _python(),
        "env": _scrubbed_env(workdir),
        "expose": _environment_dirs() if mount else [],
        "cgroup_procs": cgroup.procs_files if cgroup else [],
        "limits": {
            "cpu_s": int(limits.cpu_s),
            "memory_b": int(limits.memory_mb) << 20,
            "fsize_b": int(limits.fsize_mb) << 20,
            "nproc": nproc,
            "tmpfs_mb": max(64, 4 * int(limits.fsize_mb)),
        },
    }
    status_r, status_w = os.pipe()
    payload["status_fd"] = status_w
    try:
        proc = subprocess.Popen(
            _command(level),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(status_w,),
            start_new_session=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
            cwd="/",
        )
    except OSError as e:
        os.close(status_r)
        os.close(status_w)
        if cgroup:
            cgroup.close()
        raise SandboxError(f"could not start the sandbox ({level}): {e}") from e
    os.close(status_w)
    try:
        proc.stdin.write(json.dumps(payload).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    try:
        out, err, status, stop = _collect(proc, status_r, start + limits.wall_s)
        if stop:
            _kill(proc, uid)
        proc.wait()
        _kill(proc, uid)  # stragglers that left the group (setsid) die with the run
    finally:
        os.close(status_r)
        for stream in (proc.stdout, proc.stderr):
            stream.close()
        if host_dir:
            shutil.rmtree(host_dir, ignore_errors=True)
        oom_kills = cgroup.oom_kills() if cgroup else 0
        if cgroup:
            cgroup.close()
    stdout = out.decode("utf-8", "replace")
    stderr = err.decode("utf-8", "replace")
    try:
        report = json.loads(status.decode() or "{}")
    except json.JSONDecodeError:
        report = {}
    if "boot_error" in report:
        hint = ""
        if level == "uid" and "Permission denied" in report["boot_error"]:
            real = os.path.realpath(_python())
            hint = (
                f" (an unprivileged uid cannot start {real}: it lies under a directory only its owner may"
                " enter, such as a home; a contained level puts it back read-only, or install Python"
                " where other users can read it)"
            )
        raise SandboxError(f"sandbox setup failed at level {level}: {report['boot_error']}{hint}")
    returncode = report.get("returncode")
    if "signal" in report:
        returncode = -report["signal"]
    if stop == "timeout":
        error = f"timeout: wall-clock limit of {limits.wall_s:g} s exceeded"
    elif stop == "output":
        error = f"output limit exceeded ({MAX_OUTPUT_BYTES >> 20} MB): program killed"
    elif not report:
        error = f"sandbox ended without a status (exit {proc.returncode}): {last_line(stderr)}"
    else:
        error = _describe(report, limits, stderr)
    if report.get("cgroup_error"):
        memory_scope = "per-process"
        _log.warning("code sandbox: memory bounded per process only: %s", report["cgroup_error"])
    if oom_kills and returncode != 0:
        error = (
            f"memory limit of {limits.memory_mb} MB for the whole program exceeded: the kernel killed"
            f" {oom_kills} of its processes"
        )
    return ExecResult(
        ok=stop is None and returncode == 0,
        stdout=truncate(stdout, limits.output_chars),
        stderr=truncate(stderr, limits.output_chars),
        returncode=returncode,
        timed_out=stop == "timeout",
        error=error,
        seconds=time.monotonic() - start,
        isolation=level,
        memory_scope=memory_scope,
    )


def _per_process_nproc(limits: SandboxLimits) -> int:
    """Without a cgroup each process may take ``memory_mb``: allow only as many processes as half of
    this machine's memory holds at that size (at least 4), not ``nproc`` x ``memory_mb``."""
    try:
        ram_mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 20
    except (ValueError, OSError):
        return int(limits.nproc)
    return max(4, min(int(limits.nproc), ram_mb // 2 // max(int(limits.memory_mb), 1)))


def _probe(level: str) -> str | None:
    """Run a real program at ``level``: None if it ran on this environment, else why not."""
    try:
        res = _run("import sys\nprint(sys.prefix)", SandboxLimits(wall_s=20.0), None, level)
    except SandboxError as e:
        return str(e)
    if not res.ok:
        return res.error or "the probe program failed"
    if res.stdout.strip() != sys.prefix:
        return f"the sandboxed program ran on prefix {res.stdout.strip()!r}, not this environment's {sys.prefix!r}"
    return None


@lru_cache(maxsize=4)
def _find_level(forced: str | None) -> str | SandboxError:
    """The level to use (``forced`` is the user's choice), or the error explaining why there is none."""
    if forced:
        if forced not in LEVELS:
            raise ValueError(f"RESEARCH_AGENT_SANDBOX={forced!r} is not one of {', '.join(LEVELS)}")
        reason = _probe(forced)
        if reason:
            return SandboxError(f"RESEARCH_AGENT_SANDBOX={forced} does not work here: {reason}")
        return forced
    candidates = ["namespaces+uid", "uid"] if os.geteuid() == 0 else ["userns"]
    tried = []
    if not shutil.which("unshare"):
        tried += [f"{c}: util-linux `unshare` is not installed" for c in candidates if c in CONTAINED_LEVELS]
        candidates = [c for c in candidates if c not in CONTAINED_LEVELS]
    for level in candidates:
        reason = _probe(level)
        if reason is None:
            if level not in CONTAINED_LEVELS:
                _log.warning(
                    "code sandbox: no contained level works here, using %r: %s",
                    level,
                    UNCONTAINED_MEANS[level],
                )
            return level
        tried.append(f"{level}: {reason}")
    return UnsafeSandboxError(
        "no sandbox level that isolates model-written code works here ("
        + "; ".join(tried)
        + "). It is not run unconfined by default. Install util-linux `unshare` and run as root, or enable"
        " unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, or"
        " kernel.apparmor_restrict_unprivileged_userns=0); or, for code you trust, set"
        " RESEARCH_AGENT_SANDBOX=rlimits (commands also want --allow-unsafe-sandbox):"
        f" {UNCONTAINED_MEANS['rlimits'].format(user=_user())}."
    )


def isolation_level() -> str:
    """The level ``run_python`` uses: the one named by ``RESEARCH_AGENT_SANDBOX``, else the strongest that
    works here (each probed once, by running a real program). Raises ``SandboxError`` if the named level
    does not work, and ``UnsafeSandboxError`` if none but ``rlimits`` would: never a silent downgrade."""
    found = _find_level(os.environ.get("RESEARCH_AGENT_SANDBOX") or None)
    if isinstance(found, SandboxError):
        raise type(found)(str(found))
    return found


def _user() -> str:
    try:
        return f"{pwd.getpwuid(os.geteuid()).pw_name}, uid {os.geteuid()}"
    except KeyError:
        return f"uid {os.geteuid()}"


def require_contained(allow_unsafe: bool = False) -> str:
    """The sandbox level, if it contains model-written code; else ``UnsafeSandboxError`` unless
    ``allow_unsafe`` (the user's ``--allow-unsafe-sandbox``). Commands call this before they start."""
    level = isolation_level()
    if level in CONTAINED_LEVELS:
        return level
    means = UNCONTAINED_MEANS[level].format(user=_user())
    if allow_unsafe:
        _log.warning("code sandbox at %r (--allow-unsafe-sandbox): %s", level, means)
        return level
    how = (
        "RESEARCH_AGENT_SANDBOX chose it"
        if os.environ.get("RESEARCH_AGENT_SANDBOX")
        else "it is the strongest level that works here"
    )
    raise UnsafeSandboxError(
        f"the code sandbox would run model-written code at level {level!r} ({how}), which does not contain"
        f" it: {means}. Refusing to start. To contain it, install util-linux `unshare` and run as root, or"
        " enable unprivileged user namespaces; to run it anyway, pass --allow-unsafe-sandbox."
    )


def run_python(
    code: str, limits: SandboxLimits = DEFAULT_LIMITS, files: dict[str, str] | None = None
) -> ExecResult:
    """Run ``code`` as ``main.py`` (with ``files`` beside it) in a fresh sandbox; never raises for program errors.

    Code that cannot be written as UTF-8 (a lone surrogate such as ``'\\ud800'``, which a JSON escape
    or a byte-level decode can put in a string) is such an error: its result says so, as a
    SyntaxError would, and nothing is started."""
    for name in files or {}:
        if name.startswith("/") or ".." in Path(name).parts or name == "main.py":
            raise ValueError(
                f"sandbox file name {name!r} must be a relative path inside the work dir, not main.py"
            )
    level = isolation_level()
    for what, text in [
        ("the code", code),
        *((f"file {name!r}", body) for name, body in (files or {}).items()),
    ]:
        error = _not_utf8(what, text)
        if error:
            return ExecResult(False, "", error, None, False, error, 0.0, level)
    return _run(code, limits, files, level)


def _not_utf8(what: str, text: object) -> str | None:
    """Why ``text`` cannot be written as a UTF-8 source file, or None when it can."""
    if not isinstance(text, str):
        return f"SyntaxError: {what} is not text (a {type(text).__name__})"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return (
            f"SyntaxError: {what} is not valid UTF-8: a lone surrogate {text[e.start]!r} at character"
            f" {e.start}; write the character itself, or an escape inside a string literal"
        )
    return None
