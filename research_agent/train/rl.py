"""The RL loop: rollouts of the agent graph → rewards → filters → advantages → masked PG loss.

Rollouts run through the same agent loop that ``ask``, synthesis and eval use, through one batched
policy whose model carries the LoRA adapter being trained.  The trainer is handed a task type
(``research_agent.tasks``: tasks, environment, browser, correctness, tool names) and never asks
which one it has; the loop below is the same for all.
"""

from __future__ import annotations

import inspect
import json
import math
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import torch
from tqdm import tqdm

from corpus.files import atomic_write_text
from research_agent.inference.adapters import AdapterError, merge_adapter_chain, save_adapter
from research_agent.inference.policy import LocalPolicy
from research_agent.tasks import ResearchTasks, get_task_type
from research_agent.trajectory import Trajectory

from .algorithms import gigpo_advantages, group_advantages, keep_groups, sequence_advantages
from .batching import plan_update, prefix_pass, reference_mode, suffix_logprobs
from .checkpoint import FinishedStep, checkpoints, load_checkpoint, prepare_run, save_checkpoint, signals_held
from .config import TrainConfig
from .curriculum import NO_KIND, OrderedDraw, make_curriculum, task_kind
from .distributed import (
    Ranks,
    all_gather_object,
    all_reduce_grads,
    all_reduce_sum,
    barrier,
    broadcast_params,
    init_distributed,
)
from .loss import policy_gradient_loss
from .plots import plot_training
from .publish import AdapterPublisher, PublishError
from .tracking import make_tracker

__all__ = ["make_reward", "policy_update", "rollout_metrics", "setup_lora", "train_rl", "TrainingStopped"]


class TrainingStopped(RuntimeError):
    """A collapse alarm stopped the run; the last good checkpoint is kept."""


def setup_lora(cfg: TrainConfig, progress: bool = True):
    """Load the base model and wrap it with a fresh trainable LoRA adapter.

    With ``init_adapter`` (e.g. the SFT result) that adapter is merged into the weights first, so
    "adapter disabled" — the KL reference — is the SFT policy, not the raw base model.
    """
    from peft import LoraConfig, get_peft_model

    from research_agent.inference.devices import DeviceError
    from research_agent.inference.models import load_model

    try:
        base, tok = load_model(cfg.model, progress=progress, device=cfg.compute.device, dtype=cfg.compute.dtype)
    except DeviceError as e:
        raise SystemExit(f"error: {e}") from None
    chain: list[str] = []
    if cfg.init_adapter:
        try:
            base, chain = merge_adapter_chain(base, cfg.init_adapter)
        except AdapterError as e:
            raise SystemExit(f"error: init_adapter: {e}") from None
    lcfg = LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                      target_modules=list(cfg.lora.targets), task_type="CAUSAL_LM")
    model = get_peft_model(base, lcfg)
    model.merged_chain = chain
    set_checkpointing(model, bool(cfg.compute.gradient_checkpointing))
    return model, tok


# Activations one forward pass keeps for the backward, per token, per layer and per hidden unit:
# ~21 fp32 values on smollm2 (the recipe's SFT stage held 5.0 GB more without checkpointing for
# 3,400 tokens x 30 layers x 576), rounded up. Above the budget a pass recomputes them instead.
ACTIVATION_BYTES_PER_UNIT = 24 * 4


def wants_checkpointing(cfg: TrainConfig, model, tokens: int) -> bool:
    """Whether a pass over ``tokens`` (rows x longest row) recomputes activations: as set, else when
    keeping them would take more than ``activation_budget`` GB (estimated from the model's size)."""
    if cfg.compute.gradient_checkpointing is not None:
        return cfg.compute.gradient_checkpointing
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(inner, "config", None)
    config = getattr(config, "text_config", None) or config
    units = getattr(config, "num_hidden_layers", 0) * getattr(config, "hidden_size", 0)
    return tokens * units * ACTIVATION_BYTES_PER_UNIT > cfg.compute.activation_budget * 2**30


def set_checkpointing(model, on: bool) -> None:
    """Turn activation checkpointing on or off (a no-op where it already is)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    if inner is None:
        return
    state = getattr(inner, "is_activation_checkpointing", None)  # transformers >= 5.x's name
    if bool(getattr(inner, "is_gradient_checkpointing", False) if state is None else state) == on:
        return
    if on:
        # non-reentrant: the frozen embeddings give the first layer's input no grad, which the
        # reentrant variant would take as "nothing to differentiate" and drop LoRA's gradients
        if hasattr(inner, "activation_checkpointing_enable"):  # transformers >= 5.x's name
            inner.activation_checkpointing_enable({"use_reentrant": False})
        else:
            inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    elif hasattr(inner, "activation_checkpointing_disable"):
        inner.activation_checkpointing_disable()
    else:
        inner.gradient_checkpointing_disable()




class SafeReward:
    """Call a reward; on an exception give the configured fallback and log each error type once."""

    def __init__(self, fn, fallback: float):
        self.fn, self.fallback, self.seen = fn, fallback, set()
        try:
            self.takes_step = "step" in inspect.signature(fn).parameters
        except (TypeError, ValueError):
            self.takes_step = False

    def __call__(self, traj: Trajectory, step: int):
        from rewards.base import RewardResult

        try:
            res = self.fn(traj, step=step) if self.takes_step else self.fn(traj)
            if res.score is None or math.isnan(res.score):
                raise ValueError("reward is NaN")
            return res
        except Exception as e:  # a reward must never kill a training run
            name = type(e).__name__
            if name not in self.seen:
                self.seen.add(name)
                print(f"reward error ({name}: {e}); using fallback {self.fallback}", file=sys.stderr)
            return RewardResult(self.fallback, {"reward_error": 1.0})


def make_reward(spec: str):
    from rewards import get_reward
    from rewards.compose import parse_reward_spec

    return parse_reward_spec(spec) if ("," in spec or ":" in spec) else get_reward(spec)


def rollout_metrics(trajs: list[Trajectory], rewards: list[float], correct: list[bool],
                    tools: tuple[str, ...] = ResearchTasks.tools, kinds: list[str] | None = None) -> dict:
    """Batch means; ``answer_rate`` is the submission rate for code, ``tool_rate/<tool>`` calls per trajectory.

    A code trajectory's answer may be the code it last ran, scored at the turn limit (autosubmit):
    counting that as an answer would show every episode submitting while the model never did, so
    with a submit tool the rate counts the model's own submissions.

    ``kinds`` (one per trajectory) adds ``kind/<kind>/{n,reward,pass_rate}``: a flat mean reward can
    hide a kind the policy never solves (research-qwen-v2's RL on two-hop questions), and only a
    per-kind split shows whether RL has anything to reinforce there."""
    n = max(1, len(trajs))
    submits = "submit" in tools
    m = {
        "reward": sum(rewards) / n,
        "pass_rate": sum(correct) / n,
        "answer_rate": sum((t.count("submit") > 0) if submits else t.answered for t in trajs) / n,
        "void_turn_rate": sum(t.has_void_turn for t in trajs) / n,
        "error_rate": sum(t.stop_reason == "error" for t in trajs) / n,  # could not start (e.g. prompt too long)
        "turns": sum(t.turns for t in trajs) / n,
        "gen_tokens": sum(t.generated_tokens for t in trajs) / n,
    }
    for name in tools:
        m[f"tool_rate/{name}"] = sum(t.count(name) for t in trajs) / n
    if kinds is not None and set(kinds) - {NO_KIND}:
        for kind in sorted(set(kinds)):
            idx = [i for i, k in enumerate(kinds) if k == kind]
            m[f"kind/{kind}/n"] = len(idx)
            m[f"kind/{kind}/reward"] = sum(rewards[i] for i in idx) / len(idx)
            m[f"kind/{kind}/pass_rate"] = sum(correct[i] for i in idx) / len(idx)
    return m


def policy_update(model, opt, params, trajs: list[Trajectory], adv: list, chosen: list[int], cfg: TrainConfig,
                  pad_id: int, layout: dict | None = None, ranks: Ranks | None = None,
                  held: ExitStack | None = None) -> dict:
    """One optimizer step (or ``ppo_epochs`` of them) on the chosen trajectories; returns loss stats.

    The unit is a sequence the model actually saw (``Trajectory.sequences``): a full-context
    trajectory is one, a managed-context one gives one per step, each carrying the trajectory's
    advantage.  The old log-probs are recomputed on those same sequences in the first epoch, so the
    PPO ratio compares each token under the prompt it was generated from.  ``adv[i]`` is trajectory
    i's advantage, or (GiGPO) a list with one advantage per step, applied to that step's tokens.

    With several processes (``ranks``) ``chosen`` is this rank's share of the step: the loss
    divides by the step's token total over all ranks and the gradients are summed over ranks before
    clipping (``research_agent.train.distributed``: why not DDP), so every rank applies the update
    one process would compute on the union; the returned stats are the step's, on every rank.

    ``held``: from the last optimizer step on, Ctrl-C and SIGTERM wait until the caller closes it
    (the trainer, once the step is recorded), so a stop never falls between the update and its record.
    """
    ranks = ranks or Ranks()
    stats = {"loss": 0.0, "kl": 0.0, "entropy": 0.0, "tokens": 0}
    units = [(a, ids, mask) for i in chosen
             for (ids, mask), a in zip(trajs[i].sequences(), sequence_advantages(trajs[i], adv[i]), strict=True)]
    if not units and not ranks.active:
        return stats
    # The loss is the mean over every model token of the step (each chunk divides by the step's
    # total), so how units are grouped and chunked changes nothing but the cost: a prompt shared by
    # a group's trajectories runs once, and short suffixes are not padded to a long straggler.
    longest = max((len(u[1]) for u in units), default=0)
    checkpointing = wants_checkpointing(cfg, model, longest * min(cfg.compute.micro_batch, max(len(units), 1)))
    set_checkpointing(model, checkpointing)
    share = cfg.compute.share_prefix and not checkpointing  # checkpointed layers write no K/V cache
    plan = plan_update([(u[1], u[2]) for u in units], cfg.compute.micro_batch,
                       **{"share_prefix": share, **(layout or {})}) if units else []  # layout: benchmarks' overrides
    total = sum(sum(u[2]) for u in units)
    if ranks.active:  # the step's tokens on every rank; no rank has any: no step anywhere
        total = int(all_reduce_sum([total], ranks)[0])
        if total == 0:
            return stats
    old_cache: dict[tuple[int, int], torch.Tensor] = {}
    ent_sum = 0.0
    for epoch in range(cfg.ppo_epochs):
        opt.zero_grad(set_to_none=True)
        for b, block in enumerate(plan):
            kv = leaves = attn = ref_kv = None
            if not block.plain:
                kv, attn = prefix_pass(model, block.prefixes, pad_id)
                leaves = [(k.detach().requires_grad_(), v.detach().requires_grad_()) for k, v in kv]
                if cfg.kl_coef > 0:
                    ref_kv, _ = prefix_pass(model, block.prefixes, pad_id, reference=True)
            for c, chunk in enumerate(block.chunks):
                part = [units[i] for i in chunk]
                cut = [len(block.prefixes[block.row[i]]) for i in chunk]
                seqs = [u[1][n:] for u, n in zip(part, cut, strict=True)]
                masks = [u[2][n:] for u, n in zip(part, cut, strict=True)]
                where = dict(prefix_attn=attn, rows=[block.row[i] for i in chunk], prefix_lens=cut)
                logp, ent, lmask = suffix_logprobs(model, seqs, masks, pad_id, kv=leaves, with_entropy=True, **where)
                if cfg.kl_coef > 0:  # without a KL term the reference pass buys nothing: KL reads 0
                    with reference_mode(model):
                        ref, _, _ = suffix_logprobs(model, seqs, masks, pad_id, kv=ref_kv, **where)
                else:
                    ref = logp.detach()
                if epoch == 0:  # on-policy: the first pass defines the old policy
                    old_cache[b, c] = logp.detach()
                if any(isinstance(u[0], list) for u in part):  # per-token advantages (GiGPO), padded like ids
                    a = torch.zeros_like(lmask)
                    for r, (u, n) in enumerate(zip(part, cut, strict=True)):
                        a[r, : len(u[0]) - n] = torch.tensor(u[0][n:], dtype=torch.float32, device=lmask.device)
                else:
                    a = torch.tensor([u[0] for u in part], dtype=torch.float32, device=lmask.device)
                loss, st = policy_gradient_loss(logp, old_cache[b, c], ref, a, lmask, kl_coef=cfg.kl_coef,
                                                clip_ratio=cfg.clip_ratio if cfg.ppo_epochs > 1 else None,
                                                denom=total)
                loss.backward()
                if epoch == 0:
                    stats["loss"] += float(loss.detach())
                    stats["kl"] += st["kl"]
                    ent_sum += float((ent * lmask).sum())
                    stats["tokens"] += int(lmask.sum())
            if leaves is not None:  # the suffixes' gradients w.r.t. the shared K/V, back through the prefix once
                pairs = [(t, leaf.grad) for kv_pair, leaf_pair in zip(kv, leaves, strict=True)
                         for t, leaf in zip(kv_pair, leaf_pair, strict=True)
                         if t.requires_grad and leaf.grad is not None]  # layer 0's keys: frozen k_proj
                if pairs:
                    torch.autograd.backward([t for t, _ in pairs], grad_tensors=[gr for _, gr in pairs])
        all_reduce_grads(params, ranks)  # before the clip: the norm is the step's, not this rank's share
        torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        if held is not None and epoch == cfg.ppo_epochs - 1:
            held.enter_context(signals_held())
        opt.step()
    if ranks.active:
        stats["loss"], stats["kl"], ent_sum, tokens = all_reduce_sum(
            [stats["loss"], stats["kl"], ent_sum, stats["tokens"]], ranks)
        stats["tokens"] = int(tokens)
    stats["entropy"] = ent_sum / max(1, stats["tokens"])
    return stats


def rollout_round(batch_items: list[dict], policy, browser, cfg: TrainConfig, step: int, safe_reward,
                  tasks, ranks: Ranks | None = None, first_group: int = 0) -> tuple:
    """Rollouts of whole groups, then rewards, correctness, advantages (within this round's groups)
    and the dynamic filter's per-group keep flags.

    With several processes each rank rolls out the groups it owns (``first_group`` numbers this
    round's first group within the step) and every rank ends up with the whole round in group
    order, so advantages, filters and metrics are the same everywhere (``_shared_rollouts``)."""
    ranks = ranks or Ranks()
    if ranks.active:
        trajs, results, correct = _shared_rollouts(batch_items, policy, browser, cfg, step, safe_reward, tasks,
                                                   ranks, first_group)
    else:
        trajs = tasks.run_rollouts(batch_items, policy, browser, cfg)
        results = [safe_reward(t, step) for t in trajs]
        correct = [tasks.is_correct(t, cfg) for t in trajs]
    rewards = [r.score for r in results]
    if cfg.algorithm == "gigpo":
        adv = gigpo_advantages(trajs, rewards, cfg.group_size, gamma=cfg.gigpo.gamma, omega=cfg.gigpo.omega)
    else:
        adv = group_advantages(rewards, cfg.group_size, cfg.algorithm)
    keep = keep_groups(rewards, correct, cfg.group_size, low=cfg.filters.low, high=cfg.filters.high,
                       zero_variance=cfg.filters.zero_variance)
    return trajs, results, rewards, correct, adv, keep


def _shared_rollouts(batch_items: list[dict], policy, browser, cfg: TrainConfig, step: int, safe_reward, tasks,
                     ranks: Ranks, first_group: int) -> tuple[list, list, list]:
    """This rank's groups rolled out and scored here, then everyone's gathered in group order.

    A reward with state (a curriculum such as RLER, whose level follows the scores it saw) is
    instead applied on every rank to the gathered round, in order, so its state stays the same on
    every rank and as in one process; a stateless one is computed once, where its rollout ran."""
    size = cfg.group_size
    mine = [g for g in range(len(batch_items) // size) if ranks.owns(first_group + g)]
    local = tasks.run_rollouts([it for g in mine for it in batch_items[g * size:(g + 1) * size]],
                               policy, browser, cfg) if mine else []
    stateful = hasattr(safe_reward.fn, "state_dict")
    results = None if stateful else [safe_reward(t, step) for t in local]
    correct = [tasks.is_correct(t, cfg) for t in local]
    by_group: dict[int, tuple] = {}
    for groups, trajs_r, results_r, correct_r in all_gather_object((mine, local, results, correct), ranks):
        for k, g in enumerate(groups):
            cut = slice(k * size, (k + 1) * size)
            by_group[g] = (trajs_r[cut], results_r[cut] if results_r is not None else None, correct_r[cut])
    order = sorted(by_group)
    trajs = [t for g in order for t in by_group[g][0]]
    correct = [c for g in order for c in by_group[g][2]]
    if stateful:
        results = [safe_reward(t, step) for t in trajs]
    else:
        results = [r for g in order for r in by_group[g][1]]
    return trajs, results, correct


def train_rl(cfg: TrainConfig, resume: bool = False, browser=None, progress: bool = True, task_type=None) -> dict:
    """Policy-gradient RL on rollouts of ``task_type``'s tasks (default: the config's task type).

    Under a launcher (``accelerate launch``, ``torchrun``) it runs data-parallel: every rank draws
    the same step batch, rolls out the groups it owns, and all ranks share the trajectories, so
    advantages, filters and metrics are computed identically; each rank trains its own groups and
    the gradients are summed (``policy_update``).  Only rank 0 writes the run directory."""
    tasks = task_type or get_task_type(cfg.task_type)
    ranks = init_distributed(cfg.compute.device)
    progress = progress and ranks.main
    tasks.prepare(cfg)
    out = prepare_run(cfg, resume, write=ranks.main)
    items = tasks.load_tasks(cfg)
    model, tok = setup_lora(cfg, progress=progress)
    params = [p for p in model.parameters() if p.requires_grad]
    broadcast_params(params, ranks)  # the same initial adapter on every rank
    opt = torch.optim.AdamW(params, lr=cfg.lr)
    reward_fn = make_reward(cfg.scoring.reward)
    safe_reward = SafeReward(reward_fn, cfg.scoring.reward_fallback)
    state = {"position": 0, "order_seed": cfg.seed, "reward_state": None, "curriculum": None}
    start = 0
    metrics_path = out / "metrics.jsonl"
    if resume and checkpoints(out):
        last = checkpoints(out)[-1]
        state = load_checkpoint(last, model, opt)
        start = state["step"]
        if state.get("reward_state") and hasattr(reward_fn, "load_state_dict"):
            reward_fn.load_state_dict(state["reward_state"])
        if ranks.main:
            _truncate_metrics(metrics_path, start)
            print(f"resumed from {last} (step {start})", file=sys.stderr)
    elif ranks.main and metrics_path.exists():
        metrics_path.unlink()
    barrier(ranks)  # rank 0 is done with the run directory before anyone goes on
    if cfg.curriculum.name == "none":  # the data order of runs (and checkpoints) made before curricula
        sampler = OrderedDraw(len(items), state["order_seed"])
        sampler.position = state["position"]
    else:
        sampler = make_curriculum(cfg.curriculum.name, items, cfg)
        if state.get("curriculum"):
            sampler.load_state_dict(state["curriculum"])
    browser = browser or tasks.make_browser(cfg)
    publisher = None
    if cfg.compute.rollout_endpoint:  # generation on a server, which holds the adapter published after each step
        publisher = AdapterPublisher(cfg.compute.rollout_endpoint, cfg.model, tok, out, name=Path(cfg.out).name or "train")
        policy = publisher.policy
        _publish(publisher, model, start, ranks)
    else:
        policy = LocalPolicy(model, tok, name=f"{cfg.model}+lora")
    tracker = make_tracker(cfg.report_to, out, cfg.to_dict()) if ranks.main else make_tracker("none", out, {})
    history: list[dict] = []
    bar = tqdm(range(start, cfg.steps), desc="rl", disable=not progress, initial=start, total=cfg.steps)
    finished = FinishedStep(start, opt)  # start: 0, or the checkpoint resumed from
    try:
        for step in bar:
            t0 = time.perf_counter()
            # sampling reproducible per step, also after resume; each rank samples its own stream
            torch.manual_seed(cfg.seed * 100_003 + step + 1_000_003 * ranks.rank)
            trajs, rewards, correct, adv, keep_g, results, kinds = [], [], [], [], [], [], []
            rounds = 0
            while True:  # DAPO dynamic sampling: draw more prompts while groups were filtered out
                need = cfg.prompts_per_step - (sum(keep_g) if rounds else 0)
                drawn = sampler.draw(step, rounds, need)
                state["position"] += need
                batch_items = [it for i in drawn for it in tasks.group_items(items[i], step, cfg)]
                kinds += [task_kind(items[i], cfg.curriculum.key) for i in drawn for _ in range(cfg.group_size)]
                rnd = rollout_round(batch_items, policy, browser, cfg, step, safe_reward, tasks, ranks, len(keep_g))
                g = cfg.group_size
                sampler.update(drawn, [sum(rnd[3][k * g:(k + 1) * g]) / g for k in range(len(drawn))])
                for acc, part in zip((trajs, results, rewards, correct, adv, keep_g), rnd, strict=True):
                    acc += part
                rounds += 1
                if sum(keep_g) >= cfg.prompts_per_step or rounds > cfg.filters.dynamic_sampling:
                    break
            chosen = [i for i, t in enumerate(trajs)
                      if keep_g[i // cfg.group_size] and not (cfg.filters.drop_void_turns and t.has_void_turn)
                      and any(t.token_mask)]
            mine = [i for i in chosen if ranks.owns(i // cfg.group_size)]  # all of them in one process
            for i in mine:  # the loss must cover the model's own tokens and nothing the tools returned
                trajs[i].check_consistency()
            t_roll = time.perf_counter() - t0
            model.train()
            with ExitStack() as held:  # a stop lands before the update or after its record, not between
                upd = policy_update(model, opt, params, trajs, adv, mine, cfg, tok.pad_token_id, ranks=ranks, held=held)
                model.eval()
                if publisher is not None:
                    _publish(publisher, model, step + 1, ranks)
                row = {"step": step + 1, **rollout_metrics(trajs, rewards, correct, tasks.tools, kinds), "loss": upd["loss"], "kl": upd["kl"],
                       "entropy": upd["entropy"], "trained_trajectories": len(chosen), "kept_groups": sum(keep_g),
                       "sampling_rounds": rounds, **sampler.metrics(),
                       "seconds": time.perf_counter() - t0, "rollout_seconds": t_roll,
                       # every trajectory sampled this step (dynamic sampling may draw more than one round):
                       # what a tokens/s figure divides, rather than a mean times an assumed count
                       "rollout_trajectories": len(trajs),
                       "rollout_generated_tokens": sum(t.generated_tokens for t in trajs)}
                if publisher is not None:
                    row["publish_seconds"] = publisher.seconds
                comps: dict[str, float] = {}
                for r in results:
                    for k, v in r.components.items():
                        comps[k] = comps.get(k, 0.0) + v / len(results)
                row.update({f"reward/{k}": v for k, v in comps.items()})
                history.append(row)
                if ranks.main:
                    with open(metrics_path, "a", encoding="utf-8") as f:
                        f.write(json.dumps(row) + "\n")
                    tracker.log(row, step + 1)
                finished = FinishedStep(step + 1, opt, _resumable(state, reward_fn, sampler))
            if ranks.main:
                plot_training(metrics_path, out / "training.png")
            bar.set_postfix(reward=f"{row['reward']:.3f}", pass_=f"{row['pass_rate']:.2f}", kl=f"{upd['kl']:.4f}")
            alarm = collapse_alarm(history, cfg)  # the same history, so the same verdict, on every rank
            if alarm:
                if ranks.main:
                    print(f"ALARM at step {step + 1}: {alarm}. Stopping; the last good checkpoint is kept.",
                          file=sys.stderr)
                raise TrainingStopped(alarm)
            if (step + 1) % cfg.checkpoints.every == 0 or step + 1 == cfg.steps:
                if ranks.main:
                    save_checkpoint(out, step + 1, model, opt, finished.state, keep=cfg.checkpoints.keep)
                barrier(ranks)
    except KeyboardInterrupt:
        if ranks.main:
            finished.save_on_stop(out, model, opt, keep=cfg.checkpoints.keep)
        raise
    tracker.close()
    summary = {"steps": cfg.steps, "final": history[-1] if history else None, "adapter": str(out / "adapter")}
    if ranks.main:
        save_adapter(model, out / "adapter")
        atomic_write_text(out / "summary.json", json.dumps(summary, indent=1))
    barrier(ranks)
    return summary


def _resumable(state: dict, reward_fn, sampler) -> dict:
    """What a checkpoint holds besides the weights: the data position and the reward's and the
    curriculum's state."""
    rs = reward_fn.state_dict() if hasattr(reward_fn, "state_dict") else None
    return {**state, "reward_state": rs, "curriculum": sampler.state_dict()}


def _publish(publisher: AdapterPublisher, model, step: int, ranks) -> None:
    """Rank 0 hands the server the adapter of ``step``; every rank then generates with it."""
    name = f"{publisher.name}-step-{step}"
    if ranks.main:
        try:
            name = publisher.publish(model, step)
        except PublishError as e:
            raise SystemExit(f"error: {e}; training stopped, the checkpoints written so far are intact") from None
    barrier(ranks)
    publisher.policy.model_name = name


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop metric rows of steps after the checkpoint being resumed (they will be redone)."""
    if not path.exists():
        return
    rows = [line for line in path.read_text().splitlines() if line.strip()]
    keep = []
    for line in rows:
        try:
            if json.loads(line).get("step", 0) <= step:
                keep.append(line)
        except json.JSONDecodeError:
            continue
    atomic_write_text(path, "".join(line + "\n" for line in keep))


ENTROPY_FLOOR = 0.02  # nats per model token: below it for 5 steps the policy samples one answer only


def collapse_alarm(history: list[dict], cfg: TrainConfig) -> str | None:
    """Named collapse conditions: NaN loss, KL blow-up, reward or answer rate falling off a cliff, and
    entropy collapse (the policy turning deterministic: every sample of a group the same, so group
    advantages vanish and learning stops while the reward still looks fine)."""
    last = history[-1]
    if math.isnan(last["loss"]) or math.isinf(last["loss"]):
        return "loss is NaN/inf"
    if last["kl"] > cfg.kl_alarm:
        return f"KL {last['kl']:.3f} exceeds {cfg.kl_alarm}"
    trained = [r for r in history if r.get("trained_trajectories", 1)]  # entropy is 0 when nothing trained
    if len(trained) >= 5 and all(r.get("entropy", 1.0) < ENTROPY_FLOOR for r in trained[-5:]):
        return f"entropy collapsed: below {ENTROPY_FLOOR} nats per token for the last 5 trained steps"
    for key, floor in (("reward", 0.2), ("answer_rate", 0.2), ("entropy", 0.05)):
        # entropy is measured on trained trajectories only: a step that trained nothing logs 0
        rows = trained if key == "entropy" else history
        if len(rows) < 10 or not all(key in r for r in rows[-10:]):
            continue
        a = sum(r[key] for r in rows[-10:-5]) / 5
        b = sum(r[key] for r in rows[-5:]) / 5
        if a > floor and b < 0.3 * a:
            return f"{key} collapsed from {a:.3f} to {b:.3f} over the last 10 steps"
    return None
