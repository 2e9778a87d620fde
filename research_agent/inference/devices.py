"""Where the model runs and in what precision: one meaning of ``--device`` and ``--dtype`` everywhere.

``ask``, ``serve``, ``train``, ``eval`` and ``synth`` take the same two flags. ``auto`` picks CUDA
where torch sees a GPU (in bfloat16 where the GPU supports it) and the CPU in float32 otherwise, so
a laptop and a GPU node run the same command. Asking for CUDA where there is none is one error
before any model loads, not a traceback from deep inside torch. Every tensor the policy, the
prefix cache, the continuous batcher and the trainer create is put on ``model_device(model)``.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

DEVICES = "auto, cpu, cuda or cuda:N"
DTYPES = ("auto", "float32", "bfloat16", "float16")


class DeviceError(ValueError):
    """A device or dtype that this machine cannot give."""


def check_device_spec(spec: str) -> str:
    """``spec`` normalised, or ``DeviceError`` for something that is no device name (no torch needed)."""
    spec = str(spec).strip().lower()
    if spec in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:\d+", spec):
        return spec
    raise DeviceError(f"--device {spec!r}: use {DEVICES}")


def check_dtype_spec(spec: str) -> str:
    spec = str(spec).strip().lower()
    if spec not in DTYPES:
        raise DeviceError(f"--dtype {spec!r}: use one of {', '.join(DTYPES)}")
    return spec


def resolve_device(spec: str = "auto") -> Any:
    """The ``torch.device`` for ``spec``; CUDA that is not there is a ``DeviceError`` saying why."""
    import torch

    spec = check_device_spec(spec)
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        raise DeviceError(
            f"--device {spec}: torch {torch.__version__} sees no CUDA GPU here ({build}); "
            "use --device cpu (or auto), or install a CUDA build of torch on a GPU machine"
        )
    index = int(spec.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise DeviceError(f"--device {spec}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                          f"numbered from 0")
    return torch.device(spec if ":" in spec else "cuda")


def resolve_dtype(spec: str = "auto", device: Any = None) -> Any:
    """The ``torch.dtype`` for ``spec`` on ``device``: auto is bfloat16 on a CUDA GPU that supports it,
    float32 otherwise (the CPU decode path, oneDNN, is fastest in float32)."""
    import torch

    spec = check_dtype_spec(spec)
    if spec == "auto":
        if device is not None and torch.device(device).type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return getattr(torch, spec)


def model_device(model: Any) -> Any:
    """The device of ``model``'s weights (a transformers model, a ``PeftModel`` or any module)."""
    import torch

    try:
        return next(model.parameters()).device
    except (StopIteration, AttributeError):
        return torch.device("cpu")


def use_device(device: str = "auto", dtype: str = "auto") -> tuple[Any, Any]:
    """Check ``--device`` / ``--dtype`` before anything loads and return (torch device, dtype); on a
    GPU the embedders (corpus search, citation checks, the judge) follow the model there."""
    import os

    where = resolve_device(device)
    precision = resolve_dtype(dtype, where)
    if where.type == "cuda":
        os.environ.setdefault("RESEARCH_AGENT_EMBED_DEVICE", str(where))
    return where, precision


def add_device_flags(parser: argparse.ArgumentParser, *, quantize: bool = False) -> None:
    """``--device`` and ``--dtype``; with ``quantize``, also ``--quantize`` (inference commands only:
    the trainer's rollouts must decode with the weights its update differentiates)."""
    if quantize:
        parser.add_argument("--quantize", default="none", type=_flag(_check_quantize),
                            help="decode with int8 copies of the weights on the CPU (none or int8): up to 1.7x "
                                 "faster per token for qwen2.5-coder-0.5b, accuracy unchanged on SQuAD-open "
                                 "(docs/benchmarks.md); prompt prefills keep the model's own precision")
    parser.add_argument("--device", default="auto", type=_flag(check_device_spec),
                        help=f"where the model runs: {DEVICES} (auto: a CUDA GPU if torch sees one, else the CPU)")
    parser.add_argument("--dtype", default="auto", type=_flag(check_dtype_spec),
                        help="weights' precision: auto (bfloat16 on a GPU that has it, else float32), "
                             "float32, bfloat16 or float16")


def _check_quantize(spec: str) -> str:
    from .fast_linear import check_quantize

    try:
        return check_quantize(spec)
    except ValueError as e:
        raise DeviceError(str(e)) from None


def _flag(check):
    def parse(value: str) -> str:
        try:
            return check(value)
        except DeviceError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    parse.__name__ = check.__name__
    return parse
