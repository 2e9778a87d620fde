"""One cgroup per sandboxed run, so memory and processes are bounded for the whole program.

rlimits bind each process alone: under ``memory_mb=256`` four children of 200 MB each held their
memory at once, and the default 64 processes x 1 GB could ask for 64 GB. A cgroup's memory limit
counts every process of the run together, with the files it writes to its tmpfs, and the kernel's
OOM killer ends the run's own processes when the total passes it, not the caller's.

The run's cgroup is made under the caller's own cgroup, in whichever hierarchy can give it one:

- cgroup v1 (``memory`` and ``pids`` hierarchies, as in many containers and VMs): a child directory in
  each, with ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes``, so swap is no way out)
  and ``pids.max``;
- cgroup v2: a child with ``memory.max``, ``memory.swap.max`` and ``pids.max``, where the caller's
  cgroup already delegates those controllers to its children (``cgroup.subtree_control``). v2 forbids
  that for a cgroup that holds processes itself (the caller's usually does), so under systemd the
  caller must run in a delegated subtree whose processes sit in a leaf.

Where neither works the sandbox falls back to per-process rlimits with fewer processes, and every
result says which bound applied (``ExecResult.memory_scope``). The sandbox's boot process joins the
cgroup by writing ``0`` (itself) to ``cgroup.procs`` before it forks the program, so no process of the
run starts outside it.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from functools import lru_cache

_log = logging.getLogger(__name__)
_counter = itertools.count()
# The sandbox's boot process (a small stdlib-only Python) lives in the run's cgroup too.
BOOT_ALLOWANCE_MB = 32


def _unescape(s: str) -> str:
    return s.encode().decode("unicode_escape").encode("latin-1").decode()


@lru_cache(maxsize=1)
def _hierarchies() -> dict[str, str]:
    """Controller (``memory``, ``pids``, or ``v2``) -> the directory of this process's own cgroup."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            own = {}
            for line in f:
                hid, controllers, path = line.rstrip("\n").split(":", 2)
                for c in controllers.split(",") if controllers else ["v2"]:
                    own[c] = path
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            mounts = [line.split() for line in f]
    except (OSError, ValueError):
        return {}
    found: dict[str, str] = {}
    for fields in mounts:
        if "-" not in fields:
            continue
        sep = fields.index("-")
        fstype, options = fields[sep + 1], fields[sep + 3] if len(fields) > sep + 3 else ""
        root, point = _unescape(fields[3]), _unescape(fields[4])
        if fstype == "cgroup2":
            names = ["v2"]
        elif fstype == "cgroup":
            names = [c for c in ("memory", "pids") if c in options.split(",")]
        else:
            continue
        for name in names:
            path = own.get(name)
            if path is None or name in found:
                continue
            rel = os.path.relpath(path, root) if path.startswith(root) else None
            if rel is None or rel.startswith(".."):
                continue  # our cgroup is not visible under this mount
            found[name] = os.path.normpath(os.path.join(point, rel))
    return found


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


@dataclass
class RunCgroup:
    """The cgroup directories of one run (one per v1 hierarchy, or one v2 directory)."""

    dirs: list[str]
    version: int
    memory_dir: str
    limit_mb: int
    _removed: bool = field(default=False, repr=False)

    @property
    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    def oom_kills(self) -> int:
        """How many of the run's processes the kernel killed for passing the memory limit."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            with open(os.path.join(self.memory_dir, name), encoding="utf-8") as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def close(self) -> None:
        """Kill whatever is left in the run's cgroups and remove them."""
        if self._removed:
            return
        deadline = time.monotonic() + 5.0
        for d in self.dirs:
            while True:
                try:
                    with open(os.path.join(d, "cgroup.procs"), encoding="utf-8") as f:
                        pids = [int(p) for p in f.read().split()]
                except FileNotFoundError:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if time.monotonic() > deadline:
                        _log.warning("could not remove the sandbox cgroup %s: %s", d, e)
                        break
                    time.sleep(0.01)
        self._removed = True


def _make(parent: str, name: str) -> str:
    path = os.path.join(parent, name)
    os.mkdir(path, 0o755)
    return path


def create(memory_mb: int, nproc: int) -> tuple[RunCgroup | None, str]:
    """A fresh cgroup bounding a run to ``memory_mb`` in total (plus the boot process's allowance) and
    ``nproc`` processes; or None and why not."""
    found = _hierarchies()
    name = f"research-agent-sandbox-{os.getpid()}-{next(_counter)}"
    limit = (int(memory_mb) + BOOT_ALLOWANCE_MB) << 20
    pids_max = str(int(nproc) + 2)  # the boot process and the program's first process
    made: list[str] = []
    try:
        if "memory" in found:
            mem = _make(found["memory"], name)
            made.append(mem)
            _write(os.path.join(mem, "memory.limit_in_bytes"), str(limit))
            memsw = os.path.join(mem, "memory.memsw.limit_in_bytes")
            if os.path.exists(memsw):
                _write(memsw, str(limit))
            if "pids" in found:
                try:
                    pids = _make(found["pids"], name)
                    made.append(pids)
                    _write(os.path.join(pids, "pids.max"), pids_max)
                except OSError as e:  # the memory bound is what matters; rlimits still cap processes
                    _log.debug("no pids cgroup for the sandbox: %s", e)
            return RunCgroup(made, 1, mem, int(memory_mb)), "cgroup v1"
        if "v2" in found:
            parent = found["v2"]
            with open(os.path.join(parent, "cgroup.subtree_control"), encoding="utf-8") as f:
                delegated = f.read().split()
            if "memory" not in delegated:
                return None, (
                    f"cgroup v2: {parent} does not delegate the memory controller to its children"
                    " (cgroup.subtree_control)"
                )
            cg = _make(parent, name)
            made.append(cg)
            _write(os.path.join(cg, "memory.max"), str(limit))
            if os.path.exists(os.path.join(cg, "memory.swap.max")):
                _write(os.path.join(cg, "memory.swap.max"), "0")
            if "pids" in delegated:
                _write(os.path.join(cg, "pids.max"), pids_max)
            return RunCgroup(made, 2, cg, int(memory_mb)), "cgroup v2"
    except OSError as e:
        for d in reversed(made):
            try:
                os.rmdir(d)
            except OSError:
                pass
        return None, f"cannot create a cgroup: {e}"
    return None, "no memory cgroup hierarchy is mounted"


@lru_cache(maxsize=1)
def available() -> tuple[bool, str]:
    """Whether runs get a cgroup here (tried once by making and removing one), and how or why not."""
    cg, how = create(64, 8)
    if cg is None:
        _log.warning(
            "code sandbox: memory is bounded per process only (%s); fewer processes are allowed", how
        )
        return False, how
    cg.close()
    return True, how
