"""``python bench/gpu_check.py --recipe``: the whole training loop in one process, sized for one device call.

research demonstrations -> SFT -> RL (``rl_steps`` steps of ``rl_prompts`` x G rows in flight) -> the
RL adapter folded into one plain LoRA -> ``eval qa`` of the base model and of that adapter on the same
held-out Factbook questions -> ``eval compare`` (paired, question by question) -> ``recipe.ship`` into
OUT.  Every stage is one of the package's own commands with the recipe's flags (``recipe/plan.py``),
run in this process; only the sizes and the agent's budgets are smaller, so that it fits one device
call of 8 minutes (docs/benchmarks.md, "On a GPU").

The corpus is the Factbook profiles the chosen training questions and the held-out questions need
(plus four more): the held-out questions are the first ``eval_questions`` of ``factbook-test`` (its
seeded order, as ``eval qa --limit`` takes them), and the corpus is built for them, so every one is
answerable from it; it is smaller than the default corpus, and its scores are not the default
corpus's.  ``OUT`` receives only what a device machine hands back (at most 8 files): the shipped agent
(``agent.json``, ``adapter/``), its ``card.json``, ``compare.md`` and ``gpu_check.json``; the rest stays
in the scratch directory ``--work``.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.gpu_machine import (
    GGUF_MODULES,
    LOOP_MODULES,
    BusySampler,
    busy_reader,
    check_out,
    device_line,
    engine,
    peak_gb,
    pick_retriever,
    place_model,
    read_rows,
    require_modules,
    reset_peak,
    run_module,
    timed_steps,
)

EXTRA_GECS = ["fr", "gm", "it", "sp"]
EVAL_BENCH = "factbook-test"
WORK_MARK = ".gpu-check-work"  # a scratch directory this check made, and may empty again
REPORT = "gpu_check.json"


def _f(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass
class RecipeCheck:
    """The loop's sizes and budgets; the defaults are sized for one H100 call of 8 minutes."""

    model: str = _f("smollm2-135m", "the student (the recipe's default model; its 98 MB GGUF is the one that can "
                    "be carried to a device machine in a few calls)")
    device: str = _f("cuda", "cuda, cuda:N, or cpu for a dry run")
    dtype: str = _f("auto", "auto: bfloat16 on a GPU")
    retriever: str = _f("auto", "auto: hybrid where the embedder is installed, else bm25 (said in the report)")
    questions: int = _f(128, "training questions (the task set's first well-posed ones); RL draws from them in "
                        "order")
    demos: int = _f(64, "research demonstrations (gold-path tool calls on the corpus): SFT takes demos/4 steps")
    rl_steps: int = _f(32, "RL steps; the first (load, graph capture) is left out of the per-step figures")
    rl_prompts: int = _f(16, "questions per RL step; x group_size rows are in flight at once")
    group_size: int = _f(4, "rollouts per question (G)")
    eval_questions: int = _f(100, "held-out factbook-test questions each model answers")
    max_turns: int = _f(4, "agent turns (the recipe's 10, cut to fit the call)")
    max_tool_calls: int = _f(3, "tool calls (the recipe's 8)")
    max_new_tokens: int = _f(48, "tokens per turn (the recipe's)")
    max_total_tokens: int = _f(2048, "prompt + trajectory tokens (the recipe's 3072)")
    sft_lr: float = _f(5e-4, "the recipe's smollm2 SFT rate")
    rl_lr: float = _f(2e-4, "the recipe's smollm2 RL rate")
    micro_batch: int = _f(8, "rows per forward/backward of the RL update (the trainer's default is 2, for a CPU)")
    name: str = _f("", "the shipped agent's name (default gpu-check-MODEL)")

    @property
    def rows(self) -> int:
        return self.rl_prompts * self.group_size

    @property
    def agent_name(self) -> str:
        return self.name or f"gpu-check-{self.model}"


# ---- questions and corpus ---------------------------------------------------------------------------
def pick_questions(n: int, max_docs: int | None = 2) -> list[dict]:
    """The first ``n`` well-posed training questions answered by Factbook profiles, at most ``max_docs`` of
    them (a small corpus; None: any number, two-hop questions included)."""
    from corpus.factbook import ill_posed
    from research_agent.tasks import default_task_file

    out = []
    with open(default_task_file(), encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            docs = row.get("supporting_docs") or []
            if (row.get("split") == "train" and 0 < len(docs) <= (max_docs or len(docs))
                    and all(d.startswith("factbook/") for d in docs)
                    and not ill_posed(row)):
                out.append(row)
            if len(out) == n:
                break
    return out


def held_out(n: int) -> list[dict]:
    """The questions ``eval qa --bench factbook-test --limit n`` asks (seed 0)."""
    from eval.benchmarks import load_benchmark

    return load_benchmark(EVAL_BENCH, n)[0]


def profiles_for(*question_sets: list[dict]) -> list[str]:
    """The Factbook gec codes the questions' supporting documents name, plus ``EXTRA_GECS``."""
    return sorted({d.split("/", 1)[1] for qs in question_sets for q in qs for d in q.get("supporting_docs") or []
                   if d.startswith("factbook/")} | set(EXTRA_GECS))


def build_factbook_corpus(path: Path, gecs: list[str], retriever: str) -> int:
    """A corpus of those profiles at ``path``; BM25 only (no dense index, none started later) unless hybrid."""
    from corpus import build_corpus
    from corpus.factbook import factbook_documents

    docs = list(factbook_documents(gecs=gecs))
    build_corpus(out=path, documents=docs, progress=False, dense=retriever != "bm25", dense_later=False)
    return len(docs)


# ---- the plan -----------------------------------------------------------------------------------------
def stages(c: RecipeCheck, work: Path, out: Path, retriever: str) -> list[tuple[str, str, list[str]]]:
    """(name, module, argv) of every stage, in order; ``retriever`` is ``c.retriever`` resolved."""
    w = lambda *p: str(work.joinpath(*p))  # noqa: E731
    dev = ["--device", c.device, "--dtype", c.dtype]
    corpus = ["--corpus", w("corpus"), "--retriever", retriever]
    budgets = {"max_turns": c.max_turns, "max_tool_calls": c.max_tool_calls, "max_new_tokens": c.max_new_tokens,
               "max_total_tokens": c.max_total_tokens}
    agent = [x for k, v in budgets.items() for x in (f"--{k.replace('_', '-')}", str(v))]
    sets = [x for k, v in budgets.items() for x in ("--set", f"{k}={v}")]
    conc = ["--concurrency", str(c.rows)]
    evals = ["qa", "--bench", EVAL_BENCH, "--limit", str(c.eval_questions), "--model", c.model, *corpus, *sets, *conc,
             "--quiet", *dev]
    return [
        ("demonstrations", "synth.__main__", [
            "trajectories", "--qa", w("tasks.jsonl"), "--policy", "reference", "--model", c.model, "--split", "train",
            "--limit", str(c.demos), *corpus, "--concurrency", "16", "--max-turns", str(c.max_turns),
            "--max-tool-calls", str(c.max_tool_calls), "--max-new-tokens", str(c.max_new_tokens), "--set",
            f"max_total_tokens={c.max_total_tokens}", "--out", w("demonstrations"), *dev]),
        ("sft-export", "synth.__main__", [
            "sft-export", "--trajectories", w("demonstrations"), "--out", w("sft.jsonl"), "--min-f1", "0.8",
            "--tokenizer", c.model]),
        ("sft", "research_agent.train.__main__", [
            "--stage", "sft", "--model", c.model, "--tasks", w("sft.jsonl"), "--lr", str(c.sft_lr), "--epochs", "1",
            "--micro-batch", "4", "--max-total-tokens", str(c.max_total_tokens), "--checkpoint-every", "1000",
            "--out", w("sft"), *dev]),
        ("rl", "research_agent.train.__main__", [
            "--stage", "rl", "--model", c.model, "--init-adapter", w("sft", "adapter"), "--tasks", w("tasks.jsonl"),
            *corpus, "--algorithm", "reinforce", "--group-size", str(c.group_size), "--prompts-per-step",
            str(c.rl_prompts), "--steps", str(c.rl_steps), "--lr", str(c.rl_lr), "--kl-coef", "0", "--temperature",
            "1.0", "--micro-batch", str(c.micro_batch), "--checkpoint-every", "1000", *conc, *agent,
            "--out", w("rl"), *dev]),
        # one plain LoRA (the RL delta and the SFT adapter under it): the files that ship, and that are evaluated
        ("export", "research_agent.train.__main__", ["export", "--adapter", w("rl", "adapter"), "--out", w("adapter")]),
        ("eval-base", "eval.cli", [*evals, "--out", w("eval-base")]),
        ("eval-trained", "eval.cli", [*evals, "--adapter", w("adapter"), "--out", w("eval-trained")]),
        ("compare", "eval.cli", ["compare", w("eval-base"), w("eval-trained"), "--out", w("compare")]),
        ("ship", "recipe.ship", [
            "--adapter", w("adapter"), "--model", c.model, "--name", c.agent_name, "--out", str(out),
            "--retriever", retriever, *sets, w("eval-base"), w("eval-trained")]),
    ]


# ---- the figures ----------------------------------------------------------------------------------
def sft_figures(rows: list[dict]) -> dict:
    secs = sum(r["seconds"] for r in rows)
    return {"steps": len(rows), "s_per_step": round(secs / max(len(rows), 1), 2),
            "trained_tokens_per_s": round(sum(r.get("tokens", 0) for r in rows) / max(secs, 1e-9), 1)}


def rl_figures(rows: list[dict]) -> dict:
    """Per-step figures of an RL run's metrics rows, the first step left out when more than one ran:
    s/step split into rollout and update, and generated tokens/s from each step's own count."""
    if not rows:
        return {"steps": 0}
    timed = timed_steps(rows)
    n = len(timed)
    step_s = sum(r["seconds"] for r in timed)
    rollout_s = sum(r["rollout_seconds"] for r in timed)
    made = sum(r["rollout_generated_tokens"] for r in timed)
    return {"steps": len(rows), "timed_steps": [r["step"] for r in timed],
            "rows_per_step": max(r["rollout_trajectories"] for r in rows),
            "s_per_step": round(step_s / n, 2), "rollout_s_per_step": round(rollout_s / n, 2),
            "update_s_per_step": round((step_s - rollout_s) / n, 2),
            "generated_tokens": [r["rollout_generated_tokens"] for r in rows],
            "generated_tokens_per_s": round(made / max(rollout_s, 1e-9), 1),
            "trained_trajectories": [r.get("trained_trajectories") for r in rows],
            "reward_first_last": [round(rows[0].get("reward", 0.0), 3), round(rows[-1].get("reward", 0.0), 3)]}


def eval_figures(base: Path, trained: Path) -> dict:
    """Each run's headline metrics and the trained run paired against the base, question by question."""
    from eval.paired import paired_stats, run_scores

    keep = ("n", "em", "f1", "answer_rate", "citation_precision", "searches")
    runs = {}
    for label, d in (("base", base), ("trained", trained)):
        metrics = json.loads((d / "results.json").read_text(encoding="utf-8")).get("metrics", {})
        runs[label] = {k: round(metrics[k], 3) if isinstance(metrics[k], float) else metrics[k]
                       for k in keep if k in metrics}
    p = paired_stats(run_scores(base), run_scores(trained))
    p["f1_diff"] = round(p["f1_diff"], 3)
    p["f1_ci"] = [round(x, 3) for x in p["f1_ci"]]
    p["sign_test_p"] = round(p["sign_test_p"], 4)
    return {"bench": EVAL_BENCH, **runs, "paired": p}


def shown(module: str, argv: list[str], work: Path, out: Path) -> str:
    """A stage's command as the card records it: the scratch directory as $WORK, OUT as $OUT."""
    names = sorted([(str(work), "$WORK"), (str(out), "$OUT")], key=lambda x: -len(x[0]))  # the longer path first
    args = []
    for a in argv:
        for path, name in names:
            a = a.replace(path, name)
        args.append(a)
    return f"python -m {module.removesuffix('.__main__').replace('eval.cli', 'eval')} {shlex.join(args)}"


def prepare_work(work: Path | None) -> Path:
    """The scratch directory: a fresh temporary one, or ``work`` emptied if this check made it."""
    if work is None:
        work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    elif work.exists() and any(work.iterdir()):
        if not (work / WORK_MARK).exists():
            raise SystemExit(f"error: --work {work} holds files this check did not make; give an empty or new folder")
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    (work / WORK_MARK).write_text("scratch of bench/gpu_check.py --recipe: emptied by its next run\n")
    return work


def run_recipe_check(c: RecipeCheck, out: Path, work: Path | None, model_dir: Path | None, command: str) -> dict:
    """Run every stage, write OUT/gpu_check.json after each (a run cut off still reports), ship into OUT."""
    from bench.raw import raw_record
    from corpus.files import content_hash
    from recipe.artifacts import code_commit

    require_modules(LOOP_MODULES)
    found = place_model(c.model, model_dir)
    if found == "gguf":
        require_modules(GGUF_MODULES)
    info = device_line(c.device)
    retriever, why = pick_retriever(c.retriever)
    out.mkdir(parents=True, exist_ok=True)
    if list(out.iterdir()):
        raise SystemExit(f"error: --out {out} is not empty; it receives the shipped agent and the report only")
    work = prepare_work(work)
    print(json.dumps({**info, "retriever": retriever, "why": why, "work": str(work)}), flush=True)
    read = busy_reader(c.device)
    report = {**info, "mode": "recipe", "model": c.model, "weights": found, "retriever": retriever,
              "retriever_note": why, "config": asdict(c), "stages": {}, "complete": False}

    def write() -> None:
        (out / REPORT).write_text(json.dumps(raw_record("gpu_recipe", None, report, variant=c.model), indent=1,
                                             default=str) + "\n", encoding="utf-8")

    def timed(name: str, fn) -> None:
        reset_peak(c.device)
        t0 = time.perf_counter()
        with BusySampler(read) as busy:
            fn()
        report["stages"][name] = {"seconds": round(time.perf_counter() - t0, 1), "gpu_busy_pct": busy.percent(),
                                  "peak_gpu_gb": peak_gb(c.device)}
        write()
        print(f"== {name}: {report['stages'][name]}", flush=True)

    t_start = time.perf_counter()
    if found == "gguf":  # converted here once; every later stage loads the safetensors
        timed("convert", lambda: engine().models.resolve_model_dir(c.model))
    tasks, heldout = pick_questions(c.questions, max_docs=None), held_out(c.eval_questions)
    if len(tasks) < c.questions or len(heldout) < c.eval_questions:
        raise SystemExit(f"error: asked for {c.questions} training and {c.eval_questions} held-out questions; the "
                         f"task set has {len(tasks)} and {len(heldout)} that fit")
    (work / "tasks.jsonl").write_text("".join(json.dumps(q) + "\n" for q in tasks), encoding="utf-8")
    gecs = profiles_for(tasks, heldout)
    report["corpus"] = {"profiles": len(gecs), "retriever": retriever,
                        "scope": f"the Factbook profiles of the {len(tasks)} training and {len(heldout)} held-out "
                                 f"questions' supporting documents, plus {len(EXTRA_GECS)} more"}
    timed("corpus", lambda: build_factbook_corpus(work / "corpus", gecs, retriever))
    plan = stages(c, work, out, retriever)
    for name, module, argv in plan:
        timed(name, lambda m=module, a=argv: run_module(m, a))
    report["total_s"] = round(time.perf_counter() - t_start, 1)
    report["sft"] = sft_figures(read_rows(work / "sft" / "metrics.jsonl"))
    report["rl"] = {**rl_figures(read_rows(work / "rl" / "metrics.jsonl")),
                    "gpu_busy_pct": report["stages"]["rl"]["gpu_busy_pct"]}
    report["eval"] = eval_figures(work / "eval-base", work / "eval-trained")
    report["peak_gpu_gb"] = max((s["peak_gpu_gb"] for s in report["stages"].values() if s["peak_gpu_gb"] is not None),
                                default=None)
    compare = work / "compare"
    (out / "compare.md").write_text("\n\n".join(p.read_text(encoding="utf-8") for p in
                                                (compare / "table.md", compare / "paired.md") if p.exists()),
                                    encoding="utf-8")
    from recipe.run import question_inputs

    eval_argv = next(a for n, _, a in plan if n == "eval-base")
    card = {"name": c.agent_name, "model": c.model, "what": "the RL adapter of bench/gpu_check.py --recipe, folded "
            "with its SFT adapter into one plain LoRA", "command": command, "commit": code_commit() or "unknown (no git)",
            "device": info.get("gpu", c.device), "retriever": retriever,
            "inputs": {"tasks.jsonl": content_hash(work / "tasks.jsonl"), "sft.jsonl": content_hash(work / "sft.jsonl"),
                       "corpus": content_hash(work / "corpus"), **question_inputs("eval.cli", eval_argv)},
            "stages": [{"stage": n, "command": shown(m, a, work, out), "seconds": report["stages"][n]["seconds"]}
                       for n, m, a in plan],
            "numbers": {"eval": report["eval"], "rl": report["rl"], "sft": report["sft"], "total_s": report["total_s"]}}
    (out / "card.json").write_text(json.dumps(card, indent=1) + "\n", encoding="utf-8")
    report["complete"] = True
    write()
    report["out_files"] = check_out(out)
    write()
    print("\nRESULT " + json.dumps({k: report[k] for k in ("stages", "total_s", "sft", "rl", "eval", "peak_gpu_gb")}),
          flush=True)
    return report


def recipe_from_args(args) -> RecipeCheck:
    given = {k: getattr(args, k) for k in RecipeCheck.__dataclass_fields__ if getattr(args, k, None) is not None}
    return RecipeCheck(**given)


if __name__ == "__main__":  # pragma: no cover - run it through bench/gpu_check.py
    sys.exit("run: python bench/gpu_check.py --recipe")
