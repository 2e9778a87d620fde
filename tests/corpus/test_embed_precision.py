"""The embedder's precision: bfloat16 batches only where the CPU has bfloat16 arithmetic, float32
single queries, the same vectors either way to retrieval's resolution, and a clear error for a bad
setting."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import corpus.embed as embed
from corpus.embed import BF16_MIN_BATCH, Embedder, EmbedderError, embed_dtype

TEXTS = [
    f"Peru\nThe capital of Peru is Lima. It lies on the coast of the Pacific Ocean, paragraph {i}, "
    "with more words about rivers, mountains, trade, population and the history of the region."
    for i in range(2 * BF16_MIN_BATCH)
]


def test_auto_follows_the_cpu_and_the_override_wins(monkeypatch):
    monkeypatch.delenv("RESEARCH_AGENT_EMBED_DTYPE", raising=False)
    monkeypatch.setattr(embed, "cpu_has_native_bf16", lambda: True)
    assert embed_dtype("cpu") == "bfloat16"
    assert embed_dtype("cuda:0") == "float32"
    monkeypatch.setattr(embed, "cpu_has_native_bf16", lambda: False)
    assert embed_dtype("cpu") == "float32"
    monkeypatch.setenv("RESEARCH_AGENT_EMBED_DTYPE", "bfloat16")
    assert embed_dtype("cpu") == "bfloat16"
    monkeypatch.setenv("RESEARCH_AGENT_EMBED_DTYPE", "fp8")
    with pytest.raises(EmbedderError, match="RESEARCH_AGENT_EMBED_DTYPE='fp8'"):
        embed_dtype("cpu")


def test_cpu_flags_are_read_from_proc_cpuinfo():
    flags = open("/proc/cpuinfo").read()
    assert embed.cpu_has_native_bf16() == ("avx512_bf16" in flags or "amx_bf16" in flags)


def _encode_in(dtype: str, texts: list[str], monkeypatch) -> tuple[np.ndarray, list[torch.dtype]]:
    """Vectors for ``texts`` with the embedder set to ``dtype``, and the dtype each Linear layer computed in."""
    monkeypatch.setenv("RESEARCH_AGENT_EMBED_DTYPE", dtype)
    emb = Embedder()
    seen: list[torch.dtype] = []
    layer = next(m for m in emb.model.modules() if isinstance(m, torch.nn.Linear))
    hook = layer.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    try:
        return emb.encode(texts, batch_size=BF16_MIN_BATCH), seen
    finally:
        hook.remove()


def test_bfloat16_batches_give_float32_vectors_that_match(monkeypatch):
    ref, ref_dtypes = _encode_in("float32", TEXTS, monkeypatch)
    low, low_dtypes = _encode_in("bfloat16", TEXTS, monkeypatch)
    assert set(ref_dtypes) == {torch.float32} and set(low_dtypes) == {torch.bfloat16}
    assert low.dtype == np.float32 and low.shape == ref.shape
    assert np.allclose(np.linalg.norm(low, axis=1), 1.0, atol=1e-5)
    cos = (low * ref).sum(axis=1)
    assert cos.min() > 0.999  # bfloat16's rounding, not a different vector
    assert not np.array_equal(low, ref)  # and it did compute in bfloat16


def test_a_single_query_stays_float32(monkeypatch):
    _, dtypes = _encode_in("bfloat16", TEXTS[:1], monkeypatch)
    assert set(dtypes) == {torch.float32}
