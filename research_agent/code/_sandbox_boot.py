"""Sandbox bootstrap: prepares the jail, then forks the untrusted program and reports how it ended.

Run by ``sandbox.run_python`` as ``python -I -S _sandbox_boot.py`` (stdlib only, no site import:
it starts fast and trusts nothing from the environment). It reads one JSON payload from stdin:

    {"code", "files", "workdir", "mount", "uid", "python", "env", "hide", "expose", "limits", "status_fd"}

With ``mount`` (inside fresh mount + pid + net namespaces) it makes the whole filesystem read-only,
hides the caller's home under an empty tmpfs and gives the program a fresh tmpfs at /tmp as its
working directory, so nothing it writes outlives it or lands outside; the Python environment's
directories that lay under those (``expose``: a virtualenv under /tmp, pyenv or uv under a home) are
bind-mounted back into place, read-only. It then forks: the child sets rlimits, drops to an unprivileged uid (so
RLIMIT_NPROC binds even though we run as root) and execs Python (``python``, the caller's unresolved interpreter) on the code; if the exec fails
(an unprivileged uid may not read that Python), the failure is reported as a boot error. The parent stays as
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


# Kernel filesystems, left as they are: their files are guarded by permissions, not by the mount.
_KERNEL_DIRS = ("/proc", "/sys", "/dev")


def _inside(path, dirs):
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def _mount_points():
    """Every mount point in this mount namespace (field 5 of mountinfo, octal escapes undone)."""
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        fields = [line.split() for line in f]
    unescape = lambda s: s.encode().decode("unicode_escape").encode("latin-1").decode()  # noqa: E731
    return sorted({unescape(f[4]) for f in fields if len(f) > 4})


def _remount_all_readonly(writable, exposed):
    """Remount every mount read-only but the fresh ``writable`` ones and the kernel's: not only the
    root, since another filesystem mounted under it (/home, /data, /work) would stay writable."""
    # recognised by filesystem, not by path: a virtualenv put back under /tmp is not /tmp
    keep = {os.stat(path).st_dev for path in writable if os.path.isdir(path)}
    for path in _mount_points():
        if _inside(path, _KERNEL_DIRS) or not os.path.exists(path):
            continue  # the kernel's, or overmounted by a fresh or hiding tmpfs
        if os.stat(path).st_dev in keep or os.statvfs(path).f_flag & 1:  # writable on purpose, or ST_RDONLY
            continue
        _remount_readonly(path, MS_NOSUID | MS_NODEV if path in exposed else 0)


def _build_jail(payload):
    """Read-only root, hidden home dirs, fresh tmpfs for /tmp and /dev/shm, the Python environment put
    back read-only where it was; returns the workdir."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    # Hold the environment's directories before anything is mounted over them: afterwards they are
    # reachable only through these descriptors (/proc/self/fd/N), e.g. a virtualenv under /tmp.
    held = [(os.open(path, os.O_PATH | os.O_DIRECTORY), path) for path in payload["expose"]]
    tmp_mb = payload["limits"]["tmpfs_mb"]
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmp_mb}m,nr_inodes=20000,mode=1777")
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=1777")
    hidden = [h for h in payload["hide"] if os.path.isdir(h)]  # a home under /tmp is gone already
    for path in hidden:
        _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for fd, path in held:
        os.makedirs(path, mode=0o755, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        os.close(fd)
    # Everything else read-only: the root, every mount under it, the hiding tmpfs, the environment.
    _remount_all_readonly(("/tmp", "/dev/shm"), set(payload["expose"]))
    workdir = "/tmp/work"
    os.mkdir(workdir, 0o700)
    return workdir


PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _libc_call(name, *args):
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if getattr(_libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}{args[:2]} failed: {os.strerror(err)}")


def _drop_capabilities():
    """Leave root of the sandbox's user namespace without capabilities, now and after exec: else the
    program could unmount the tmpfs that hides the home, or remount the filesystem read-write."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        _libc_call("prctl", PR_CAPBSET_DROP, cap, 0, 0, 0)
    _libc_call("prctl", PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    _libc_call("capset", ctypes.byref(_CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)), (_CapData * 2)())


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
    elif payload["mount"]:  # userns: root of its own namespace, with all of that namespace's capabilities
        _drop_capabilities()
    _libc_call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # no setuid binary gives privileges back
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
    # Closed on exec: it reads EOF once the program runs, or why the child could not start it.
    exec_r, exec_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        os.close(exec_r)
        try:
            _child(payload, workdir, os.path.join(workdir, "main.py"))
        except BaseException as e:  # exec failed
            os.write(exec_w, f"could not start {payload['python']} as uid {os.getuid()}: {e}".encode())
        os._exit(127)
    os.close(exec_w)
    with os.fdopen(exec_r, "rb") as f:
        exec_error = f.read().decode("utf-8", "replace")
    _, wstatus = os.waitpid(pid, 0)
    if exec_error:
        status.write(json.dumps({"boot_error": exec_error}))
        status.close()
        sys.exit(70)
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
