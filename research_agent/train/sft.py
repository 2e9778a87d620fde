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
import random
import time
from typing import Any

import torch
from tqdm import tqdm

from corpus.files import atomic_write_text
from research_agent.adapters import save_adapter
from research_agent.devices import model_device
from research_agent.tasks import (
    get_task_type,
    load_sft_records,
    render_example,
    render_examples,
    render_managed,
)

from .checkpoint import checkpoints, load_checkpoint, prepare_run, save_checkpoint
from .config import TrainConfig
from .loss import pad_batch, sft_loss
from .plots import plot_training

__all__ = ["load_sft_records", "render_example", "render_examples", "render_managed", "train_sft"]


def train_sft(cfg: TrainConfig, resume: bool = False, progress: bool = True, task_type: Any = None) -> dict:
    """Supervised fine-tuning on the examples ``task_type`` (default: the config's) supplies."""
    from .rl import setup_lora

    tasks = task_type or get_task_type(cfg.task_type)
    tasks.prepare(cfg)
    tasks.check_sft(cfg)
    out = prepare_run(cfg, resume)
    model, tok = setup_lora(cfg, progress=progress)
    examples, skipped = tasks.sft_examples(tok, cfg, out, resume, progress)
    if not examples:
        raise SystemExit(f"no usable SFT examples in {cfg.tasks or 'the code tasks'}")
    params = [p for p in model.parameters() if p.requires_grad]
    device = model_device(model)
    opt = torch.optim.AdamW(params, lr=cfg.lr)
    steps_per_epoch = (len(examples) + cfg.micro_batch - 1) // cfg.micro_batch
    total = steps_per_epoch * cfg.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / max(1, total)))
    start = 0
    metrics_path = out / "metrics.jsonl"
    if resume and checkpoints(out):
        state = load_checkpoint(checkpoints(out)[-1], model, opt)
        start = state["step"]
        for _ in range(start):
            sched.step()
    elif metrics_path.exists():
        metrics_path.unlink()
    model.train()
    bar = tqdm(range(start, total), desc="sft", disable=not progress, initial=start, total=total)
    last: dict = {}
    for step in bar:
        epoch, pos = divmod(step, steps_per_epoch)
        order = list(range(len(examples)))
        random.Random(cfg.seed + epoch).shuffle(order)
        idx = order[pos * cfg.micro_batch: (pos + 1) * cfg.micro_batch]
        t0 = time.perf_counter()
        ids, attn, lmask = pad_batch([examples[i][0] for i in idx], [examples[i][1] for i in idx],
                                     tok.pad_token_id, device=device)
        loss = sft_loss(model, ids, attn, lmask)
        if torch.isnan(loss):
            raise SystemExit(f"SFT loss is NaN at step {step + 1}; the last checkpoint is kept")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        opt.step()
        sched.step()
        last = {"step": step + 1, "epoch": epoch, "loss": float(loss.detach()), "tokens": int(lmask.sum()),
                "lr": sched.get_last_lr()[0], "seconds": time.perf_counter() - t0}
        with open(metrics_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(last) + "\n")
        bar.set_postfix(loss=f"{last['loss']:.3f}")
        if (step + 1) % max(1, cfg.checkpoint_every) == 0:
            save_checkpoint(out, step + 1, model, opt, {"epoch": epoch}, keep=cfg.keep_checkpoints)
    plot_training(metrics_path, out / "training.png")
    save_adapter(model, out / "adapter")
    summary = {"examples": len(examples), "skipped": skipped, "steps": total,
               "final": last, "adapter": str(out / "adapter")}
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1))
    return summary
