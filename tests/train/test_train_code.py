"""Code tasks through the one trainer: the update on code trajectories (real sandbox, real docs
corpus), a real-model run with code tool rates in the metrics, resume, the saved adapter in
``eval code``, and the config's task-type fields, defaults (real DataFrameBench) and errors.

Tasks are two short ones in BigCodeBench's JSONL format, so prompts stay short and the forward and
backward passes cheap; the loaders themselves are tested on the real benchmarks in tests/code."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from research_agent.code.tasks import load_tasks as load_code_tasks
from research_agent.configs import build
from research_agent.tasks import CodeTasks
from research_agent.train.algorithms import group_advantages
from research_agent.train.checkpoint import ResumeError, checkpoints
from research_agent.train.config import ConfigError, TrainConfig, load_config
from research_agent.train.curriculum import NO_KIND
from research_agent.train.rl import make_reward, policy_update, rollout_metrics, setup_lora, train_rl
from tests.doubles import ScriptedPolicy as _Scripted


def ScriptedPolicy(tokenizer, by_task):  # noqa: N802 - replies keyed by a phrase of each task's prompt
    return _Scripted(tokenizer, by_key=by_task, logprob=-0.3)

CODE = CodeTasks()


@pytest.fixture(scope="module")
def docs_dir(tmp_path_factory):
    """Where the trainer builds its API-docs corpus (one small module, json) on first use."""
    return tmp_path_factory.mktemp("apidocs") / "api-docs"


@pytest.fixture(scope="module")
def tiny_spec(tmp_path_factory):
    """Two short tasks in BigCodeBench's JSONL format; the task spec that names them."""
    path = tmp_path_factory.mktemp("tasks") / "tiny.jsonl"
    rows = []
    for i, (what, body, check) in enumerate([
        ("Return the list xs sorted ascending.", "return sorted(xs)", "task_func([3, 1, 2]), [1, 2, 3]"),
        ("Return the list xs reversed.", "return xs[::-1]", "task_func([1, 2, 3]), [3, 2, 1]"),
    ]):
        test = ("import unittest\nclass TestCases(unittest.TestCase):\n    def test_one(self):\n"
                f"        self.assertEqual({check})\n")
        rows.append({"task_id": f"Tiny/{i}", "instruct_prompt": f"{what}\n```\ndef task_func(xs):\n```",
                     "canonical_solution": f"    {body}\n", "code_prompt": "def task_func(xs):\n", "test": test,
                     "entry_point": "task_func"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f"bigcodebench:{path}"


@pytest.mark.model
def test_code_update_trains_model_tokens_only_and_moves_lora_not_base(docs_dir, tiny_spec):
    sort, rev = load_code_tasks(tiny_spec)
    cfg = TrainConfig(task_type="code", tasks=tiny_spec, retrieval={"corpus": str(docs_dir)},
                      code={"docs_modules": ["json"]}, group_size=1, prompts_per_step=2, lr=1e-3,
                      compute={"micro_batch": 2, "concurrency": 2},
                      agent={"test_feedback": False})  # each scripted run submits once
    assert cfg.scoring.reward == "code_shaped" and cfg.agent.max_total_tokens == 4096  # the code defaults
    model, tok = setup_lora(cfg, progress=False)
    policy = ScriptedPolicy(tok, {
        "sorted ascending": ["```python\nprint(sum([1, 2]))\n```\n", "```submit\ndef task_func(xs):\n    return xs\n```\n"],
        "reversed": ["<search>json dumps</search>", f"```submit\n{rev.meta['reference']}\n```\n"],
    })
    items = CODE.group_items(sort, 0, cfg) + CODE.group_items(rev, 0, cfg)
    assert [i["id"] for i in items] == ["Tiny/0::s0g0", "Tiny/1::s0g0"]
    trajs = CODE.run_rollouts(items, policy, CODE.make_browser(cfg), cfg)  # the trainer's dispatch to the code graph
    assert [[s.action for s in t.steps] for t in trajs] == [["execute", "submit"], ["search", "submit"]]
    assert "3" in trajs[0].steps[0].observation
    assert "json" in trajs[1].steps[0].observation  # a real docs hit came back
    for t in trajs:
        t.check_consistency()
        obs = sum(len(s.observation_ids) for s in t.steps)
        assert obs > 0 and len(t.token_ids) == t.generated_tokens + obs
    reward = make_reward(cfg.scoring.reward)
    rewards = [reward(t).score for t in trajs]
    correct = [CODE.is_correct(t, cfg) for t in trajs]
    assert rewards == [0.0, 1.0] and correct == [False, True]
    m = rollout_metrics(trajs, rewards, correct, CODE.tools)
    assert m["pass_rate"] == 0.5 and m["answer_rate"] == 1.0
    assert (m["tool_rate/execute"], m["tool_rate/search"], m["tool_rate/submit"]) == (0.5, 0.5, 1.0)
    assert not any(k.startswith("kind/") for k in m)  # no kinds given: no split
    m = rollout_metrics(trajs, rewards, correct, CODE.tools, kinds=["sort", "reverse"])
    assert (m["kind/sort/n"], m["kind/sort/reward"], m["kind/sort/pass_rate"]) == (1, 0.0, 0.0)
    assert (m["kind/reverse/n"], m["kind/reverse/reward"], m["kind/reverse/pass_rate"]) == (1, 1.0, 1.0)
    assert not any(k.startswith("kind/") for k in rollout_metrics(trajs, rewards, correct, CODE.tools,
                                                                  kinds=[NO_KIND, NO_KIND]))
    ran_out = copy.deepcopy(trajs[0])  # turns ran out after a run: scored on that code, never submitted
    ran_out.steps = ran_out.steps[:1]
    ran_out.meta["autosubmitted"] = True
    assert ran_out.answered and rollout_metrics([ran_out], [-0.1], [False], CODE.tools)["answer_rate"] == 0.0

    lora = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    base = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr)
    model.train()
    adv = group_advantages(rewards, cfg.group_size, cfg.algorithm)
    stats = policy_update(model, opt, params, trajs, adv, [0, 1], cfg, tok.pad_token_id)
    assert stats["tokens"] == sum(t.generated_tokens for t in trajs)  # tool output and test verdicts: no loss
    assert torch.isfinite(torch.tensor(stats["loss"]))
    assert any(not torch.equal(p, lora[n]) for n, p in model.named_parameters() if "lora_" in n)
    assert all(torch.equal(p, base[n]) for n, p in model.named_parameters() if "lora_" not in n)


@pytest.mark.model
def test_code_run_logs_code_tools_resumes_and_its_adapter_evaluates(tmp_path, docs_dir, tiny_spec):
    from eval.code import main as eval_code

    spec = tiny_spec
    cfg = TrainConfig(task_type="code", tasks=spec, retrieval={"corpus": str(docs_dir)}, code={"docs_modules": ["json"]},
                      out=str(tmp_path / "run"), steps=1, prompts_per_step=1, group_size=2,
                      agent={"max_turns": 2, "max_new_tokens": 12}, checkpoints={"every": 1},
                      filters={"low": 0, "high": 1, "zero_variance": False, "drop_void_turns": False}, lr=1e-3,
                      compute={"concurrency": 4})
    train_rl(cfg, progress=False)
    cfg.steps = 2
    train_rl(cfg, resume=True, progress=False)
    out = tmp_path / "run"
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert {"tool_rate/search", "tool_rate/execute", "tool_rate/submit", "pass_rate", "reward"} <= set(r)
        assert "tool_rate/open" not in r and r["error_rate"] == 0.0 and r["turns"] > 0
        assert torch.isfinite(torch.tensor(r["loss"]))
    saved = json.loads((out / "config.json").read_text())
    assert saved["task_type"] == "code" and saved["scoring"]["reward"] == "code_shaped"
    assert saved["agent"]["mode"] == "multi-tool" and saved["agent"]["redraw_repeats"] == 0  # the whole rollout config
    assert [p.name for p in checkpoints(out)] == ["step-1", "step-2"]
    assert (out / "training.png").stat().st_size > 1000
    # a resume that would change what the run computes names the field
    with pytest.raises(ResumeError, match="code_mode"):
        train_rl(build(TrainConfig, {**saved, "code_mode": "code-only", "steps": 3}), resume=True, progress=False)
    # the adapter is what `python -m eval code --adapter` loads
    ev = tmp_path / "eval"
    argv = ["--tasks", spec, "--mode", "code-only", "--model", "smollm2-135m", "--adapter", str(out / "adapter"),
            "--set", "max_new_tokens=8", "--set", "max_turns=1", "--limit", "1", "--out", str(ev), "--quiet"]
    assert eval_code(argv) == 0
    results = json.loads((ev / "results.json").read_text())
    assert results["adapter"] == str(out / "adapter") and results["modes"]["code-only"]["n"] == 1


def test_task_type_fields_map_from_toml_and_flags_and_bad_values_say_what_to_use(tmp_path):
    toml = tmp_path / "code.toml"
    toml.write_text('task_type = "code"\ntasks = "dataframebench:val"\ncode_mode = "code-only"\n'
                    'docs_modules = ["json", "re"]\nreward = "code_torl"\n')
    cfg, _ = load_config(["--config", str(toml), "--max-new-tokens", "256"])
    assert (cfg.task_type, cfg.tasks, cfg.agent.mode, cfg.code.docs_modules) == (
        "code", "dataframebench:val", "code-only", ["json", "re"])
    assert cfg.scoring.reward == "code_torl" and cfg.agent.max_new_tokens == 256 and cfg.agent.max_total_tokens == 4096
    assert CODE.make_browser(cfg) is None  # code-only rollouts have no docs to search
    research, _ = load_config([])
    assert (research.task_type, research.scoring.reward, research.agent.max_new_tokens) == ("research", "f1_penalty", 48)
    with pytest.raises(SystemExit, match="task_type must be one of research, code, not 'kode'"):
        load_config(["--task-type", "kode"])
    with pytest.raises(ConfigError, match="code_mode must be one of"):
        TrainConfig(task_type="code", agent={"mode": "all-tools"})
    with pytest.raises(ConfigError, match="retriever must be one of dense, bm25, hybrid"):
        TrainConfig(retrieval={"retriever": "sparse"})
    with pytest.raises(ConfigError, match="stage must be rl or sft"):
        TrainConfig(task_type="code", stage="dpo")

    dfb = CODE.load_tasks(TrainConfig(task_type="code"))  # the default: DataFrameBench's train split
    assert len(dfb) > 500 and all(t.source == "dataframebench:train" for t in dfb)
    with pytest.raises(SystemExit, match="unknown task spec 'mbpp'"):
        CODE.load_tasks(TrainConfig(task_type="code", tasks="mbpp"))


def test_bm25_rollouts_build_the_api_docs_without_embedding_them(tmp_path):
    """``--retriever bm25`` (as eval code's): the trainer's API docs are chunks and BM25 only, with no
    background embedder beside the rollouts, and searched by BM25."""
    from corpus.staged import BACKGROUND
    from corpus.store import dense_log_path

    docs = tmp_path / "docs"
    cfg = TrainConfig(task_type="code", retrieval={"corpus": str(docs), "retriever": "bm25"}, code={"docs_modules": ["json"]})
    browser = CODE.make_browser(cfg)
    assert browser.retriever == "bm25" and not BACKGROUND.get(docs) and not dense_log_path(docs).exists()
    assert "api/json.dumps" in [h.doc_id for h in browser.search("json dumps", k=3)]
