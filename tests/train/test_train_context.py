"""Training on managed-context trajectories (B4): each step is its own sequence (its prompt, its
completion), loss only on the completion, the trajectory's advantage on every step; SFT renders
managed records into exactly the prompts the agent built."""

from __future__ import annotations

import json

import pytest
import torch

from research_agent.agent import AgentConfig, ResearchAgent
from research_agent.train import rl
from research_agent.train.config import TrainConfig
from research_agent.train.rl import policy_update, setup_lora
from research_agent.train.sft import render_examples, train_sft
from synth.trajectories import export_sft, load_trajectories
from tests.doubles import ScriptedPolicy as _Scripted


def ScriptedPolicy(tokenizer, turns):  # noqa: N802
    return _Scripted(tokenizer, turns, logprob=-0.5)


MANAGED = AgentConfig(context="managed", context_tokens=700, max_new_tokens=48, search_k=1, snippet_chars=120)


def _trajectories(tok, browser, config=MANAGED):
    def run(answer):
        turns = ["<notes>look up France</notes><search>capital of France</search>",
                 f"<notes>capital {answer} [factbook/fr#0]</notes><answer>{answer}</answer>"]
        return ResearchAgent(ScriptedPolicy(tok, turns), browser.fork(), config).run(
            "What is the capital of France?", gold={"answers": ["Paris"]})

    return [run("Paris"), run("Lyon")]


def _capture_units(monkeypatch):
    """Record the (ids, mask) sequences the update lays out for the model, and the plan it made."""
    seen = []
    real = rl.plan_update

    def spy(units, micro_batch, **kw):
        plan = real(units, micro_batch, **kw)
        seen.append((list(units), plan))
        return plan

    monkeypatch.setattr(rl, "plan_update", spy)
    return seen


@pytest.mark.model
def test_managed_update_trains_each_step_on_its_own_prompt(small_browser, monkeypatch):
    cfg = TrainConfig(lr=1e-3, compute={"micro_batch": 2}, kl_coef=0.05)
    model, tok = setup_lora(cfg, progress=False)
    trajs = _trajectories(tok, small_browser)
    for t in trajs:
        t.check_consistency()
        assert t.managed and t.turns == 2
    seen = _capture_units(monkeypatch)
    lora = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr)
    model.train()
    stats = policy_update(model, opt, params, trajs, [1.0, -1.0], [0, 1], cfg, tok.pad_token_id)
    # four sequences (2 steps × 2 trajectories): each step's prompt + completion, loss only where the
    # model wrote; every pass holds at most micro_batch rows
    (units, plan), = seen
    expected = [(st.prompt_ids + st.completion_ids, [0] * len(st.prompt_ids) + [1] * len(st.completion_ids))
                for t in trajs for st in t.steps]
    assert sorted(units) == sorted(expected)
    assert sorted(i for blk in plan for c in blk.chunks for i in c) == [0, 1, 2, 3]
    assert all(len(c) <= 2 for blk in plan for c in blk.chunks) and all(len(blk.prefixes) <= 2 for blk in plan)
    assert stats["tokens"] == sum(t.generated_tokens for t in trajs)
    assert torch.isfinite(torch.tensor(stats["loss"]))
    assert any(not torch.equal(p, lora[n]) for n, p in model.named_parameters() if "lora_" in n)
    # the rewarded answer gained probability under the prompt it was written from
    from research_agent.train.loss import pad_batch, token_logprobs

    def answer_logprob(t):
        ids, mask = t.sequences()[-1]
        ids, attn, lmask = pad_batch([ids], [mask], tok.pad_token_id)
        return float((token_logprobs(model, ids, attn)[0] * lmask).sum())

    model.eval()
    with torch.no_grad():
        after = answer_logprob(trajs[0]) - answer_logprob(trajs[1])
        with model.disable_adapter():
            before = answer_logprob(trajs[0]) - answer_logprob(trajs[1])
    assert after > before


def test_loss_ignores_prompt_tokens_of_managed_steps(small_browser, smol):
    """Perturbation: moving the log-probs of prompt tokens changes nothing, of completion tokens it does."""
    from research_agent.train.loss import pad_batch, policy_gradient_loss

    _, tok = smol
    traj = _trajectories(tok, small_browser)[0]
    seqs = traj.sequences()
    ids, _, lmask = pad_batch([s for s, _ in seqs], [m for _, m in seqs], tok.pad_token_id)
    old = -torch.rand(ids.shape)
    ref = old - 0.1
    adv = torch.tensor([0.7] * len(seqs))

    def loss(lp):
        return float(policy_gradient_loss(lp, old, ref, adv, lmask, clip_ratio=0.2)[0])

    prompt_only = old.clone()
    prompt_only[lmask == 0] -= 1.0  # every prompt token of every step, observations and notes included
    completion_only = old.clone()
    completion_only[lmask == 1] -= 0.1
    assert loss(prompt_only) == loss(old)
    assert loss(completion_only) != loss(old)
    assert int(lmask.sum()) == traj.generated_tokens


def test_full_context_update_is_unchanged(small_browser, smol, monkeypatch):
    """A full-context trajectory is still one sequence: its prompt and its whole stream (stopped before
    any forward pass: only what reaches the model is compared)."""
    _, tok = smol
    trajs = _trajectories(tok, small_browser, AgentConfig(search_k=1, snippet_chars=120))
    seen = _capture_units(monkeypatch)

    class Stop(Exception):
        pass

    monkeypatch.setattr(rl, "prefix_pass", lambda *a, **k: (_ for _ in ()).throw(Stop()))
    with pytest.raises(Stop):
        policy_update(None, torch.optim.SGD([torch.zeros(1, requires_grad=True)]), [], trajs, [1.0, -1.0], [0, 1], TrainConfig(compute={"micro_batch": 2}), tok.pad_token_id)
    (units, _), = seen
    assert sorted(units) == sorted((t.prompt_ids + t.token_ids, [0] * len(t.prompt_ids) + t.token_mask) for t in trajs)


def test_managed_synthesis_exports_sft_examples_equal_to_what_the_agent_saw(tmp_path, small_corpus_dir, smol):
    """Reference demonstrations in managed context → SFT export → the student renders the same prompts."""
    from synth.__main__ import main as synth_main

    _, tok = smol
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps({"id": f"c{i}", "question": f"What is the capital of {c}?", "answers": [a],
                                      "split": "train"}) + "\n"
                          for i, (c, a) in enumerate([("France", "Paris"), ("Spain", "Madrid")])))
    out = tmp_path / "shards"
    assert synth_main(["trajectories", "--qa", str(qa), "--out", str(out), "--policy", "reference", "--model",
                       "smollm2-135m", "--corpus", str(small_corpus_dir), "--context", "managed",
                       "--context-tokens", "700", "--max-turns", "4", "--max-new-tokens", "64", "--concurrency", "1"]) == 0
    trajs = sorted(load_trajectories(out), key=lambda t: t.id)
    assert len(trajs) == 2 and all(t.managed and t.answered for t in trajs)
    for t in trajs:
        t.check_consistency()
    export_sft(trajs, tmp_path / "sft.jsonl")
    records = [json.loads(x) for x in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert all(r["context"] == "managed" for r in records)
    cfg = TrainConfig(stage="sft", tasks=str(tmp_path / "sft.jsonl"), out=str(tmp_path / "sft"),
                      agent={"context": "managed", "context_tokens": 700, "max_new_tokens": 64}, epochs=1,
                      compute={"micro_batch": 2}, lr=1e-3, checkpoints={"every": 100})
    for t, r in zip(trajs, records, strict=True):
        examples = render_examples(tok, r, cfg.agent)
        assert [ids for ids, _ in examples] == [s.prompt_ids + s.completion_ids for s in t.steps]
        assert [m for _, m in examples] == [[0] * len(s.prompt_ids) + [1] * len(s.completion_ids) for s in t.steps]
    summary = train_sft(cfg, progress=False)
    assert summary["examples"] == sum(t.turns for t in trajs) and summary["skipped"] == 0
    assert torch.isfinite(torch.tensor(summary["final"]["loss"]))
