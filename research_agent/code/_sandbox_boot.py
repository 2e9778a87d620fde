"""Sandbox bootstrap: prepares the jail, then forks the untrusted program and reports how it ended.

Run by ``sandbox.run_python`` as ``python -I -S _sandbox_boot.py`` (stdlib only, no site import:
it starts fast and trusts nothing from the environment). It reads one JSON payload from stdin:

    {"code", "files", "workdir", "mount", "uid", "python", "env", "hide", "expose", "limits", "status_fd"}

With ``mount`` (inside fresh mount + pid + net namespaces) it makes the whole filesystem read-only,
hides the caller's home under an empty tmpfs (re-exposing only the Python installation, read-only),
and gives the program a fresh tmpfs at /tmp as its working directory, so nothing it writes outlives
it or lands outside. It then forks: the child sets rlimits, drops to an unprivileged uid (so
RLIMIT_NPROC binds even though we run as root) and execs Python on the code. The parent stays as
the namespace's pid 1 — the program cannot signal it, and when it exits the kernel kills every
process left in the namespace (fork-bomb children included). How the program ended is written as
JSON to the status pipe (``status_fd``), separate from the program's own stdout/stderr.
"""

import ctypes
import json
import os
import resource
import sys

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_MOVE = 8192
MS_REC = 16384
MS_PRIVATE = 1 << 18

_libc = None


def _mount(source, target, fstype, flags, data=None):
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    if _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target} failed: {os.strerror(err)}")


MS_NOEXEC = 8
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_RELATIME = 1 << 21
# statvfs f_flag bit -> mount flag; a remount inside a user namespace must keep these (locked flags)
_KEEP = {2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: MS_NOATIME, 2048: MS_NODIRATIME, 4096: MS_RELATIME}


def _remount_readonly(path, extra=0):
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY | extra
    current = os.statvfs(path).f_flag
    for st_bit, ms_flag in _KEEP.items():
        if current & st_bit:
            flags |= ms_flag
    _mount(None, path, None, flags)


def _build_jail(payload):
    """Read-only root, hidden home dirs, fresh tmpfs for /tmp and /dev/shm; returns the workdir."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    tmp_mb = payload["limits"]["tmpfs_mb"]
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmp_mb}m,nr_inodes=20000,mode=1777")
    # Stage the Python installation dirs that live under a hidden dir before hiding it.
    staged = []
    for i, path in enumerate(payload["expose"]):
        stage = f"/tmp/.expose{i}"
        os.mkdir(stage)
        _mount(path, stage, None, MS_BIND | MS_REC)
        staged.append((stage, path))
    for hidden in payload["hide"]:
        _mount("tmpfs", hidden, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for stage, path in staged:
        os.makedirs(path, mode=0o755, exist_ok=True)
        _mount(stage, path, None, MS_MOVE)
        os.rmdir(stage)
    # Everything else read-only: the root and the mounts under it that a program could write to.
    _remount_readonly("/")
    for _stage, path in staged:
        _remount_readonly(path, MS_NOSUID | MS_NODEV)
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=1777")
    workdir = "/tmp/work"
    os.mkdir(workdir, 0o700)
    return workdir


def _child(payload, workdir, script):
    lim = payload["limits"]
    os.close(payload["status_fd"])
    fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd, 0)
    os.close(fd)
    resource.setrlimit(resource.RLIMIT_CPU, (lim["cpu_s"], lim["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, (lim["memory_b"], lim["memory_b"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (lim["fsize_b"], lim["fsize_b"]))
    resource.setrlimit(resource.RLIMIT_NPROC, (lim["nproc"], lim["nproc"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    uid = payload["uid"]
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    os.chdir(workdir)
    py = payload["python"]
    os.execve(py, [py, "-s", "-u", script], payload["env"])


def main():
    payload = json.loads(sys.stdin.read())
    status = os.fdopen(payload["status_fd"], "w")
    try:
        workdir = _build_jail(payload) if payload["mount"] else payload["workdir"]
        for name, text in {**payload["files"], "main.py": payload["code"]}.items():
            path = os.path.join(workdir, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        if payload["uid"] is not None:
            for root, dirs, files in os.walk(workdir):
                for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                    os.chown(name, payload["uid"], payload["uid"])
    except Exception as e:  # the jail could not be built: report, never run unconfined
        status.write(json.dumps({"boot_error": f"{type(e).__name__}: {e}"}))
        status.close()
        sys.exit(70)
    pid = os.fork()
    if pid == 0:
        try:
            _child(payload, workdir, os.path.join(workdir, "main.py"))
        except BaseException as e:  # exec failed
            os.write(2, f"sandbox: could not start python: {e}\n".encode())
        os._exit(127)
    _, wstatus = os.waitpid(pid, 0)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = {"cpu_s": usage.ru_utime + usage.ru_stime}
    if os.WIFSIGNALED(wstatus):
        report["signal"] = os.WTERMSIG(wstatus)
    else:
        report["returncode"] = os.WEXITSTATUS(wstatus)
    status.write(json.dumps(report))
    status.close()


if __name__ == "__main__":
    main()
