"""Sandbox bootstrap: prepares the jail, then forks the untrusted program and reports how it ended.

Run by ``sandbox.run_python`` as ``python -I -S _sandbox_boot.py`` (stdlib only, no site import:
it starts fast and trusts nothing from the environment). It reads one JSON payload from stdin:

    {"code", "files", "workdir", "mount", "uid", "python", "env", "expose", "limits", "status_fd",
     "cgroup_procs"}

It first joins the run's cgroup (``cgroup_procs``), so the program's processes are bounded together.
With ``mount`` (inside fresh mount + pid + net namespaces) it builds a new root on a tmpfs that holds
only what Python needs — the system's /usr and libraries, the Python environment's directories
(``expose``) at their own paths, a minimal /etc, a few devices, the run's /proc — pivots into it, and
makes every mount read-only except a fresh tmpfs at /tmp (the working directory) and /dev/shm; nothing
else of the host (other checkouts, the home, /etc/shadow) is there, and nothing the program writes
outlives it. It then forks: the child sets rlimits, drops to an unprivileged uid (so
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


# The run's own /proc, left as it is: its files are guarded by permissions, not by the mount.
_KERNEL_DIRS = ("/proc",)


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


# What a program needs of the host, bound read-only into its new root where present. Symlinks
# among them (a merged /usr's /bin -> usr/bin) are copied as symlinks.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The part of /etc that the dynamic loader, the C library and common Python libraries read: files
# are copied, directories bound read-only, so nothing else of the host's /etc (shadow, hostname,
# machine-id, ssl/private) is there.
ETC_ENTRIES = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "nsswitch.conf", "hosts",
    "host.conf", "protocols", "services", "mime.types", "ssl/certs", "ssl/openssl.cnf",
    "ca-certificates", "alternatives", "fonts", "os-release",
)
DEVICES = ("null", "zero", "full", "random", "urandom")
SYS_DIRS = ("/sys/devices/system/cpu",)  # CPU counts (os.cpu_count, BLAS thread pools)
MNT_DETACH = 2
# pivot_root(2) has no C library wrapper; its system call number per machine
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}


def _copy_etc(root, uid):
    import shutil

    os.mkdir(root + "/etc", 0o755)
    for name in ETC_ENTRIES:
        src, dst = "/etc/" + name, root + "/etc/" + name
        try:
            os.makedirs(os.path.dirname(dst), 0o755, exist_ok=True)
            if os.path.islink(src):
                os.symlink(os.readlink(src), dst)
            elif os.path.isdir(src):
                os.mkdir(dst, 0o755)
                _mount(src, dst, None, MS_BIND | MS_REC)
            elif os.path.isfile(src):
                shutil.copyfile(src, dst)
        except OSError:
            continue  # an unreadable entry is left out, as a missing one is
    user = uid if uid is not None else os.getuid()
    with open(root + "/etc/passwd", "w") as f:
        f.write("root:x:0:0:root:/root:/usr/sbin/nologin\n")
        if user:
            f.write(f"sandbox:x:{user}:{user}:sandbox:/tmp/work:/usr/sbin/nologin\n")
        f.write("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
    with open(root + "/etc/group", "w") as f:
        f.write("root:x:0:\n" + (f"sandbox:x:{user}:\n" if user else "") + "nogroup:x:65534:\n")


def _pivot_root(root):
    """Make ``root`` the root of this mount namespace and detach the host's: nothing outside is reachable."""
    os.chdir(root)
    number = _SYS_PIVOT_ROOT.get(os.uname().machine)
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if number is not None and _libc.syscall(number, b".", b".") == 0:
        if _libc.umount2(b".", MNT_DETACH) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"detaching the host's root failed: {os.strerror(err)}")
    else:
        # no pivot_root here (an initramfs root, or an unknown machine): chroot into it; the host's
        # root stays only as mounts the program, without capabilities, cannot reach
        os.chroot(".")
    os.chdir("/")


def _build_jail(payload):
    """A new root that holds only what Python needs, read-only: the system's /usr and libraries, the
    Python environment's directories (``expose``) at their own paths, a minimal /etc, a few devices,
    /proc of the run's pid namespace, and fresh tmpfs for /tmp and /dev/shm. The host's other files
    (other checkouts and their .git, the home, /etc/shadow, /opt, /srv) are not in it. Returns the workdir."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    exposed = list(payload["expose"])
    sources = [p for p in SYSTEM_DIRS if os.path.isdir(p) and not os.path.islink(p)]
    sources += [p for p in (*exposed, *SYS_DIRS) if os.path.isdir(p)]
    # Held before anything is mounted over them (the new root is built on /tmp, where a virtualenv may live).
    held = [(os.open(p, os.O_PATH | os.O_DIRECTORY), p) for p in sources]
    root = "/tmp"
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=8m,nr_inodes=20000,mode=755")
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            os.symlink(os.readlink(path), root + path)
    # the fresh /tmp first: an environment that lives under /tmp is bound on top of it below
    tmp_mb = payload["limits"]["tmpfs_mb"]
    os.mkdir(root + "/tmp", 0o1777)
    _mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmp_mb}m,nr_inodes=20000,mode=1777")
    for fd, path in held:
        os.makedirs(root + path, mode=0o755, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", root + path, None, MS_BIND | MS_REC)
        os.close(fd)
    _copy_etc(root, payload["uid"])
    os.mkdir(root + "/dev", 0o755)
    _mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID, "size=64k,nr_inodes=64,mode=755")
    for name in DEVICES:
        if os.path.exists("/dev/" + name):
            open(root + "/dev/" + name, "w").close()
            _mount("/dev/" + name, root + "/dev/" + name, None, MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, root + "/dev/" + name)
    os.mkdir(root + "/dev/shm", 0o1777)
    _mount("tmpfs", root + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=1777")
    os.mkdir(root + "/proc", 0o555)
    _mount("/proc", root + "/proc", None, MS_BIND | MS_REC)  # the run's own, from unshare --mount-proc
    _pivot_root(root)
    # Everything read-only but the fresh /tmp and /dev/shm: the new root, /dev, every bind under them.
    _remount_all_readonly(("/tmp", "/dev/shm"), set(exposed))
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
    program could unmount or remount its read-only binds read-write (and write to the host's /usr)."""
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
    # Join the run's cgroup first (itself: "0"), before the jail hides /sys/fs/cgroup and before any
    # process of the program exists; every process forked from here on is counted in it.
    cgroup_error = None
    for procs in payload.get("cgroup_procs") or []:
        try:
            with open(procs, "w") as f:
                f.write("0")
        except OSError as e:
            cgroup_error = f"could not join {procs}: {e.strerror}"
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
    if cgroup_error:
        report["cgroup_error"] = cgroup_error
    if os.WIFSIGNALED(wstatus):
        report["signal"] = os.WTERMSIG(wstatus)
    else:
        report["returncode"] = os.WEXITSTATUS(wstatus)
    status.write(json.dumps(report))
    status.close()


if __name__ == "__main__":
    main()
