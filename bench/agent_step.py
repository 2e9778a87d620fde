"""Benchmark one RL step of the research agent (ours) against TRL's GRPOTrainer with tools, at equal work.

    python bench/agent_step.py [--steps 3] [--rounds 2] [--questions 4] [--model smollm2-135m]
                               [--init-adapter DIR] [--corpus DIR] [--retriever hybrid] [--threads T]
                               [--sides ours,trl] [--trl-no-stop] [--verbose] [--note TEXT]

Work per step, the same on both sides: smollm2-135m with a fresh LoRA adapter (r=16, α=32, dropout
0.05, q_proj/v_proj); ``--questions`` Factbook training questions × G=4 rollouts at temperature 0.7
(top_k 0, top_p 1); the research agent's fast prompt (its action help as the system message); up to
3 tool calls (search / open / find) and 4 turns of at most 48 new tokens, **each turn ending at the
action's closing tag** (``prompts.STOP_STRINGS``) or EOS; search results, pages and find lines from
the same corpus through the same ``LocalBrowser`` and the same observation text
(``ResearchEnvironment.act``: 3 hits, observations cut to 256 tokens, the calls-left note); reward
F1 + action penalty (``rewards.f1_with_action_penalty``); GRPO group advantages; KL 0.05 to the base
model (the adapter disabled); AdamW at lr 5e-6; grad-norm clip 1.0; the tool results' tokens masked
out of the loss.

- ours: ``ResearchTasks.run_rollouts`` (the agent loop over the batched ``LocalPolicy``, every
  rollout in flight) → ``f1_penalty`` → ``group_advantages`` → ``rl.policy_update``;
- TRL:  ``GRPOTrainer(environment_factory=...)``: an environment class whose ``search`` / ``open``
  / ``find`` methods call a fork of the same browser through the same ``ResearchEnvironment``,
  TRL's own tool-call parsing (a ``response_template`` for the agent's ``<search>…</search>``
  tags, since the action format is plain-text tags) and its masking of tool results
  (``max_tool_calling_iterations=3``, ``generation_kwargs={"max_new_tokens": 48, "stop_strings":
  the agent's}`` per turn, ``max_completion_length`` = the rest of our 1,024-token budget;
  per_device_train_batch_size = all rollouts, num_generations 4, steps_per_generation 1, beta 0.05).

TRL's transformers generation is called without a tokenizer, so ``stop_strings`` alone would be
refused; the bench hands the tokenizer to the model's ``generate`` (a wrapper on the trainer's model,
which also counts the tokens each turn generated and the seconds spent generating).  Without it
(``--trl-no-stop``, the earlier bench) a TRL turn runs on past ``</search>`` to 48 tokens and often
writes and executes a second action: 3.2× the tokens and 3× the tool calls of ours.  What still
differs: TRL renders each tool result as a chat turn of its own (``<|im_start|>user`` ..., then a new
assistant header; the chat template below), ours appends it inline to the one assistant turn (a few
more prompt tokens per call on TRL's side); a turn that is no action ends a TRL episode, where ours
answers it with the invalid-action note and goes on.  So both sides print what they did per step —
generated tokens, tool calls, turns — beside s/step and s per generated token.

Each side runs in its own subprocess (its own peak RSS).  s/step is the mean over steps 2..N (the
first includes warm-up).  ``--rounds R`` runs the sides R times, alternating which goes first, and
reports the median of the rounds' ratios with their spread; the raw JSON (every step of every side
of every round) goes to docs/results/bench/.  The issue's goal: ours ≤ 0.5 × TRL's s/step.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.raw import add_raw_flags, write_raw  # noqa: E402

GROUP = 4
LORA = dict(r=16, lora_alpha=32, lora_dropout=0.05, target_modules=["q_proj", "v_proj"])
LR, BETA, TEMPERATURE = 5e-6, 0.05, 0.7
TOOL_CALLS, TURNS, TURN_TOKENS, TOTAL_TOKENS = 3, 4, 48, 1024
RESULT = "RESULT "

# TRL's side: ChatML like smollm2's own template (system and user turns render identically, so the
# prompts are token for token ours), plus what a tool-calling template must render: the assistant's
# tool calls as the agent's action tags, and a tool result as a user turn holding <result>...</result>.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if loop.first and messages[0]['role'] != 'system' -%}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- if message['role'] == 'tool' -%}"
    "{{ '<|im_start|>user\\n<result>\\n' + message['content'] + '\\n</result><|im_end|>\\n' }}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{ '<|im_start|>assistant\\n' + (message['content'] or '') }}"
    "{%- for call in message.get('tool_calls') or [] -%}"
    "{%- set f = call['function'] -%}"
    "{{ '<' + f['name'] + '>' }}"
    "{%- for k, v in f['arguments'].items() -%}{%- if k != 'query' -%}{{ k ~ '=' }}{%- endif -%}{{ v }}{%- endfor -%}"
    "{{ '</' + f['name'] + '>' }}"
    "{%- endfor -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)
# How TRL (transformers' response parser) reads a tool call out of a turn: the agent's action tags.
RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open_pattern": r"<(?P<name>search|open|find)>",
            "close_pattern": r"</(?:search|open|find)>",
            "repeats": True,
            "content": "text",
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": {"query": "{content}"}}},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


def rss_mb() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


class ToolClock:
    """Seconds spent in the browser's search / open / find, on either side (a class-level wrapper)."""

    def __init__(self):
        from corpus.local import LocalBrowser

        self.seconds, self.calls = 0.0, 0
        for name in ("search", "open", "find"):
            original = getattr(LocalBrowser, name)
            setattr(LocalBrowser, name, self._timed(original))

    def _timed(self, fn):
        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.seconds += time.perf_counter() - t0
                self.calls += 1
        return timed

    def take(self) -> tuple[float, int]:
        out = (self.seconds, self.calls)
        self.seconds, self.calls = 0.0, 0
        return out


def train_questions(n: int) -> list[dict]:
    from corpus.files import read_jsonl
    from research_agent.tasks import default_task_file

    return read_jsonl(str(default_task_file()), required=("question",), split="train")[:n]


def bench_browser(args):
    from corpus import open_browser

    return open_browser(corpus=args.corpus or None, retriever=args.retriever)


class GenerateClock:
    """Wraps a model's ``generate``: hands it the tokenizer (so ``stop_strings`` work), and counts the
    rows, the tokens each row generated before its first EOS / pad, and the seconds spent in it."""

    def __init__(self, model, tok, stop: bool):
        self.inner, self.tok, self.stop = model.generate, tok, stop
        eos = tok.eos_token_id
        self.ends = {eos} if isinstance(eos, int) else set(eos or [])
        if tok.pad_token_id is not None:
            self.ends.add(tok.pad_token_id)
        self.seconds, self.rows, self.tokens = 0.0, 0, 0
        model.generate = self

    def __call__(self, *a, **kw):
        import torch

        if self.stop:
            kw.setdefault("tokenizer", self.tok)
        prompt_len = kw["input_ids"].shape[1] if "input_ids" in kw else a[0].shape[1]
        t0 = time.perf_counter()
        out = self.inner(*a, **kw)
        self.seconds += time.perf_counter() - t0
        new = out[:, prompt_len:]
        is_end = torch.isin(new, torch.tensor(sorted(self.ends)))
        lengths = torch.where(is_end.any(dim=1), is_end.int().argmax(dim=1), torch.full_like(is_end[:, 0], new.shape[1],
                                                                                           dtype=torch.long))
        self.rows += new.shape[0]
        self.tokens += int(lengths.sum())
        return out

    def take(self) -> tuple[float, int, int]:
        out = (self.seconds, self.rows, self.tokens)
        self.seconds, self.rows, self.tokens = 0.0, 0, 0
        return out


def agent_config():
    from research_agent.agent import AgentConfig

    return AgentConfig(template="fast", max_turns=TURNS, max_tool_calls=TOOL_CALLS, max_new_tokens=TURN_TOKENS,
                       max_total_tokens=TOTAL_TOKENS, temperature=TEMPERATURE)


# ---- the two sides, each run in its own process -------------------------------------------------
def run_ours(args) -> dict:
    import random

    import torch

    from research_agent.inference.policy import LocalPolicy
    from research_agent.tasks import ResearchTasks
    from research_agent.train.algorithms import group_advantages
    from research_agent.train.config import TrainConfig
    from research_agent.train.rl import SafeReward, make_reward, policy_update, setup_lora

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    cfg = TrainConfig(model=args.model, lora={"r": LORA["r"], "alpha": LORA["lora_alpha"],
                                              "dropout": LORA["lora_dropout"], "targets": list(LORA["target_modules"])},
                      lr=LR, kl_coef=BETA, group_size=GROUP, algorithm="grpo", agent=agent_config(),
                      max_grad_norm=1.0, seed=args.seed, scoring={"reward": "f1_penalty"},
                      compute={"concurrency": args.questions * GROUP}, init_adapter=args.init_adapter or None)
    model, tok = setup_lora(cfg, progress=False)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr)
    policy = LocalPolicy(model, tok, name=f"{args.model}+lora")
    browser = bench_browser(args)
    clock = ToolClock()
    tasks = ResearchTasks()
    reward = SafeReward(make_reward("f1_penalty"), 0.0)
    questions = train_questions(args.questions)
    load_rss = rss_mb()
    rows = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        torch.manual_seed(args.seed * 100_003 + step)
        items = [it for q in questions for it in tasks.group_items(q, step, cfg)]
        trajs = tasks.run_rollouts(items, policy, browser, cfg)
        gen_s = time.perf_counter() - t0
        for t in trajs[: args.show if step == 0 else 0]:
            print(f"[ours rollout] {json.dumps([s.completion for s in t.steps])[:1500]}", file=sys.stderr)
        tools_s, calls = clock.take()
        rewards = [reward(t, step).score for t in trajs]
        adv = group_advantages(rewards, GROUP, "grpo")
        chosen = [i for i, t in enumerate(trajs) if any(t.token_mask)]
        model.train()
        policy_update(model, opt, params, trajs, adv, chosen, cfg, tok.pad_token_id)
        model.eval()
        rows.append({"s": time.perf_counter() - t0, "rollout_s": gen_s, "tools_s": tools_s, "tool_calls": calls,
                     "gen_tokens": sum(t.generated_tokens for t in trajs),
                     "turns": sum(t.turns for t in trajs),
                     "invalid_turns": sum(1 for t in trajs for st in t.steps if not st.valid),
                     "answered": sum(1 for t in trajs if t.answered),
                     "masked_tokens": sum(len(t.token_mask) - sum(t.token_mask) for t in trajs),
                     "reward": sum(rewards) / len(rewards),
                     "searches": sum(t.count("search") for t in trajs) / len(trajs)})
    return {"side": "ours", "steps": rows, "load_rss_mb": load_rss, "peak_rss_mb": peak_rss_mb(),
            "torch_threads": torch.get_num_threads()}


def run_trl(args) -> dict:
    import torch
    import trl
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from research_agent import prompts
    from research_agent.actions import Action, parse_action
    from research_agent.agent import ResearchEnvironment
    from research_agent.inference.models import load_model
    from research_agent.trajectory import Step
    from rewards.qa import f1_with_action_penalty

    torch.manual_seed(args.seed)
    model, tok = load_model(args.model, progress=False)
    if args.init_adapter:  # as our side's init_adapter: merged into the base, a fresh LoRA on top
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, args.init_adapter).merge_and_unload()
    tok.chat_template = CHAT_TEMPLATE
    tok.response_template = RESPONSE_TEMPLATE
    browser = bench_browser(args)
    clock = ToolClock()
    config = agent_config()
    load_rss = rss_mb()

    class ResearchTools:
        """The agent's tools for one rollout, through the same ResearchEnvironment as the agent loop."""

        def __init__(self):
            self.env = self.traj = None

        def reset(self, question: str = "", answers=None, **kw) -> None:
            self.env = ResearchEnvironment(tok, browser.fork(), config, question, gold={"answers": answers or []})
            self.traj = self.env.new_trajectory()

        def _call(self, name: str, argument: str) -> str:
            step = Step(action=name, argument=str(argument))
            self.traj.steps.append(step)
            body, note = self.env.act(self.traj, step, Action(name, str(argument)))
            ids = tok.encode(body, add_special_tokens=False)
            if len(ids) > config.observation_tokens:  # as the agent loop's observe() does
                body = tok.decode(ids[: config.observation_tokens]) + prompts.TRUNCATED
            return f"{body}\n{note}" if note else body

        def search(self, query: str) -> str:
            """Search the documents.

            Args:
                query: what to search for
            """
            return self._call("search", query)

        def open(self, query: str) -> str:
            """Read a document or a search result by its id.

            Args:
                query: the id of a document or a result, e.g. factbook/pe#0
            """
            return self._call("open", query)

        def find(self, query: str) -> str:
            """Show the lines of the opened document that contain the text.

            Args:
                query: the text to look for
            """
            return self._call("find", query)

    shown = [0]

    def agent_reward(completions, environments=None, **kw):
        out = []
        for messages, env in zip(completions, environments, strict=True):
            if shown[0] < args.show:
                shown[0] += 1
                print(f"[trl rollout {shown[0]}] {json.dumps(messages)[:1500]}", file=sys.stderr)
            last = next((m for m in reversed(messages) if m.get("role") == "assistant"), {})
            action = parse_action(last.get("content") or "")
            env.traj.answer = action.argument if action.name == "answer" and action.valid else None
            out.append(f1_with_action_penalty(env.traj).score)
        return out

    n_rollouts = args.questions * GROUP
    gen: list[GenerateClock] = []  # set once the trainer (and its LoRA-wrapped model) exists

    class Timer(TrainerCallback):
        def __init__(self):
            self.rows: list[dict] = []
            self.t0 = 0.0

        def on_step_begin(self, args, state, control, **kw):
            clock.take()
            gen[0].take()
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            tools_s, calls = clock.take()
            gen_s, turns, tokens = gen[0].take()
            self.rows.append({"s": time.perf_counter() - self.t0, "rollout_s": gen_s, "tools_s": tools_s,
                              "tool_calls": calls, "gen_tokens": tokens, "turns": turns})

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and self.rows and "completions/mean_length" in logs:
                # TRL's count: the model's tokens of each rollout, each turn's closing EOS / pad included
                self.rows[-1].update(gen_tokens_logged=float(logs["completions/mean_length"]) * n_rollouts,
                                     reward=float(logs.get("reward", float("nan"))))

    system = prompts.system_prompt("fast")
    rows = [{"prompt": [{"role": "system", "content": system},
                        {"role": "user", "content": prompts.QUESTION.format(question=q["question"])}],
             "question": q["question"], "answers": q.get("answers", [])} for q in train_questions(args.questions)]
    timer = Timer()
    prompt_len = len(tok.apply_chat_template(rows[0]["prompt"], add_generation_prompt=True, tokenize=True,
                                             return_dict=False))
    with tempfile.TemporaryDirectory(prefix="bench-agent-step-trl-") as tmp:
        per_turn = {"max_new_tokens": TURN_TOKENS}
        if not args.trl_no_stop:
            per_turn["stop_strings"] = list(prompts.STOP_STRINGS)
        gcfg = GRPOConfig(output_dir=tmp, use_cpu=True, per_device_train_batch_size=n_rollouts,
                          num_generations=GROUP, steps_per_generation=1,
                          max_completion_length=TOTAL_TOKENS - prompt_len, max_tool_calling_iterations=TOOL_CALLS,
                          generation_kwargs=per_turn,
                          temperature=TEMPERATURE, top_p=1.0, top_k=0, learning_rate=LR, beta=BETA,
                          max_grad_norm=1.0, logging_steps=1, report_to=[], max_steps=args.steps, bf16=False,
                          save_strategy="no", seed=args.seed, shuffle_dataset=False, disable_tqdm=True)
        trainer = GRPOTrainer(model=model, reward_funcs=[agent_reward], args=gcfg,
                              train_dataset=Dataset.from_list(rows * max(1, args.steps)), processing_class=tok,
                              peft_config=LoraConfig(task_type="CAUSAL_LM", **LORA), callbacks=[timer],
                              environment_factory=ResearchTools)
        gen.append(GenerateClock(trainer.model, tok, stop=not args.trl_no_stop))
        trainer.train()
    return {"side": "trl", "trl_version": trl.__version__, "steps": timer.rows, "load_rss_mb": load_rss,
            "peak_rss_mb": peak_rss_mb(), "torch_threads": torch.get_num_threads(), "prompt_tokens": prompt_len,
            "stop_strings": per_turn.get("stop_strings")}


# ---- the driver ---------------------------------------------------------------------------------
def child(args) -> int:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    res = run_ours(args) if args.side == "ours" else run_trl(args)
    print(RESULT + json.dumps(res), flush=True)
    return 0


def spawn(side: str, args) -> dict | None:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--side", side, "--steps", str(args.steps),
           "--questions", str(args.questions), "--model", args.model, "--seed", str(args.seed),
           "--threads", str(args.threads), "--show", str(args.show), "--init-adapter", args.init_adapter,
           "--corpus", args.corpus, "--retriever", args.retriever, *(["--trl-no-stop"] if args.trl_no_stop else [])]
    print(f"[{side}] running {args.steps} step(s) in a subprocess ...", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None if args.verbose else subprocess.PIPE,
                          text=True, timeout=args.timeout or None)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT):])
    print(f"[{side}] failed (exit {proc.returncode}); last output:", file=sys.stderr)
    print((proc.stdout or "")[-2000:], (proc.stderr or "")[-4000:], sep="\n", file=sys.stderr)
    return None


def mean_after_first(rows: list[dict], key: str) -> float:
    vals = [r[key] for r in (rows[1:] if len(rows) > 1 else rows) if r.get(key) is not None]
    return sum(vals) / len(vals) if vals else float("nan")


def per_step(side: dict) -> dict[str, float]:
    """One side's figures of a round: means over steps 2..N."""
    rows = side["steps"]
    out = {k: mean_after_first(rows, k) for k in ("s", "rollout_s", "tools_s", "tool_calls", "gen_tokens", "turns")}
    out["s_per_token"] = out["s"] / out["gen_tokens"] if out["gen_tokens"] else float("nan")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=3, help="optimizer steps per side (mean over steps 2..N)")
    p.add_argument("--rounds", type=int, default=2, help="run the sides this many times, alternating which "
                   "goes first; the verdict is the median of the rounds' ratios")
    p.add_argument("--questions", type=int, default=4, help="training questions per step (x G=4 rollouts)")
    p.add_argument("--model", default="smollm2-135m", help="named offline model, local path or hub id")
    p.add_argument("--init-adapter", default="", help="an SFT adapter both sides start from (merged into the "
                   "base weights, a fresh LoRA on top); without one the untrained model rarely writes an action")
    p.add_argument("--corpus", default="", help="corpus directory (default: the default corpus)")
    p.add_argument("--retriever", default="hybrid", help="dense, bm25 or hybrid, on both sides")
    p.add_argument("--trl-no-stop", action="store_true", help="TRL's turns without the agent's stop strings "
                   "(the earlier, unequal work: its turns run on to 48 tokens)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch threads in each side (0: torch's default)")
    p.add_argument("--sides", default="ours,trl", help="which sides to run, comma separated")
    p.add_argument("--timeout", type=float, default=0, help="seconds allowed per side (0: no limit)")
    p.add_argument("--verbose", action="store_true", help="show the sides' stderr (TRL's logs)")
    p.add_argument("--show", type=int, default=0, help="print this many rollouts of each side's first step "
                   "(with --verbose)")
    add_raw_flags(p)
    p.add_argument("--side", choices=("ours", "trl"), help=argparse.SUPPRESS)  # internal: run one side
    args = p.parse_args(argv)
    if args.steps < 1 or args.rounds < 1:
        raise SystemExit("--steps and --rounds must be at least 1")
    if args.side:
        return child(args)
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    for side in sides:
        if side not in ("ours", "trl"):
            raise SystemExit(f"unknown side {side!r}; use ours and/or trl")
    rounds = []
    for i in range(args.rounds):  # alternate which side goes first: a slow spell falls on both
        order = sides if i % 2 == 0 else sides[::-1]
        rounds.append({side: spawn(side, args) for side in order})

    span = f"steps 2..{args.steps}" if args.steps > 1 else "step 1 only"
    print(f"\nAgent RL step: {args.model} + LoRA r{LORA['r']} ({','.join(LORA['target_modules'])}), "
          f"{args.questions} Factbook questions x G={GROUP}, <= {TOOL_CALLS} tool calls, {TURNS} turns x "
          f"{TURN_TOKENS} tokens, T={TEMPERATURE}, KL {BETA}, reward f1_penalty, {args.steps} step(s); TRL's turns "
          f"{'run to 48 tokens (no stop strings)' if args.trl_no_stop else 'stop at the closing tag, as ours'}")
    names = {"ours": "ours (agent loop + policy_update)", "trl": "TRL GRPOTrainer + environment_factory"}
    for i, rnd in enumerate(rounds, 1):
        print(f"  round {i}:")
        for side in sides:
            r = rnd.get(side)
            if r is None:
                print(f"    {names[side]:<40} failed (rerun with --verbose)")
                continue
            f = per_step(r)
            print(f"    {names[side] + (' ' + r['trl_version'] if side == 'trl' else ''):<40} "
                  f"{f['s']:7.2f} s/step (first {r['steps'][0]['s']:.1f} s): generation {f['rollout_s']:.2f} s, "
                  f"the rest {f['s'] - f['rollout_s']:.2f} s; {f['gen_tokens']:.0f} generated tokens, "
                  f"{f['s_per_token']:.3f} s/token; {f['tool_calls']:.1f} tool calls ({f['tools_s']:.2f} s), "
                  f"{f['turns']:.0f} turns; peak RSS {r['peak_rss_mb']:.0f} MB")
    print(f"  (per step: mean of {span}; generated tokens: the model's own before EOS on both sides, tool "
          "results not counted; generation on TRL's side is the time inside model.generate)")
    both = [r for r in rounds if r.get("ours") and r.get("trl")]
    ratios = [per_step(r["ours"])["s"] / per_step(r["trl"])["s"] for r in both]
    if ratios:
        per_tok = [per_step(r["ours"])["s_per_token"] / per_step(r["trl"])["s_per_token"] for r in both]
        work = [per_step(r["trl"])["gen_tokens"] / per_step(r["ours"])["gen_tokens"] for r in both]
        calls = [per_step(r["trl"])["tool_calls"] / max(per_step(r["ours"])["tool_calls"], 1e-9) for r in both]
        ratio = statistics.median(ratios)
        print(f"\n  ours / TRL s/step per round: {', '.join(f'{x:.2f}x' for x in ratios)}; median {ratio:.2f}x "
              f"({'meets' if ratio <= 0.5 else 'misses'} the goal of <= 0.50x)")
        print(f"  ours / TRL s per generated token: {', '.join(f'{x:.2f}x' for x in per_tok)}; "
              f"median {statistics.median(per_tok):.2f}x")
        print(f"  the work, TRL / ours: generated tokens {', '.join(f'{x:.2f}x' for x in work)}, tool calls "
              f"{', '.join(f'{x:.2f}x' for x in calls)}")
    write_raw("agent_step", args, {
        "work": {"questions": args.questions, "group": GROUP, "tool_calls": TOOL_CALLS, "turns": TURNS,
                 "turn_tokens": TURN_TOKENS, "total_tokens": TOTAL_TOKENS, "temperature": TEMPERATURE,
                 "kl": BETA, "lr": LR, "lora": LORA, "trl_stop_strings": not args.trl_no_stop},
        "rounds": rounds,
    }, variant=args.model)
    return 0 if all(all(r.values()) for r in rounds) else 1


if __name__ == "__main__":
    sys.exit(main())
