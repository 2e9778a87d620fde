"""The chunked vocabulary projection (issue 29.3): no full [batch, columns, vocab] logits, same numbers.

A micro-batch of four ~850-token SFT demonstrations over smollm2's 49k vocabulary is 670 MB of fp32
logits, and as much again for the log-softmax and each gradient. ``head_logprobs`` computes them in
column chunks recomputed in the backward; these tests check the log-probs, the entropy and the LoRA
gradients equal the whole-logits path on the real model, and that the chunks really bound memory.
"""

from __future__ import annotations

import pytest
import torch

from research_agent.train import loss as loss_mod
from research_agent.train.loss import head_logprobs, pad_batch, sft_loss, token_logprobs


@pytest.fixture(scope="module")
def lora_model():
    from peft import LoraConfig, get_peft_model

    from research_agent.inference.models import load_model

    base, tok = load_model("smollm2-135m", device="cpu", progress=False)
    torch.manual_seed(0)
    model = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0,
                                            init_lora_weights=False))
    return model, tok


def _batch(tok):
    texts = ["The capital of Peru is Lima, a city on the Pacific coast.",
             "Search: population of Lithuania. Result: about 2.8 million people live there."]
    seqs = [tok(t)["input_ids"] for t in texts]
    masks = [[0] * 4 + [1] * (len(s) - 4) for s in seqs]
    return pad_batch(seqs, masks, tok.pad_token_id or 0)


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("with_mask", [True, False])
def test_chunked_head_equals_whole_logits(lora_model, monkeypatch, with_mask):
    model, tok = lora_model
    ids, attn, lmask = _batch(tok)
    results = {}
    for name, budget in (("whole", 1 << 40), ("chunked", 3 * 49152)):  # 3 columns of 1 row per chunk
        monkeypatch.setattr(loss_mod, "LOGIT_CHUNK_ELEMENTS", budget)
        model.zero_grad(set_to_none=True)
        lp, ent = token_logprobs(model, ids, attn, with_entropy=True, loss_mask=lmask if with_mask else None)
        (lp * lmask).sum().backward()
        results[name] = (lp.detach(), ent, _grads(model))
    (lp_w, ent_w, g_w), (lp_c, ent_c, g_c) = results["whole"], results["chunked"]
    assert torch.allclose(lp_w, lp_c, atol=1e-5)
    assert torch.allclose(ent_w, ent_c, atol=1e-4)
    assert g_w.keys() == g_c.keys() and g_w
    for n in g_w:  # the same sums in another order: equal up to float32 rounding
        rel = float((g_w[n] - g_c[n]).norm() / g_w[n].norm().clamp(min=1e-12))
        assert rel < 1e-3, (n, rel)  # a wrong chunk would be O(1)


def test_token_logprobs_agrees_with_the_models_own_logits(lora_model):
    """The split into decoder stack + output projection is the model: same values as model(...).logits."""
    model, tok = lora_model
    ids, attn, _ = _batch(tok)
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, attn)
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
        ref = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    assert torch.allclose(lp[:, 1:], ref, atol=1e-5)


def test_chunks_bound_the_logits_held_for_the_backward(monkeypatch):
    """Saved tensors of the autograd graph: the whole path keeps [rows, cols, vocab]-sized ones, the
    chunked path none larger than one chunk's inputs."""
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 5000, bias=False)
    hidden = torch.randn(2, 64, 16, requires_grad=True)
    targets = torch.randint(0, 5000, (2, 64))
    biggest = {}
    for name, budget in (("whole", 1 << 40), ("chunked", 2 * 8 * 5000)):
        monkeypatch.setattr(loss_mod, "LOGIT_CHUNK_ELEMENTS", budget)
        sizes = []

        def pack(t, sizes=sizes):
            sizes.append(t.numel())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            lp, _ = head_logprobs(head, hidden, targets)
        lp.sum().backward()
        biggest[name] = max(sizes)
    assert biggest["whole"] >= 2 * 64 * 5000
    assert biggest["chunked"] <= 2 * 8 * 5000


def test_sft_loss_is_unchanged_by_chunking(lora_model, monkeypatch):
    model, tok = lora_model
    ids, attn, lmask = _batch(tok)
    with torch.no_grad():
        monkeypatch.setattr(loss_mod, "LOGIT_CHUNK_ELEMENTS", 1 << 40)
        whole = float(sft_loss(model, ids, attn, lmask))
        monkeypatch.setattr(loss_mod, "LOGIT_CHUNK_ELEMENTS", 49152)
        chunked = float(sft_loss(model, ids, attn, lmask))
    assert abs(whole - chunked) < 1e-5


def test_an_sft_step_in_padding_light_passes_equals_one_padded_pass(lora_model):
    """Rows of unlike length run in separate passes, each divided by the step's token count: the
    step's loss and LoRA gradients are those of the one padded pass (the layout changes only cost)."""
    from research_agent.train.batching import chunk_lengths
    from research_agent.train.config import TrainConfig
    from research_agent.train.distributed import Ranks
    from research_agent.train.sft import _step

    model, tok = lora_model
    texts = ["Search: Peru. Result: Lima.", "Capital? Lima.",
             "Search: population of Lithuania. Result: " + "about 2.8 million people live there; " * 12]
    seqs = [tok(t)["input_ids"] for t in texts]
    examples = [(s, [0] * 3 + [1] * (len(s) - 3)) for s in seqs]
    rows = [0, 1, 2]
    assert len(chunk_lengths([len(s) for s in seqs], 3)) > 1  # the long row runs alone
    pad = tok.pad_token_id or 0
    model.zero_grad(set_to_none=True)
    ids, attn, lmask = pad_batch(seqs, [m for _, m in examples], pad)
    whole = sft_loss(model, ids, attn, lmask)
    whole.backward()
    g_whole = _grads(model)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    loss, tokens = _step(model, opt, examples, rows, pad, "cpu", Ranks(), TrainConfig(stage="sft"))
    g_step = _grads(model)
    assert tokens == sum(sum(m) for _, m in examples)
    whole = float(whole.detach())
    assert abs(loss - whole) < 1e-4 * max(1.0, abs(whole))
    assert g_whole.keys() == g_step.keys() and g_whole
    for n in g_whole:  # the same sum in another order: equal up to float32 rounding
        rel = float((g_whole[n] - g_step[n]).norm() / g_whole[n].norm().clamp(min=1e-12))
        assert rel < 1e-3, (n, rel)
