"""The trainer on the real fast model: LoRA moves and the base does not, resume, SFT, bad input."""

from __future__ import annotations

import json
import time

import pytest
import torch
from safetensors.torch import load_file

from research_agent.agent import ResearchAgent
from research_agent.configs import build
from research_agent.train import rl
from research_agent.train.checkpoint import FinishedStep, ResumeError, checkpoints, save_checkpoint
from research_agent.train.config import TrainConfig, load_config
from research_agent.train.rl import SafeReward, policy_update, setup_lora, train_rl
from research_agent.train.sft import render_example, train_sft
from tests.doubles import ScriptedPolicy as _Scripted


def ScriptedPolicy(tokenizer, turns):  # noqa: N802
    return _Scripted(tokenizer, turns, logprob=-0.5)


def _trajectories(tok, browser):
    good = ResearchAgent(ScriptedPolicy(tok, ["<search>capital of France</search>", "<answer>Paris</answer>"]),
                         browser.fork()).run("What is the capital of France?", gold={"answers": ["Paris"]})
    bad = ResearchAgent(ScriptedPolicy(tok, ["<search>capital of France</search>", "<answer>Lyon</answer>"]),
                        browser.fork()).run("What is the capital of France?", gold={"answers": ["Paris"]})
    return [good, bad]


# per-step advantages exercise the per-trajectory path's code and more; the per-trajectory case is slow-only
@pytest.mark.model
@pytest.mark.parametrize("adv", [pytest.param([1.0, -1.0], id="per-trajectory", marks=pytest.mark.slow),
                                 pytest.param([[0.0, 1.0], [0.0, -1.0]], id="per-step")])
def test_one_update_moves_lora_weights_and_no_base_weight(small_browser, adv):
    cfg = TrainConfig(lr=1e-3, compute={"micro_batch": 2}, kl_coef=0.05)
    model, tok = setup_lora(cfg, progress=False)
    trajs = _trajectories(tok, small_browser)
    lora = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    base = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr)
    model.train()
    stats = policy_update(model, opt, params, trajs, adv, [0, 1], cfg, tok.pad_token_id)
    assert stats["tokens"] == sum(t.generated_tokens for t in trajs)
    assert all(p.requires_grad for n, p in model.named_parameters() if "lora_" in n)
    moved = [n for n, p in model.named_parameters() if "lora_" in n and not torch.equal(p, lora[n])]
    assert moved, "no LoRA weight changed"
    assert all(torch.equal(p, base[n]) for n, p in model.named_parameters() if "lora_" not in n)
    assert torch.isfinite(torch.tensor(stats["loss"]))
    # the rewarded answer gained probability relative to the punished one
    from research_agent.train.loss import pad_batch, token_logprobs

    def answer_logprob(t):
        ids, attn, mask = pad_batch([t.prompt_ids + t.token_ids], [[0] * len(t.prompt_ids) + t.token_mask],
                                    tok.pad_token_id)
        last = len(t.prompt_ids) + len(t.token_ids) - len(t.steps[-1].completion_ids)
        mask[0, :last] = 0  # only the answer turn, where the two trajectories differ
        return float((token_logprobs(model, ids, attn)[0] * mask).sum())

    model.eval()
    with torch.no_grad():
        after = answer_logprob(trajs[0]) - answer_logprob(trajs[1])
        with model.disable_adapter():
            before = answer_logprob(trajs[0]) - answer_logprob(trajs[1])
    assert after > before


@pytest.mark.model
@pytest.mark.slow  # 27 s; the default suite checks the same invariance through test_train_batching's layouts
def test_update_is_the_same_whatever_the_micro_batching(small_browser):
    """The loss is a mean over the step's model tokens: micro-batches of 1, 2 or 3 trajectories (of
    different lengths, sorted and padded differently) give the same update up to float error."""
    cfg = TrainConfig(lr=1.0, kl_coef=0.05, lora={"dropout": 0.0}, max_grad_norm=1e9)
    model, tok = setup_lora(cfg, progress=False)
    trajs = _trajectories(tok, small_browser)
    trajs.append(ResearchAgent(ScriptedPolicy(tok, ["<answer>I do not know which city it is</answer>"]),
                               small_browser.fork()).run("What is the capital of France?",
                                                         gold={"answers": ["Paris"]}))
    assert len({len(t.token_ids) for t in trajs}) == 3
    params = [p for p in model.parameters() if p.requires_grad]
    start = [p.detach().clone() for p in params]
    model.train()
    deltas = []
    for micro in (1, 2, 3):
        with torch.no_grad():
            for p, s0 in zip(params, start, strict=True):
                p.copy_(s0)
        opt = torch.optim.SGD(params, lr=cfg.lr)
        stats = policy_update(model, opt, params, trajs, [1.0, -1.0, 0.5], [0, 1, 2],
                              build(TrainConfig, {"micro_batch": micro}, base=cfg), tok.pad_token_id)
        deltas.append(torch.cat([(p.detach() - s0).flatten() for p, s0 in zip(params, start, strict=True)]))
        assert stats["tokens"] == sum(t.generated_tokens for t in trajs)
    assert deltas[0].abs().max() > 0
    for d in deltas[1:]:
        assert torch.allclose(d, deltas[0], rtol=1e-3, atol=1e-6), float((d - deltas[0]).abs().max())


def _write_tasks(path):
    items = [{"id": f"t{i}", "question": q, "answers": [a], "split": "train"} for i, (q, a) in enumerate([
        ("What is the capital of France?", "Paris"), ("What is the capital of Spain?", "Madrid"),
        ("What is the capital of Italy?", "Rome")])]
    path.write_text("".join(json.dumps(i) + "\n" for i in items) + "{broken json\n")
    return path


def _cfg(tmp_path, tasks, **kw):
    base = dict(tasks=str(tasks), out=str(tmp_path / "run"), steps=2, prompts_per_step=1, group_size=2,
                max_turns=2, max_new_tokens=12, temperature=0.0, checkpoint_every=1, filter_low=0, filter_high=1,
                filter_zero_variance=False, drop_void_turns=False, lr=1e-3, concurrency=2)
    base.update(kw)
    return build(TrainConfig, base)  # flat names, as flags spell them


@pytest.mark.model
def test_resume_reproduces_the_next_step(tmp_path, small_browser, monkeypatch, capsys):
    tasks = _write_tasks(tmp_path / "tasks.jsonl")
    full = _cfg(tmp_path, tasks, out=str(tmp_path / "full"), steps=3)
    train_rl(full, browser=small_browser, progress=False)
    part = _cfg(tmp_path, tasks, out=str(tmp_path / "part"), steps=1)
    train_rl(part, browser=small_browser, progress=False)
    part.steps = 2
    train_rl(part, resume=True, browser=small_browser, progress=False)
    a = [json.loads(x) for x in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (tmp_path / "part" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in b] == [1, 2]
    for key in ("reward", "turns", "gen_tokens", "answer_rate"):
        assert a[1][key] == pytest.approx(b[1][key]), key
    for row in a:  # the step's totals, which tokens/s figures divide (1 prompt x G 2, one sampling round)
        assert row["rollout_trajectories"] == 2
        assert row["rollout_generated_tokens"] == pytest.approx(row["gen_tokens"] * 2)
    assert a[1]["loss"] == pytest.approx(b[1]["loss"], rel=1e-3, abs=1e-5)
    assert (tmp_path / "part" / "adapter" / "adapter_config.json").exists()
    assert (tmp_path / "part" / "training.png").stat().st_size > 1000
    # a stop (Ctrl-C, --stop-after) in step 4, two steps after the last periodic checkpoint, saves
    # step 3 as it ended; its weights are the full run's after three steps, not a half update
    monkeypatch.setattr(rl, "policy_update", _stopping_at_call(2, policy_update))
    part.steps, part.checkpoints.every = 4, 100
    with pytest.raises(KeyboardInterrupt):
        train_rl(part, resume=True, browser=small_browser, progress=False)
    assert "stopped in step 4: saved" in capsys.readouterr().err
    assert [p.name for p in checkpoints(tmp_path / "part")] == ["step-1", "step-2", "step-3"]
    saved, reference = (load_file(str(tmp_path / r / "checkpoints" / "step-3" / "adapter_model.safetensors"))
                        for r in ("part", "full"))
    assert saved.keys() == reference.keys()
    for k in saved:
        torch.testing.assert_close(saved[k], reference[k], rtol=1e-4, atol=1e-6)
    state = json.loads((tmp_path / "part" / "checkpoints" / "step-3" / "state.json").read_text())
    assert state == json.loads((tmp_path / "full" / "checkpoints" / "step-3" / "state.json").read_text())
    assert [json.loads(x)["step"] for x in (tmp_path / "part" / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]
    # a resume with a changed config names the fields that differ
    changed = _cfg(tmp_path, tasks, out=str(tmp_path / "part"), lr=0.5, steps=3)
    with pytest.raises(ResumeError, match="lr"):
        train_rl(changed, resume=True, browser=small_browser, progress=False)


def test_a_stop_saves_no_checkpoint_it_cannot_make_whole(tmp_path, capsys):
    """Nothing to save before the first step or when a periodic checkpoint has the step; and once the
    optimizer has started moving the weights, they are no longer the finished step's."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(torch.nn.Sequential(torch.nn.Linear(4, 4)), LoraConfig(r=2, target_modules=["0"]))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.1)

    def update():
        model(torch.ones(1, 4)).sum().backward()
        opt.step()
        opt.zero_grad()

    assert FinishedStep(0, opt).save_on_stop(tmp_path, model, opt, keep=3) is None
    update()
    finished = FinishedStep(1, opt, {"position": 1})
    save_checkpoint(tmp_path, 1, model, opt, {"position": 1})
    assert finished.save_on_stop(tmp_path, model, opt, keep=3) is None  # the periodic one has it
    update()
    finished = FinishedStep(2, opt, {"position": 2})
    update()  # the next step's update ran (as far as the optimizer counting it) before the stop
    assert finished.save_on_stop(tmp_path, model, opt, keep=3) is None
    assert "being updated" in capsys.readouterr().err
    assert [p.name for p in checkpoints(tmp_path)] == ["step-1"]
    finished = FinishedStep(3, opt, {"position": 3})
    assert finished.save_on_stop(tmp_path, model, opt, keep=3).name == "step-3"
    assert json.loads((tmp_path / "checkpoints" / "step-3" / "state.json").read_text()) == {"position": 3, "step": 3}


def test_a_stop_during_a_steps_end_lands_after_it():
    """Ctrl-C inside ``signals_held`` (the optimizer step to the step's record) is handled as the block
    ends, by the handler that was there (the recipe's SIGTERM one, say), and not before."""
    import os
    import signal

    from research_agent.train.checkpoint import signals_held

    done = []
    with pytest.raises(KeyboardInterrupt):
        with signals_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # a signal handled here would raise before the next line
            done.append("recorded")
    assert done == ["recorded"]
    seen = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        with signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            assert seen == []
        assert seen == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.model
@pytest.mark.parametrize("zero_variance,rounds", [(True, 3), (False, 1)])
def test_dynamic_sampling_draws_more_prompts_while_groups_are_filtered(tmp_path, small_browser, zero_variance,
                                                                       rounds):
    """Greedy samples of one question are identical, so with the zero-variance filter every group is
    dropped: dynamic sampling then draws a new prompt per round, up to 1 + dynamic_sampling rounds."""
    tasks = _write_tasks(tmp_path / "tasks.jsonl")
    cfg = _cfg(tmp_path, tasks, steps=1, filter_zero_variance=zero_variance, dynamic_sampling=2)
    train_rl(cfg, browser=small_browser, progress=False)
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert row["sampling_rounds"] == rounds
    assert row["kept_groups"] == (0 if zero_variance else 1)
    assert row["trained_trajectories"] == (0 if zero_variance else 2)
    state = json.loads((tmp_path / "run" / "checkpoints" / "step-1" / "state.json").read_text())
    assert state["position"] == rounds  # the next step starts after every prompt drawn


def test_a_raising_reward_gets_the_fallback(capsys):
    def broken(traj):
        raise KeyError("gold")

    safe = SafeReward(broken, fallback=-1.0)
    from research_agent.trajectory import Trajectory

    assert safe(Trajectory(question="q"), 0).score == -1.0
    assert safe(Trajectory(question="q"), 1).score == -1.0
    assert capsys.readouterr().err.count("KeyError") == 1  # logged once per error type


def test_sft_moves_the_adapter_and_lowers_the_loss(tmp_path, smol, monkeypatch):
    _, tok = smol
    rec = {"question": "What is the capital of France?", "template": "fast", "turns": [
        {"completion": "<search>capital of France</search>",
         "observation": "\n<result>\n[factbook/fr#0] France: Capital: Paris\n</result>\n"},
        {"completion": "<answer>Paris [factbook/fr#0]</answer>", "observation": ""}]}
    ids, mask = render_example(tok, rec)
    obs_ids = tok.encode(rec["turns"][0]["observation"], add_special_tokens=False)
    assert sum(mask) == len(ids) - mask.index(1) - len(obs_ids)  # observation tokens carry no loss
    data = tmp_path / "sft.jsonl"
    data.write_text("\n".join(json.dumps(rec) for _ in range(4)) + "\n")
    cfg = TrainConfig(stage="sft", tasks=str(data), out=str(tmp_path / "sft"), epochs=3, lr=2e-3,
                      compute={"micro_batch": 2}, checkpoints={"every": 100})
    summary = train_sft(cfg, progress=False)
    losses = [json.loads(x)["loss"] for x in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert summary["examples"] == 4 and len(losses) == 6
    assert losses[-1] < losses[0] * 0.8
    # stopped in step 4 with no periodic checkpoint yet: step 3 is saved, and the resumed run's
    # losses are the uninterrupted run's, each step once
    from research_agent.train import sft

    monkeypatch.setattr(sft, "_step", _stopping_at_call(4, sft._step))
    cfg.out = str(tmp_path / "stopped")
    with pytest.raises(KeyboardInterrupt):
        train_sft(cfg, progress=False)
    assert [p.name for p in checkpoints(tmp_path / "stopped")] == ["step-3"]
    train_sft(cfg, resume=True, progress=False)
    again = [json.loads(x)["loss"] for x in (tmp_path / "stopped" / "metrics.jsonl").read_text().splitlines()]
    assert again == pytest.approx(losses, rel=1e-4)


@pytest.mark.model
def test_sigterm_stops_the_cli_with_its_last_step_checkpointed(tmp_path):
    """``kill`` of a plain ``python -m research_agent.train`` (no recipe around it) saves the last
    finished step although no periodic checkpoint is due for 100 steps."""
    import os
    import signal
    import subprocess
    import sys

    rec = {"question": "What is the capital of France?", "template": "fast", "turns": [
        {"completion": "<answer>Paris</answer>", "observation": ""}]}
    data = tmp_path / "sft.jsonl"
    data.write_text("\n".join(json.dumps(rec) for _ in range(400)) + "\n")
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "research_agent.train", "--stage", "sft", "--tasks", str(data),
                             "--micro-batch", "1", "--checkpoint-every", "100", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    metrics, deadline = out / "metrics.jsonl", time.time() + 300
    while proc.poll() is None and time.time() < deadline and len(_lines(metrics)) < 2:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, err[-2000:]
    done = [json.loads(x)["step"] for x in _lines(metrics)]
    assert len(done) >= 2 and done == list(range(1, len(done) + 1))
    assert [p.name for p in checkpoints(out)] == [f"step-{done[-1]}"], err[-2000:]
    assert f"saved {out / 'checkpoints' / f'step-{done[-1]}'}" in err


def _stopping_at_call(n, real):
    """``real``, except that its n-th call raises KeyboardInterrupt (Ctrl-C at that point) instead."""
    calls = []

    def wrapped(*a, **kw):
        calls.append(1)
        if len(calls) == n:
            raise KeyboardInterrupt
        return real(*a, **kw)

    return wrapped


def _lines(path):
    return [x for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def test_cli_flags_and_toml_map_onto_the_config(tmp_path):
    toml = tmp_path / "cfg.toml"
    toml.write_text('algorithm = "grpo"\ngroup_size = 8\nlora_targets = ["q_proj", "k_proj"]\n')
    cfg, _ = load_config(["--config", str(toml), "--group-size", "6", "--drop-void-turns", "false"])
    assert cfg.algorithm == "grpo" and cfg.group_size == 6 and cfg.lora.targets == ["q_proj", "k_proj"]
    assert cfg.filters.drop_void_turns is False
    # a file may write a group as its section's table; a flag still overrides a setting in it
    toml.write_text('group_size = 8\n[lora]\nr = 4\ntargets = ["q_proj"]\n[agent]\nsearch_k = 5\n')
    cfg, _ = load_config(["--config", str(toml), "--lora-r", "2"])
    assert (cfg.group_size, cfg.lora.r, cfg.lora.targets, cfg.agent.search_k) == (8, 2, ["q_proj"], 5)
    toml.write_text("[lora]\nrank = 4\n")
    with pytest.raises(SystemExit, match=r"\[lora\] unknown setting rank"):
        load_config(["--config", str(toml)])
    with pytest.raises(SystemExit):
        load_config(["--algorithm", "magic"])


def test_flags_take_the_names_eval_and_ask_use():
    cfg, _ = load_config(["--task-type", "code", "--adapter", "runs/sft/adapter", "--endpoint", "http://127.0.0.1:1",
                          "--mode", "code-only"])
    assert cfg.init_adapter == "runs/sft/adapter"
    assert cfg.compute.rollout_endpoint == "http://127.0.0.1:1"
    assert cfg.agent.mode == "code-only"
    cfg, _ = load_config(["--init-adapter", "a"])
    assert cfg.init_adapter == "a" and not cfg.compute.rollout_endpoint


def test_help_lists_every_field(capsys):
    """argparse %-formats help texts: a literal '%' in a field's help ("24 % more time") crashed --help."""
    from dataclasses import fields

    from research_agent.configs import flat_settings

    with pytest.raises(SystemExit) as exit_info:
        load_config(["--help"])
    assert exit_info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    names = [f.name for f in fields(TrainConfig) if "flat" not in f.metadata] + list(flat_settings(TrainConfig))
    # a flag for every one of the 65 settings the config had before it had sections, and min_hops since
    assert len(names) == 67 and "min_hops" in names and "activation_budget" in names
    for name in names:
        assert "--" + name.replace("_", "-") in out
    assert "24 % more time" in out


@pytest.mark.model
def test_rl_on_top_of_sft_keeps_the_sft_policy_as_reference_and_reloads(tmp_path):
    from peft import LoraConfig, get_peft_model

    from research_agent.inference.adapters import save_adapter
    from research_agent.inference.models import load_model
    from research_agent.inference.policy import load_policy

    # an "SFT" adapter with non-zero weights
    base, tok = load_model("smollm2-135m", progress=False)
    sft = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    sft.save_pretrained(tmp_path / "sft")
    ids = torch.tensor([tok.encode("The capital of France is Paris.")])
    with torch.no_grad():
        sft_logits = sft(input_ids=ids).logits
    model, _ = setup_lora(TrainConfig(init_adapter=str(tmp_path / "sft")), progress=False)
    with torch.no_grad(), model.disable_adapter():
        ref_logits = model(input_ids=ids).logits
    assert torch.allclose(ref_logits, sft_logits, atol=1e-4)  # KL reference = the SFT policy
    for n, p in model.named_parameters():  # pretend RL moved the new adapter
        if "lora_B" in n:
            p.data.fill_(0.01)
    model.eval()  # no LoRA dropout
    with torch.no_grad():
        rl_logits = model(input_ids=ids).logits
    save_adapter(model, tmp_path / "rl")
    reloaded = load_policy("smollm2-135m", adapter=str(tmp_path / "rl"), progress=False)
    with torch.no_grad():
        again = reloaded.model(input_ids=ids).logits
    assert torch.allclose(again, rl_logits, atol=1e-4)
    assert not torch.allclose(rl_logits, sft_logits, atol=1e-3)
