"""Greedy research and code episodes and one RL step, recorded to compare two versions of the code.

``python tests/agent/equivalence.py OUT.json`` records them with the code it is run from;
``test_equivalence.py`` runs the same here and compares with ``tests/fixtures/equivalence.json``,
recorded before the agent loops were merged into one. A refactor that changes an action, an
answer, a token of a stream or its mask, or the RL step's metrics beyond float tolerance fails it.
Only APIs that both versions have are used (``run_batch``, ``run_code_batch``, ``train_rl``).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# the small corpus of tests/conftest.py: France, Germany and their neighbours
SMALL_GECS = ["fr", "gm", "it", "sp", "be", "lu", "sz", "au", "nl", "po", "an", "mn", "ez", "da", "pl"]
QUESTIONS = [
    {"id": "q1", "question": "What is the capital of France?", "answers": ["Paris"]},
    {"id": "q2", "question": "Which countries border both Germany and Poland?", "answers": ["Czechia"]},
    {"id": "q3", "question": "What is the population of Belgium?", "answers": ["11,977,634"]},
]
RL_FIELDS = ("reward", "pass_rate", "answer_rate", "void_turn_rate", "turns", "gen_tokens", "loss", "kl",
             "entropy", "trained_trajectories", "kept_groups")


def _digest(values) -> str:
    return hashlib.sha256(json.dumps(values).encode()).hexdigest()[:16]


def episode(traj) -> dict:
    """What must not change: actions, arguments, answer, stop reason, and the exact token stream."""
    return {
        "id": traj.id,
        "actions": [(s.action, s.argument, s.valid) for s in traj.steps],
        "observations": [s.observation for s in traj.steps],
        "answer": traj.answer,
        "stop_reason": traj.stop_reason,
        "passed": traj.gold.get("passed"),
        "prompt": _digest(traj.prompt_ids),
        "tokens": _digest(traj.token_ids),
        "mask": _digest(traj.token_mask),
        "n_tokens": len(traj.token_ids),
    }


def record(model, tok, browser, corpus_dir: Path, docs_browser, code_tasks, work: Path) -> dict:
    from research_agent.agent import AgentConfig, run_batch
    from research_agent.code.agent import CodeAgentConfig, RedrawSettings, SubmissionSettings, run_code_batch
    from research_agent.inference.policy import LocalPolicy
    from research_agent.train.config import TrainConfig
    from research_agent.train.rl import train_rl

    policy = LocalPolicy(model, tok, name="smollm2-135m")
    research = run_batch(QUESTIONS, policy, browser, AgentConfig(max_new_tokens=48), progress=False, concurrency=1)
    managed = run_batch(QUESTIONS[:1], policy, browser, AgentConfig(max_new_tokens=48, context="managed",
                                                                    context_tokens=512), progress=False, concurrency=1)
    code = run_code_batch([{"id": t.id, "task": t} for t in code_tasks], policy, docs_browser,
                          CodeAgentConfig(mode="multi-tool", max_turns=3, max_new_tokens=96,
                                          # the recording predates these switches (their own tests: test_code_examples)
                                          submission=SubmissionSettings(stub_submits_last_run=False, flag_repeats=False,
                                                                        recall_passing_run=False,
                                                                        submit_last_run_at_limit=False),
                                          redraw=RedrawSettings(repeats=0)),
                          progress=False,
                          concurrency=1)
    tasks = work / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({**q, "split": "train"}) + "\n" for q in QUESTIONS[:2]))
    cfg = TrainConfig(model="smollm2-135m", tasks=str(tasks), retrieval={"corpus": str(corpus_dir)}, steps=1,
                      group_size=2, prompts_per_step=2, lr=1e-3,
                      filters={"low": 0.0, "high": 1.0, "zero_variance": False, "drop_void_turns": False},
                      compute={"concurrency": 1}, out=str(work / "rl"), agent={"max_turns": 3})
    summary = train_rl(cfg, browser=browser, progress=False)
    row = summary["final"]
    from safetensors.torch import load_file

    weights = load_file(str(Path(summary["adapter"]) / "adapter_model.safetensors"))
    return {
        "research": [episode(t) for t in research],
        "managed": [episode(t) for t in managed],
        "code": [episode(t) for t in code],
        "rl": {**{k: row[k] for k in RL_FIELDS},
               "lora_abs_sum": float(sum(t.abs().sum() for t in weights.values())),
               "lora_tensors": len(weights)},
    }


def main(out: str) -> None:
    from corpus import build_corpus, open_corpus
    from corpus.factbook import factbook_documents
    from research_agent.code.apidocs import api_documents
    from research_agent.code.tasks import load_tasks
    from research_agent.inference.models import load_model

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpus_dir = work / "factbook-small"
        build_corpus(out=corpus_dir, documents=list(factbook_documents(gecs=SMALL_GECS)), progress=False)
        docs_dir = work / "api-docs"
        build_corpus(out=docs_dir, documents=list(api_documents(["json"], progress=False)), progress=False)
        model, tok = load_model("smollm2-135m", progress=False)
        result = record(model, tok, open_corpus(corpus_dir), corpus_dir, open_corpus(docs_dir, retriever="bm25"),
                        load_tasks("humaneval", limit=2), work)
    Path(out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
