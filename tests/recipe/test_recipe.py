"""The one-command recipe: its stages are the package's CLIs, finished stages are skipped, a failed
stage stops with a clear message and leaves no marker, interrupted SFT and RL runs resume."""

from __future__ import annotations

import sys

import pytest

from recipe import Recipe, StageFailed, run_recipe, run_stage, stages
from recipe.__main__ import main


def test_stages_chain_the_package_clis_in_order(tmp_path):
    r = Recipe(out=tmp_path)
    plan = stages(r)
    names = [n for n, _, _ in plan]
    assert names == ["demonstrations", "sft-export", "sft", "rl", "eval-base", "eval-sft", "eval-rl", "compare"]
    argv = {n: a for n, _, a in plan}
    # each stage reads what the one before wrote
    assert argv["sft-export"][argv["sft-export"].index("--trajectories") + 1] == str(tmp_path / "demonstrations")
    assert argv["sft"][argv["sft"].index("--tasks") + 1] == str(tmp_path / "sft.jsonl")
    assert argv["rl"][argv["rl"].index("--init-adapter") + 1] == str(tmp_path / "sft" / "adapter")
    assert argv["eval-rl"][argv["eval-rl"].index("--adapter") + 1] == str(tmp_path / "rl" / "adapter")
    assert "--adapter" not in argv["eval-base"]
    # evaluated on the held-out split, with the agent limits the RL run trained under
    for n in ("eval-base", "eval-sft", "eval-rl"):
        assert argv[n][argv[n].index("--bench") + 1] == "factbook-test"
        assert f"max_turns={r.agent.max_turns}" in argv[n]
    assert argv["rl"][argv["rl"].index("--max-turns") + 1] == str(r.agent.max_turns)
    # research budgets, the same in every stage and in configs/research.toml (SFT must not cut a demonstration)
    assert argv["sft"][argv["sft"].index("--max-total-tokens") + 1] == str(r.agent.max_total_tokens)
    assert f"max_total_tokens={r.agent.max_total_tokens}" in argv["demonstrations"]
    import tomllib
    from pathlib import Path

    budgets = tomllib.loads((Path(__file__).parents[2] / "configs" / "research.toml").read_text())
    assert budgets == {k: getattr(r.agent, k) for k in ("max_turns", "max_tool_calls", "max_new_tokens", "max_total_tokens")}
    from research_agent.agent import AgentConfig
    from research_agent.configs import build
    from research_agent.train.config import TrainConfig

    # the one file is a valid --config of synth, eval and train
    assert build(AgentConfig, budgets).max_tool_calls == r.agent.max_tool_calls
    assert build(TrainConfig, budgets).agent.max_tool_calls == r.agent.max_tool_calls
    assert argv["compare"][1:4] == [str(tmp_path / f"eval-{n}") for n in ("base", "sft", "rl")]
    # every module named has the main(argv) the recipe calls
    import importlib

    for _, module, _ in plan:
        assert callable(importlib.import_module(module).main)


def test_every_searching_stage_uses_the_recipes_retriever(tmp_path):
    """Demonstrations, RL and the evals must rank hits the same way, or SFT imitates searches the
    evaluated agent never sees; and each CLI must accept the flag as the recipe spells it."""
    plan = stages(Recipe(out=tmp_path, retriever="bm25"))
    argv = {n: a for n, _, a in plan}
    for n in ("demonstrations", "rl", "eval-base", "eval-sft", "eval-rl"):
        assert argv[n][argv[n].index("--retriever") + 1] == "bm25", n
    from eval.cli import build_parser
    from research_agent.train.config import load_config
    from synth.__main__ import build_parser as synth_parser

    assert synth_parser().parse_args(argv["demonstrations"]).retriever == "bm25"
    assert build_parser().parse_args(argv["eval-rl"]).retriever == "bm25"
    assert load_config(argv["rl"])[0].retrieval.retriever == "bm25"
    assert "--retriever" not in argv["sft"]  # SFT does not search


@pytest.fixture
def stage_module(tmp_path, monkeypatch):
    """A real module on sys.path standing in for a stage CLI: records its argv, exits with a set code."""
    (tmp_path / "fake_stage_cli.py").write_text(
        "CALLS = []\nRC = 0\n\ndef main(argv):\n    CALLS.append(list(argv))\n    return RC\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import fake_stage_cli

    yield fake_stage_cli
    sys.modules.pop("fake_stage_cli", None)


def test_markers_skip_finished_stages_and_failures_stop_cleanly(tmp_path, stage_module, monkeypatch):
    import recipe.run as recipe

    out = tmp_path / "run"
    plan = [("one", "fake_stage_cli", ["a"]), ("rl", "fake_stage_cli", ["b"])]
    monkeypatch.setattr(recipe, "stages", lambda r: plan)
    stage_module.RC = 2
    with pytest.raises(StageFailed, match="stage one failed .*run the recipe again"):
        run_recipe(Recipe(out=out))
    assert not (out / ".done-one").exists() and stage_module.CALLS == [["a"]]
    stage_module.RC = 0
    run_recipe(Recipe(out=out))
    assert stage_module.CALLS[1:] == [["a"], ["b"]]
    assert (out / ".done-one").exists() and (out / ".done-rl").exists()
    run_recipe(Recipe(out=out))  # all done: nothing runs again
    assert len(stage_module.CALLS) == 3
    # a training run that left checkpoints is resumed, not restarted; other stages never get --resume
    for stage in ("sft", "rl"):
        (out / stage / "checkpoints").mkdir(parents=True)
        run_stage(out, stage, "fake_stage_cli", ["b"])
        assert stage_module.CALLS[-1] == ["b", "--resume"]
    (out / "eval-rl" / "checkpoints").mkdir(parents=True)
    run_stage(out, "eval-rl", "fake_stage_cli", ["c"])
    assert stage_module.CALLS[-1] == ["c"]


def test_cli_reports_a_failed_stage(tmp_path, stage_module, monkeypatch, capsys):
    import recipe.run as recipe

    monkeypatch.setattr(recipe, "stages", lambda r: [("demonstrations", "fake_stage_cli", [])])
    stage_module.RC = 1
    assert main(["--out", str(tmp_path / "r"), "--quick"]) == 2
    assert "error: stage demonstrations failed (exit 1)" in capsys.readouterr().err


def test_cli_says_what_an_only_run_did_and_points_at_a_comparison_only_when_one_ran(
        tmp_path, stage_module, monkeypatch, capsys):
    import recipe.run as recipe

    monkeypatch.setattr(recipe, "stages", lambda r: [("sft", "fake_stage_cli", ["a"]), ("compare", "fake_stage_cli", ["b"])])
    assert main(["--out", str(tmp_path / "r"), "--quick", "--only", "sft"]) == 0
    out = capsys.readouterr().out
    assert "recipe done: ran sft" in out and "comparison" not in out and stage_module.CALLS == [["a"]]
    assert main(["--out", str(tmp_path / "r"), "--quick", "--only", "compare"]) == 0
    assert "recipe done: the comparison is in" in capsys.readouterr().out


@pytest.mark.slow
def test_quick_recipe_runs_end_to_end(tmp_path):
    assert main(["--out", str(tmp_path / "r"), "--quick"]) == 0
    for stage in ("demonstrations", "sft-export", "sft", "rl", "eval-base", "eval-sft", "eval-rl", "compare"):
        assert (tmp_path / "r" / f".done-{stage}").exists()
    assert (tmp_path / "r" / "compare" / "paired.md").exists()


def test_an_eval_whose_benchmark_cannot_be_fetched_is_skipped_and_the_recipe_goes_on(
        tmp_path, stage_module, monkeypatch, capsys):
    """bigbench 1.0.0 (SQuAD, StrategyQA) left the package index: its evals and their comparison are
    skipped with the fetch error, every other stage runs, and nothing is marked done for them."""
    import recipe.run as run
    from corpus.packages import FetchError

    def load(bench, limit=None, seed=0):
        if bench == "gone":
            raise FetchError("could not download package bigbench==1.0.0")
        return [{"id": "q1", "question": "?", "answers": ["a"]}], None

    monkeypatch.setattr(run, "load_benchmark", load)
    out = tmp_path / "r"
    plan = [("eval-base-squad", "fake_stage_cli", ["qa", "--bench", "gone", "--out", str(out / "e1")]),
            ("compare-squad", "fake_stage_cli", ["compare", str(out / "e1"), "--out", str(out / "c1")]),
            ("eval-base-factbook", "fake_stage_cli", ["qa", "--bench", "here", "--out", str(out / "e2")]),
            ("compare-factbook", "fake_stage_cli", ["compare", str(out / "e2"), "--out", str(out / "c2")]),
            ("ship", "recipe.ship", ["--out", str(out / "agent"), str(out / "e1"), str(out / "e2")])]
    import recipe.ship

    monkeypatch.setattr(recipe.ship, "main", lambda argv: stage_module.CALLS.append(["ship", *argv]) or 0)
    monkeypatch.setattr(run, "stages", lambda r: plan)
    run_recipe(Recipe(out=out))
    assert [c[0] for c in stage_module.CALLS] == ["qa", "compare", "ship"] and "here" in stage_module.CALLS[0]
    # ship is told of every eval, whether it ran or not, so its command is the same on every machine;
    # it records the numbers of those that ran (test_shipped_agent_by_name_brings_its_model_adapter_and_budgets)
    assert stage_module.CALLS[-1] == ["ship", "--out", str(out / "agent"), str(out / "e1"), str(out / "e2")]
    err = capsys.readouterr().err
    assert "eval-base-squad: skipped" in err and "bigbench==1.0.0" in err and "compare-squad: skipped" in err
    assert not (out / ".done-eval-base-squad").exists() and (out / ".done-compare-factbook").exists()


def test_a_stage_done_here_with_another_command_runs_again(tmp_path, stage_module, monkeypatch, capsys):
    """The done-marker records the stage's command: a plan that changed a stage's flags (a model added
    to a comparison, a budget changed) runs it again instead of keeping the old output as done."""
    import recipe.run as run

    out = tmp_path / "r"
    plan = [("compare", "fake_stage_cli", ["compare", str(out / "e1"), "--out", str(out / "c")])]
    monkeypatch.setattr(run, "stages", lambda r: plan)
    run_recipe(Recipe(out=out))
    run_recipe(Recipe(out=out))
    assert len(stage_module.CALLS) == 1 and "compare: done before, skipped" in capsys.readouterr().err
    plan[0] = ("compare", "fake_stage_cli", ["compare", str(out / "e1"), str(out / "e2"), "--out", str(out / "c")])
    run_recipe(Recipe(out=out))
    assert len(stage_module.CALLS) == 2 and stage_module.CALLS[-1][2] == str(out / "e2")
    assert "compare: its command changed since it ran here; running it again" in capsys.readouterr().err
    (out / ".done-compare").write_text("12.0 s\n")  # a marker from before markers kept their command
    run_recipe(Recipe(out=out))
    assert len(stage_module.CALLS) == 2
