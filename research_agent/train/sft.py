"""SFT cold start on synthesized trajectories (D3/E9): LoRA, loss on the model's turns only.

The export is text (teacher and student tokenizers differ), so each example is rendered here with
the student's tokenizer exactly as the agent renders a live episode: the chat-template prompt,
then each completion (loss) followed by its observation (no loss).  A managed-context record gives
one example per turn instead: the prompt the agent would rebuild for that turn, then the turn.
Code tasks (``task_type="code"``) need no export: their demonstrations are replayed from the
tasks' reference solutions through the live code agent (``research_agent.code.demos``).
The resulting adapter is what RL starts from (``--init-adapter``).
"""

from __future__ import annotations

import json
import random
import sys
import time

import torch
from tqdm import tqdm

from corpus.packages import atomic_write_text
from research_agent import prompts
from research_agent.context import ContextBudgetError, managed_prompt

from .checkpoint import checkpoints, load_checkpoint, prepare_run, save_checkpoint
from .config import TrainConfig
from .loss import pad_batch, sft_loss
from .plots import plot_training


def render_example(tok, record: dict, template: str | None = None, max_tokens: int = 1024
                   ) -> tuple[list[int], list[int]] | None:
    """(input_ids, loss_mask) for one exported trajectory, or None when it does not fit."""
    msgs = prompts.messages(record["question"], template or record.get("template", "fast"))
    prompt = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    if hasattr(prompt, "input_ids"):
        prompt = prompt["input_ids"]
    ids, mask = list(prompt), [0] * len(prompt)
    for turn in record["turns"]:
        c = tok.encode(turn["completion"], add_special_tokens=False)
        ids += c
        mask += [1] * len(c)
        if turn.get("observation"):
            o = tok.encode(turn["observation"], add_special_tokens=False)
            ids += o
            mask += [0] * len(o)
    if len(ids) > max_tokens or not any(mask):
        return None
    return ids, mask


def render_managed(tok, record: dict, template: str | None, cfg: TrainConfig) -> list[tuple[list[int], list[int]]]:
    """One (input_ids, loss_mask) per turn of a managed-context record, each within the window."""
    out: list[tuple[list[int], list[int]]] = []
    done_c: list[str] = []
    done_o: list[str] = []
    for turn in record["turns"]:
        try:
            prompt = managed_prompt(tok, record["question"], done_c, done_o,
                                    template=template or record.get("template", "fast"),
                                    context_tokens=cfg.context_tokens, notes_tokens=cfg.notes_tokens,
                                    reserve=cfg.max_new_tokens)
        except ContextBudgetError:
            return []
        c = tok.encode(turn["completion"], add_special_tokens=False)
        if c and len(prompt) + len(c) <= cfg.context_tokens:
            out.append((prompt + c, [0] * len(prompt) + [1] * len(c)))
        done_c.append(turn["completion"])
        done_o.append(turn.get("observation", ""))
    return out


def render_examples(tok, record: dict, cfg: TrainConfig) -> list[tuple[list[int], list[int]]]:
    """The training examples of one exported record, in the context mode it was recorded in."""
    if record.get("context") == "managed":
        return render_managed(tok, record, cfg.template, cfg)
    example = render_example(tok, record, cfg.template, cfg.max_total_tokens)
    return [example] if example else []


def load_sft_records(path: str) -> list[dict]:
    out, bad = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            if isinstance(rec, dict) and "turns" in rec and "question" in rec:
                out.append(rec)
            else:
                bad += 1
    if bad:
        print(f"{path}: {bad} broken lines skipped", file=sys.stderr)
    return out


def code_examples(tok, cfg: TrainConfig, out, resume: bool, progress: bool
                  ) -> tuple[list[tuple[list[int], list[int]]], int]:
    """Code SFT: demonstrations from the tasks' reference solutions (``research_agent.code.demos``),
    rendered through the live code agent with this model's tokenizer into OUT/demos.jsonl (kept on
    --resume, so an interrupted build continues where it stopped)."""
    from research_agent.code.demos import build_demos

    from .task_types import agent_config, load_tasks, make_browser

    path = out / "demos.jsonl"
    if not resume and path.exists():
        path.unlink()
    demos = build_demos(load_tasks(cfg), tok, agent_config(cfg), path, docs_browser=make_browser(cfg),
                        limit=cfg.demo_tasks, recovery=cfg.demo_recovery, progress=progress)
    examples, skipped = [], 0
    for traj in demos:
        for ids, mask in traj.sequences():
            if len(ids) <= cfg.max_total_tokens and any(mask):
                examples.append((ids, mask))
            else:
                skipped += 1
    return examples, skipped


def train_sft(cfg: TrainConfig, resume: bool = False, progress: bool = True) -> dict:
    from .rl import save_adapter, setup_lora

    if not cfg.tasks and cfg.task_type != "code":
        raise SystemExit("--stage sft needs --tasks SFT.jsonl (from `python -m synth sft-export`)")
    out = prepare_run(cfg, resume)
    model, tok = setup_lora(cfg, progress=progress)
    if cfg.task_type == "code":
        examples, skipped = code_examples(tok, cfg, out, resume, progress)
    else:
        examples, skipped = [], 0
        for r in load_sft_records(cfg.tasks):
            found = render_examples(tok, r, cfg)
            examples += found
            skipped += not found
    if not examples:
        raise SystemExit(f"no usable SFT examples in {cfg.tasks or 'the code tasks'}")
    params = [p for p in model.parameters() if p.requires_grad]
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
                                     tok.pad_token_id)
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
