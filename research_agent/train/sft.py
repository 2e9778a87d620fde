"""SFT cold start on synthesized trajectories (D3/E9): LoRA, loss on the model's turns only.

The export is text (teacher and student tokenizers differ), so each example is rendered here with
the student's tokenizer exactly as the agent renders a live episode: the chat-template prompt,
then each completion (loss) followed by its observation (no loss).  A managed-context record gives
one example per turn instead: the prompt the agent would rebuild for that turn, then the turn.
Code tasks need no export: their demonstrations are replayed from the tasks' reference solutions
through the live code agent.  Where examples come from is the task type's business
(``research_agent.tasks``); this module only trains on them.
The resulting adapter is what RL starts from (``--init-adapter``).
"""

from __future__ import annotations

import json
import math
import random
import time
import warnings
from typing import Any

import torch
from tqdm import tqdm

from corpus.files import atomic_write_text
from research_agent.inference.adapters import save_adapter
from research_agent.inference.devices import model_device
from research_agent.tasks import (
    get_task_type,
    load_sft_records,
    render_example,
    render_examples,
    render_managed,
)

from .batching import PASS_COST, chunk_lengths
from .checkpoint import FinishedStep, checkpoints, load_checkpoint, prepare_run, save_checkpoint, signals_held
from .config import TrainConfig
from .distributed import (
    Ranks,
    all_gather_object,
    all_reduce_grads,
    all_reduce_sum,
    barrier,
    broadcast_params,
    init_distributed,
)
from .loss import pad_batch, sft_loss
from .plots import plot_training
from .tracking import make_tracker

__all__ = ["load_sft_records", "render_example", "render_examples", "render_managed", "train_sft"]


def train_sft(cfg: TrainConfig, resume: bool = False, progress: bool = True, task_type: Any = None) -> dict:
    """Supervised fine-tuning on the examples ``task_type`` (default: the config's) supplies.

    Under a launcher each step's ``micro_batch`` examples are dealt across the ranks, the loss is
    divided by the step's token count over all ranks and the gradients are summed
    (``research_agent.train.distributed``), so N processes take the one-process step; only rank 0
    writes the run directory (and builds the examples, which code tasks write there too)."""
    from .rl import setup_lora

    tasks = task_type or get_task_type(cfg.task_type)
    ranks = init_distributed(cfg.compute.device)
    progress = progress and ranks.main
    tasks.prepare(cfg)
    tasks.check_sft(cfg)
    out = prepare_run(cfg, resume, write=ranks.main)
    model, tok = setup_lora(cfg, progress=progress)
    if ranks.active:  # rank 0's examples, in its order, on every rank
        built = tasks.sft_examples(tok, cfg, out, resume, progress) if ranks.main else None
        examples, skipped = all_gather_object(built, ranks)[0]
    else:
        examples, skipped = tasks.sft_examples(tok, cfg, out, resume, progress)
    if not examples:
        raise SystemExit(f"no usable SFT examples in {cfg.tasks or 'the code tasks'}")
    params = [p for p in model.parameters() if p.requires_grad]
    broadcast_params(params, ranks)  # the same initial adapter on every rank
    device = model_device(model)
    opt = torch.optim.AdamW(params, lr=cfg.lr)
    steps_per_epoch = (len(examples) + cfg.compute.micro_batch - 1) // cfg.compute.micro_batch
    total = steps_per_epoch * cfg.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / max(1, total)))
    start = 0
    metrics_path = out / "metrics.jsonl"
    if resume and checkpoints(out):
        state = load_checkpoint(checkpoints(out)[-1], model, opt)
        start = state["step"]
        with warnings.catch_warnings():  # stepping the schedule to the resumed step, before any update
            warnings.simplefilter("ignore", UserWarning)
            for _ in range(start):
                sched.step()
    elif ranks.main and metrics_path.exists():
        metrics_path.unlink()
    barrier(ranks)
    model.train()
    bar = tqdm(range(start, total), desc="sft", disable=not progress, initial=start, total=total)
    last: dict = {}
    tracker = make_tracker(cfg.report_to, out, cfg.to_dict()) if ranks.main else make_tracker("none", out, {})
    finished = FinishedStep(start, opt)  # start: 0, or the checkpoint resumed from
    try:
        for step in bar:
            epoch, pos = divmod(step, steps_per_epoch)
            order = list(range(len(examples)))
            random.Random(cfg.seed + epoch).shuffle(order)
            idx = order[pos * cfg.compute.micro_batch: (pos + 1) * cfg.compute.micro_batch]
            t0 = time.perf_counter()
            rows = idx[ranks.rank::ranks.world] if ranks.active else idx
            loss, tokens = _step(model, opt, examples, rows, tok.pad_token_id, device, ranks, cfg)
            if math.isnan(loss):
                raise SystemExit(f"SFT loss is NaN at step {step + 1}; the last checkpoint is kept")
            all_reduce_grads(params, ranks)
            torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            with signals_held():  # a stop lands before the update or after its record, not between
                opt.step()
                sched.step()
                last = {"step": step + 1, "epoch": epoch, "loss": loss, "tokens": tokens,
                        "lr": sched.get_last_lr()[0], "seconds": time.perf_counter() - t0}
                if ranks.main:
                    with open(metrics_path, "a", encoding="utf-8") as f:
                        f.write(json.dumps(last) + "\n")
                    tracker.log(last, step + 1)
                finished = FinishedStep(step + 1, opt, {"epoch": epoch})
            bar.set_postfix(loss=f"{last['loss']:.3f}")
            if (step + 1) % max(1, cfg.checkpoints.every) == 0:
                if ranks.main:
                    save_checkpoint(out, step + 1, model, opt, {"epoch": epoch}, keep=cfg.checkpoints.keep)
                barrier(ranks)
    except KeyboardInterrupt:
        if ranks.main:
            finished.save_on_stop(out, model, opt, keep=cfg.checkpoints.keep)
        raise
    tracker.close()
    summary = {"examples": len(examples), "skipped": skipped, "steps": total,
               "final": last, "adapter": str(out / "adapter")}
    if ranks.main:
        plot_training(metrics_path, out / "training.png")
        save_adapter(model, out / "adapter")
        atomic_write_text(out / "summary.json", json.dumps(summary, indent=1))
    barrier(ranks)
    return summary


def _step(model, opt, examples: list, rows: list[int], pad_id: int, device, ranks: Ranks, cfg: TrainConfig,
          pass_cost: float = PASS_COST) -> tuple[float, int]:
    """This rank's share of one step, backward with the step's token mean as the loss; returns the
    step's loss and token count (the same on every rank).

    The rows run in padding-light passes (``chunk_lengths``: rows of like length together, a long
    one alone), not padded to the longest in one pass: the recipe's demonstrations run from 512 to
    2,088 tokens, and one padded pass of four fed 1.5 times their tokens.  Each pass's loss is its
    token sum over the step's token count on all ranks, so the passes add up to the one-pass mean.
    A rank with no example still takes part in the collectives (its gradients count as zero).
    ``pass_cost=1e9`` is the one padded pass (bench/sft_layout.py's reference)."""
    from .rl import set_checkpointing, wants_checkpointing

    n_local = sum(sum(examples[i][1][1:]) for i in rows)  # the tokens sft_loss averages over (the first carries none)
    n_masked = sum(sum(examples[i][1]) for i in rows)  # what one process logs as "tokens"
    n_total, n_logged = (int(n) for n in all_reduce_sum([n_local, n_masked], ranks))
    opt.zero_grad(set_to_none=True)
    part = 0.0
    for chunk in chunk_lengths([len(examples[i][0]) for i in rows], max(1, len(rows)), pass_cost) if rows else []:
        batch = [rows[k] for k in chunk]
        ids, attn, lmask = pad_batch([examples[i][0] for i in batch], [examples[i][1] for i in batch], pad_id,
                                     device=device)
        set_checkpointing(model, wants_checkpointing(cfg, model, ids.numel()))
        loss = sft_loss(model, ids, attn, lmask, denominator=n_total)
        loss.backward()
        part += float(loss.detach())
    return all_reduce_sum([part], ranks)[0], n_logged
