"""Recipe stages that outlive their machine: published with a card, restored when the card matches,
run again when an input changed, resumed from a part published mid-stage; shipped agents by name."""

from __future__ import annotations

import gzip
import json
import sys

import pytest

from recipe import EXIT_STOPPED, Recipe, run_recipe
from recipe.__main__ import main as recipe_main
from recipe.artifacts import ArtifactError, ArtifactStore, display_argv, repo_root, same_command

STAGE_CLI = '''
import json, os, sys, time
from pathlib import Path
CALLS = []
INTERRUPT_AT = None  # raise KeyboardInterrupt after writing this many checkpoints (as Ctrl-C would)

def main(argv):
    CALLS.append(list(argv))
    out = Path(argv[argv.index("--out") + 1])
    src = Path(argv[argv.index("--in") + 1]) if "--in" in argv else None
    out.mkdir(parents=True, exist_ok=True)
    start = 0
    if "--resume" in argv:
        start = max(int(p.name.split("-")[1]) for p in (out / "checkpoints").iterdir())
    for step in range(start + 1, 4):
        ck = out / "checkpoints" / f"step-{step}"
        ck.mkdir(parents=True)
        (ck / "state.json").write_text(json.dumps({"step": step}))
        (ck / "optimizer.pt").write_bytes(os.urandom(64))
        with open(out / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"step": step, "loss": 1.0 / step}) + "\\n")
        if INTERRUPT_AT == step:
            raise KeyboardInterrupt
    text = (src.read_text() if src else "") + "x" * 300_000  # over COMPRESS_OVER: stored gzipped
    (out / "big.json").write_text(json.dumps({"text": text}))
    (out / ".lock").write_text("not stored")
    return 0
'''


@pytest.fixture
def stage_cli(tmp_path, monkeypatch):
    (tmp_path / "artifact_stage_cli.py").write_text(STAGE_CLI)
    monkeypatch.syspath_prepend(str(tmp_path))
    import artifact_stage_cli

    yield artifact_stage_cli
    sys.modules.pop("artifact_stage_cli", None)


def _plan(monkeypatch, out, data):
    import recipe.run as recipe

    plan = [("sft", "artifact_stage_cli", ["--in", str(data), "--out", str(out / "sft")]),
            ("eval-x", "artifact_stage_cli", ["--in", str(out / "sft" / "big.json"), "--out", str(out / "eval-x")])]
    monkeypatch.setattr(recipe, "stages", lambda r: plan)


def test_a_finished_stage_is_restored_elsewhere_and_rerun_when_its_input_changes(tmp_path, stage_cli, monkeypatch):
    art, data = tmp_path / "artifacts" / "agent-x", tmp_path / "data.txt"
    data.write_text("first")
    first = tmp_path / "session-1"
    _plan(monkeypatch, first, data)
    run_recipe(Recipe(out=first, artifacts=art))
    assert len(stage_cli.CALLS) == 2
    card = json.loads((art / "stages" / "sft" / "card.json").read_text())
    assert card["status"] == "done" and card["command"].startswith("python -m artifact_stage_cli --in ")
    assert "$OUT/sft" in card["command"] and str(first) not in card["command"]  # the key ignores the scratch dir
    assert str(data) in card["inputs"] and card["numbers"]["step"] == 3
    stored = art / "stages" / "sft" / "files" / "sft"
    # only the newest checkpoint, dotfiles left out, big JSON gzipped and hashed
    assert sorted(p.name for p in (stored / "checkpoints").iterdir()) == ["step-3"]
    assert not (stored / ".lock").exists() and (stored / "big.json.gz").exists()
    assert json.loads(gzip.decompress((stored / "big.json.gz").read_bytes()))["text"].startswith("first")
    assert "| sft | done |" in (art / "README.md").read_text()

    # a second session on a fresh scratch directory: nothing runs, the outputs come back byte for byte
    second = tmp_path / "session-2"
    _plan(monkeypatch, second, data)
    run_recipe(Recipe(out=second, artifacts=art))
    assert len(stage_cli.CALLS) == 2
    assert (second / "eval-x" / "big.json").read_bytes() == (first / "eval-x" / "big.json").read_bytes()
    assert (second / ".done-sft").read_text().splitlines()[0].endswith(f"(restored from {art})")

    # changed data: the SFT stage's key changes, so it runs, and so does the eval that reads its output
    data.write_text("second")
    third = tmp_path / "session-3"
    _plan(monkeypatch, third, data)
    run_recipe(Recipe(out=third, artifacts=art))
    assert len(stage_cli.CALLS) == 4
    assert json.loads((third / "eval-x" / "big.json").read_text())["text"].startswith('{"text": "second')


def test_a_stage_stopped_midway_resumes_in_the_next_session_from_its_published_checkpoint(
        tmp_path, stage_cli, monkeypatch):
    art, data = tmp_path / "artifacts" / "agent-x", tmp_path / "data.txt"
    data.write_text("d")
    first = tmp_path / "session-1"
    _plan(monkeypatch, first, data)
    stage_cli.INTERRUPT_AT = 2
    with pytest.raises(KeyboardInterrupt):
        run_recipe(Recipe(out=first, artifacts=art))
    card = json.loads((art / "stages" / "sft" / "card.json").read_text())
    assert card["status"] == "partial" and "files" in card
    assert sorted(p.name for p in (art / "stages" / "sft" / "files" / "sft" / "checkpoints").iterdir()) == ["step-2"]
    assert not (art / "stages" / "eval-x").exists()

    stage_cli.INTERRUPT_AT = None
    second = tmp_path / "session-2"  # a fresh machine: only the artifact is left
    _plan(monkeypatch, second, data)
    run_recipe(Recipe(out=second, artifacts=art))
    assert stage_cli.CALLS[1][-1] == "--resume"  # the trainer resumed from the restored step-2
    steps = [json.loads(line)["step"] for line in (second / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]  # the first session's metrics came back and the run went on from step 3
    card = json.loads((art / "stages" / "sft" / "card.json").read_text())
    assert card["status"] == "done" and card["sessions"] == 2


def test_an_eval_whose_questions_changed_keeps_its_answers_and_answers_only_the_new_questions(
        tmp_path, stage_cli, monkeypatch):
    """A fixed benchmark (ill-posed questions left out) changes an eval stage's key through its questions
    input; with the same command and model the stored answers come back and the eval resumes over them,
    while a changed model (another input) still runs the eval from nothing."""
    import recipe.run as run

    (tmp_path / "answers_cli.py").write_text(
        "import json\nfrom pathlib import Path\nASKED = []\n\ndef main(argv):\n"
        "    out = Path(argv[argv.index('--out') + 1]); out.mkdir(parents=True, exist_ok=True)\n"
        "    f = out / 'answers.jsonl'\n"
        "    done = {json.loads(x)['id'] for x in f.read_text().splitlines()} if f.exists() else set()\n"
        "    new = [q for q in argv[argv.index('--questions') + 1].split(',') if q not in done]\n"
        "    ASKED.append(new)\n"
        "    with open(f, 'a') as w:\n"
        "        w.writelines(json.dumps({'id': q}) + '\\n' for q in new)\n"
        "    return 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import answers_cli

    art, model = tmp_path / "art", tmp_path / "model.txt"
    model.write_text("m")
    asked = {"now": "q1,q2"}
    monkeypatch.setattr(run, "question_inputs", lambda module, argv: {"questions:bench-x": asked["now"]})
    monkeypatch.setattr(run, "stages", lambda r: [("eval-x", "answers_cli", [
        "qa", "--questions", asked["now"], "--model", str(model), "--out", str(r.out / "eval-x")])])
    run_recipe(Recipe(out=tmp_path / "s1", artifacts=art))
    # the benchmark changed (q2 left out, q3 in): the same command, and the stored answers come back
    asked["now"] = "q1,q3"
    monkeypatch.setattr(run, "stages", lambda r: [("eval-x", "answers_cli", [
        "qa", "--questions", "q1,q2", "--model", str(model), "--out", str(r.out / "eval-x")])])
    run_recipe(Recipe(out=tmp_path / "s2", artifacts=art))
    assert answers_cli.ASKED == [["q1", "q2"], []]  # the same command: q1 and q2 were answered before
    card = json.loads((art / "stages" / "eval-x" / "card.json").read_text())
    assert card["sessions"] == 2 and card["inputs"]["questions:bench-x"] == "q1,q3"
    model.write_text("another model")  # another input changed too: nothing is reused
    run_recipe(Recipe(out=tmp_path / "s3", artifacts=art))
    assert answers_cli.ASKED[-1] == ["q1", "q2"]
    sys.modules.pop("answers_cli", None)


def test_question_inputs_hash_the_questions_a_bench_selects(tmp_path):
    from recipe.run import question_inputs

    bench = tmp_path / "b.jsonl"
    bench.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Q{i}?", "answers": ["a"]}) + "\n"
                             for i in range(6)))
    argv = ["qa", "--bench", str(bench), "--limit", "4", "--out", "x"]
    first = question_inputs("eval.cli", argv)
    assert list(first) == [f"questions:{bench}"] and first == question_inputs("eval.cli", argv)
    assert question_inputs("eval.cli", [*argv, "--seed", "1"]) != first
    assert question_inputs("synth.__main__", argv) == {} and question_inputs("eval.cli", ["compare", "a"]) == {}


def test_a_corrupt_artifact_is_reported_not_restored(tmp_path, stage_cli, monkeypatch):
    art, data = tmp_path / "art", tmp_path / "data.txt"
    data.write_text("d")
    _plan(monkeypatch, tmp_path / "s1", data)
    run_recipe(Recipe(out=tmp_path / "s1", artifacts=art))
    (art / "stages" / "sft" / "files" / "sft" / "metrics.jsonl").write_text("tampered\n")
    with pytest.raises(ArtifactError, match="does not match its card's hash"):
        ArtifactStore(art).restore("sft", tmp_path / "s2")


def test_a_file_too_large_to_commit_stops_the_publish(tmp_path, monkeypatch):
    import recipe.artifacts as artifacts
    from recipe.artifacts import StageCard

    monkeypatch.setattr(artifacts, "MAX_FILE_BYTES", 1000)
    out = tmp_path / "out"
    (out / "sft").mkdir(parents=True)
    (out / "sft" / "adapter_model.safetensors").write_bytes(b"\1" * 5000)
    with pytest.raises(ArtifactError, match="cannot be committed"):
        ArtifactStore(tmp_path / "art").publish("sft", out, [out / "sft"], StageCard("sft", "k", "c", "", {}))
    assert not (tmp_path / "art" / "stages" / "sft").exists()  # nothing half-written is left as a stage


def test_a_finished_training_stage_stores_its_adapter_and_no_optimizer_state(tmp_path):
    """Resume state is for partial stages: a done one commits its adapter, not its last checkpoint."""
    from recipe.artifacts import StageCard

    out = tmp_path / "out"
    for d in ("sft/adapter", "sft/checkpoints/step-8"):
        (out / d).mkdir(parents=True)
    (out / "sft" / "adapter" / "adapter_model.safetensors").write_bytes(b"A" * 64)
    (out / "sft" / "checkpoints" / "step-8" / "optimizer.pt").write_bytes(b"O" * 64)
    (out / "sft" / "checkpoints" / "step-8" / "state.json").write_text("{}")
    store = ArtifactStore(tmp_path / "art")
    partial = store.publish("sft", out, [out / "sft"], StageCard("sft", "k", "c", "", {}, status="partial"))
    assert "sft/checkpoints/step-8/optimizer.pt" in partial.files
    done = store.publish("sft", out, [out / "sft"], StageCard("sft", "k", "c", "", {}, status="done"))
    assert sorted(done.files) == ["sft/adapter/adapter_model.safetensors"]
    assert not (store.stage_dir("sft") / "files" / "sft" / "checkpoints").exists()


def test_stage_keys_do_not_depend_on_the_checkout_or_scratch_paths(tmp_path):
    task_file = str(repo_root() / "research_agent" / "data" / "factbook_qa.jsonl")
    shown = display_argv(["--qa", task_file, "--out", str(tmp_path / "sft"), "--lr", "2e-4"], tmp_path)
    assert shown == ["--qa", "research_agent/data/factbook_qa.jsonl", "--out", "$OUT/sft", "--lr", "2e-4"]


def test_the_stop_after_timer_stops_the_recipe_with_its_exit_code(tmp_path, stage_cli, monkeypatch):
    import recipe.run as recipe

    stage_cli.INTERRUPT_AT = None
    slow = tmp_path / "slow_stage_cli.py"
    slow.write_text("import time\n\ndef main(argv):\n    time.sleep(30)\n    return 0\n")
    monkeypatch.setattr(recipe, "stages", lambda r: [("sft", "slow_stage_cli", ["--out", str(r.out / "sft")])])
    rc = recipe_main(["--out", str(tmp_path / "r"), "--artifacts", str(tmp_path / "art"), "--stop-after", "0.02"])
    sys.modules.pop("slow_stage_cli", None)
    assert rc == EXIT_STOPPED
    assert json.loads((tmp_path / "art" / "stages" / "sft" / "card.json").read_text())["status"] == "partial"


def test_the_qwen_preset_chains_rejection_sampling_into_sft_and_evaluates_every_held_out_set(tmp_path):
    from recipe import research_qwen_v1, stages

    r = research_qwen_v1(tmp_path / "out", tmp_path / "art")
    plan = {n: a for n, _, a in stages(r)}
    assert r.model == "qwen2.5-coder-0.5b" and r.artifacts == tmp_path / "art"
    samples = plan["samples-r0"]
    assert samples[samples.index("--policy") + 1] == "model" and samples[samples.index("--temperature") + 1] == "0.7"
    export = plan["sft-export"]
    assert export[export.index("--trajectories") + 1: export.index("--trajectories") + 3] == [
        str(r.out / "demonstrations"), str(r.out / "samples-r0")]
    assert "--require-citations" in export
    benches = {n: a[a.index("--bench") + 1] for n, a in plan.items() if n.startswith("eval-")}
    assert benches["eval-base-two-hop"] == "factbook-two-hop" and "--limit" not in plan["eval-base-two-hop"]
    assert {b for b in benches.values()} == {"factbook-test", "factbook-two-hop", "squad-open", "strategyqa"}
    assert set(benches) >= {f"eval-{m}-squad" for m in ("base", "sft", "rl")}
    ship = plan["ship"]
    assert ship[ship.index("--adapter") + 1] == str(r.out / "rl" / "adapter")
    from synth.__main__ import build_parser

    args = build_parser().parse_args(export)
    assert args.require_citations and args.per_kind == 40 and len(args.trajectories) == 2


def test_the_v2_preset_continues_from_the_shipped_v1_adapter_and_trains_rl_on_two_hop_questions(tmp_path):
    from recipe import research_qwen_v2, stages
    from research_agent.shipped import artifacts_root
    from research_agent.tasks import ResearchTasks
    from research_agent.train.config import load_config

    r = research_qwen_v2(tmp_path / "out", tmp_path / "art")
    plan = {n: a for n, _, a in stages(r)}
    sft, _ = load_config(plan["sft"])
    assert sft.init_adapter == str(artifacts_root() / "research-qwen-v1" / "adapter")
    assert (artifacts_root() / "research-qwen-v1" / "adapter" / "adapter_model.safetensors").exists()
    export = plan["sft-export"]
    assert export[export.index("--per-kind") + 1] == "60" and "--limit" not in plan["demonstrations"]
    rl, _ = load_config(plan["rl"])
    assert rl.init_adapter == str(r.out / "sft" / "adapter") and rl.curriculum.min_hops == 2
    assert {it["hops"] for it in ResearchTasks().load_tasks(rl)} == {2}
    assert [n for n in plan if n.startswith("eval-")] == ["eval-sft-factbook", "eval-rl-factbook",
                                                         "eval-sft-two-hop", "eval-rl-two-hop"]
    assert plan["ship"][plan["ship"].index("--name") + 1] == "research-qwen-v2"


def test_the_v3_preset_states_bridges_in_its_demonstrations_and_continues_from_v2(tmp_path):
    from recipe import research_qwen_v2, research_qwen_v3, stages
    from research_agent.shipped import artifacts_root
    from research_agent.train.config import load_config
    from synth.__main__ import build_parser

    r = research_qwen_v3(tmp_path / "out", tmp_path / "art")
    plan = {n: a for n, _, a in stages(r)}
    demos = build_parser().parse_args(plan["demonstrations"])
    assert demos.state_bridges and demos.policy == "reference"
    v2 = {n: a for n, _, a in stages(research_qwen_v2(tmp_path / "out", tmp_path / "art"))}
    assert "--state-bridges" not in v2["demonstrations"]  # the committed presets keep their stage keys
    start = artifacts_root() / "research-qwen-v2" / "stages" / "rl" / "files" / "rl" / "adapter"
    assert load_config(plan["sft"])[0].init_adapter == str(start)
    assert (start / "adapter_model.safetensors").exists()  # committed: v3 needs no v2 run
    export = plan["sft-export"]
    assert export[export.index("--per-kind") + 1] == "30"
    rl, _ = load_config(plan["rl"])
    assert rl.steps == 16 and rl.curriculum.min_hops == 2
    assert plan["ship"][plan["ship"].index("--name") + 1] == "research-qwen-v3"


def test_the_reward_ablation_runs_three_arms_from_one_sft_start_and_evaluates_each_against_it(tmp_path):
    from recipe import reward_ablation_smollm2, stages
    from research_agent.train.config import load_config
    from rewards import get_reward

    r = reward_ablation_smollm2(tmp_path / "out", tmp_path / "art")
    plan = {n: a for n, _, a in stages(r)}
    arms = [n for n in plan if n.startswith("rl-")]
    assert arms == ["rl-f1", "rl-carr", "rl-otc"]
    for n in arms:
        a = plan[n]
        assert a[a.index("--init-adapter") + 1] == str(r.out / "sft" / "adapter") and a[a.index("--steps") + 1] == "30"
        assert a[a.index("--out") + 1] == str(r.out / n)
        get_reward(a[a.index("--reward") + 1])  # a spec the trainer accepts
        load_config(a)  # and flags it parses
    assert [n for n in plan if n.startswith("eval-")] == [f"eval-{m}-factbook" for m in ("sft", "rl-f1", "rl-carr", "rl-otc")]
    assert plan["compare-factbook"][1] == str(r.out / "eval-sft-factbook")  # every arm paired with the SFT start
    assert "ship" not in plan and r.artifacts == tmp_path / "art"


@pytest.mark.parametrize("preset", ["research-qwen-v1", "research-qwen-v2", "research-qwen-v3",
                                    "reward-ablation-smollm2"])
def test_the_plan_still_spells_every_committed_stage_as_its_card_does(preset, tmp_path):
    """A stage's argv is half its artifact key: a plan that respelled a committed stage (a flag
    renamed, a budget moved) would make the next session run hours of finished stages again."""
    from recipe import stages
    from recipe.artifacts import StageCard, stage_command
    from recipe.plan import PRESETS

    r = PRESETS[preset](tmp_path / "out")
    planned = {name: stage_command(module, argv, r.out) for name, module, argv in stages(r)}
    cards = {p.parent.name: StageCard.read(p) for p in sorted((r.artifacts / "stages").glob("*/card.json"))}
    assert len(cards) >= 2
    for name, card in cards.items():  # cost-only flags (a memory budget one session ran with) aside
        assert same_command(planned.get(name, ""), card.command), name


def test_a_memory_budget_reaches_the_training_stages_and_stays_out_of_their_keys(tmp_path):
    """A machine with memory to spare trains with a larger activation budget; the stages it makes or
    goes on with are the same stages as a laptop's (keys, done markers), only cheaper."""
    from dataclasses import replace

    from recipe import stages
    from recipe.artifacts import stage_key
    from recipe.plan import PRESETS
    from recipe.run import _done_before, _mark_done
    from research_agent.train.config import load_config

    r = PRESETS["research-qwen-v2"](tmp_path / "out")
    budget = replace(r, activation_budget=8.0)
    trained = 0
    for (name, module, argv), (_, _, wide) in zip(stages(r), stages(budget), strict=True):
        if name in ("sft", "rl"):
            trained += 1
            assert load_config(wide)[0].compute.activation_budget == 8.0
            assert load_config(argv)[0].compute.activation_budget == 1.5
        else:
            assert wide == argv, name
        assert stage_key(module, wide, r.out, {}) == stage_key(module, argv, r.out, {}), name
    assert trained == 2
    name, module, argv = next(s for s in stages(r) if s[0] == "rl")
    wide = next(s[2] for s in stages(budget) if s[0] == "rl")
    _mark_done(r.out, name, module, argv, "1.0 s")
    assert _done_before(r.out, name, module, wide)
    assert recipe_main(["--preset", "research-qwen-v2", "--out", str(tmp_path / "o"), "--activation-budget", "8",
                        "--only", "nothing"]) == 0


def test_the_recipe_agent_is_one_config_and_what_it_cannot_pass_on_is_an_error(tmp_path):
    from recipe import Recipe, stages
    from research_agent.agent import AgentConfig

    r = Recipe(out=tmp_path, agent=AgentConfig(max_turns=7, max_tool_calls=5, max_new_tokens=40, max_total_tokens=2000),
               self_samples=4)
    plan = {n: a for n, _, a in stages(r)}
    assert plan["rl"][plan["rl"].index("--max-turns") + 1] == "7"
    assert "max_tool_calls=5" in plan["eval-sft"] and "max_total_tokens=2000" in plan["demonstrations"]
    assert plan["samples-r0"][plan["samples-r0"].index("--max-new-tokens") + 1] == "40"
    with pytest.raises(ValueError, match="search_k would be ignored"):
        stages(Recipe(out=tmp_path, agent=AgentConfig(search_k=5)))


def test_a_later_round_samples_the_trained_model_and_continues_sft_from_it(tmp_path):
    from recipe import Recipe, stages
    from recipe.plan import Round
    from research_agent.train.config import load_config
    from synth.__main__ import build_parser

    r = Recipe(out=tmp_path, model="qwen2.5-coder-0.5b", rounds=(Round("r1", "rl", questions=192, min_hops=2),),
               ship_model="sft-r1", name="agent", artifacts=tmp_path / "art")
    plan = {n: a for n, _, a in stages(r)}
    names = list(plan)
    assert names.index("rl") < names.index("samples-r1") < names.index("sft-export-r1") < names.index("sft-r1")
    args = build_parser().parse_args(plan["samples-r1"])
    assert args.adapter == str(tmp_path / "rl" / "adapter") and args.min_hops == 2 and args.limit == 192
    assert args.samples == 2 and args.policy == "model" and str(args.max_new_tokens) == str(r.agent.max_new_tokens)
    export = build_parser().parse_args(plan["sft-export-r1"])
    assert export.trajectories == [str(tmp_path / "samples-r1")] and export.require_citations
    cfg, _ = load_config(plan["sft-r1"])
    assert cfg.init_adapter == str(tmp_path / "rl" / "adapter") and cfg.tasks == str(tmp_path / "sft-r1.jsonl")
    assert "eval-sft-r1" in plan and plan["eval-sft-r1"][-1] == str(tmp_path / "sft-r1" / "adapter")
    assert plan["ship"][plan["ship"].index("--adapter") + 1] == str(tmp_path / "sft-r1" / "adapter")


def test_shipped_agent_by_name_brings_its_model_adapter_and_budgets(tmp_path, monkeypatch):
    import argparse

    from recipe.ship import main as ship
    from research_agent.shipped import ARTIFACTS_ENV, UnknownAgent, apply_agent, load_agent, shipped_agents

    adapter = tmp_path / "trained" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_model.safetensors").write_bytes(b"weights")
    (adapter / "adapter_config.json").write_text("{}")
    ev = tmp_path / "eval-sft-factbook"
    ev.mkdir()
    (ev / "results.json").write_text(json.dumps({"bench": "factbook-test", "metrics": {"em": 0.5, "n": 2.0}}))
    monkeypatch.setenv(ARTIFACTS_ENV, str(tmp_path / "artifacts"))
    assert ship(["--adapter", str(adapter), "--model", "smollm2-135m", "--name", "agent-x", "--out",
                 str(tmp_path / "artifacts" / "agent-x"), "--set", "max_turns=10", str(ev),
                 str(tmp_path / "eval-sft-squad")]) == 0  # an eval that could not run here: passed over
    assert shipped_agents() == ["agent-x"]
    agent = load_agent("agent-x")
    assert agent.settings == {"max_turns": 10} and agent.numbers["eval-sft-factbook"]["em"] == 0.5
    assert list(agent.numbers) == ["eval-sft-factbook"]
    assert (agent.adapter / "adapter_model.safetensors").read_bytes() == b"weights"
    args = argparse.Namespace(agent="agent-x", model=None, adapter=None)
    assert apply_agent(args) == {"max_turns": 10}
    assert args.model == "smollm2-135m" and args.adapter == str(agent.adapter)
    with pytest.raises(UnknownAgent, match="runs on smollm2-135m"):
        apply_agent(argparse.Namespace(agent="agent-x", model="qwen2.5-coder-0.5b", adapter=None))
    with pytest.raises(UnknownAgent, match="no shipped agent 'nope'.*shipped: agent-x"):
        load_agent("nope")


def test_ask_and_eval_run_a_shipped_agent_by_name(tmp_path, monkeypatch, smol, small_corpus_dir, capsys):
    """A real adapter on smollm2, shipped, then answered with through ``ask --agent`` and ``eval qa --agent``."""
    from recipe.ship import main as ship
    from research_agent.ask import main as ask
    from research_agent.shipped import ARTIFACTS_ENV
    from tests.loras import random_lora

    model, _ = smol
    adapter = random_lora(model, tmp_path / "lora", seed=3, std=0.01)
    monkeypatch.setenv(ARTIFACTS_ENV, str(tmp_path / "artifacts"))
    assert ship(["--adapter", str(adapter), "--model", "smollm2-135m", "--name", "tiny", "--out",
                 str(tmp_path / "artifacts" / "tiny"), "--set", "max_turns=2", "--set", "max_new_tokens=12"]) == 0
    capsys.readouterr()
    rc = ask(["What is the capital of France?", "--agent", "tiny", "--corpus", str(small_corpus_dir), "--json"])
    assert rc in (0, 3)  # answered or not: the run itself must work with the shipped adapter and budgets
    traj = json.loads(capsys.readouterr().out)
    assert traj["meta"]["config"]["max_turns"] == 2 and len(traj["steps"]) <= 2
    assert traj["meta"]["model"] == f"smollm2-135m+{tmp_path / 'artifacts' / 'tiny' / 'adapter'}"
    assert ask(["q?", "--agent", "tiny", "--adapter", str(adapter)]) == 2
    assert "brings its own adapter" in capsys.readouterr().err

    from eval.cli import main as eval_main

    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"id": "q1", "question": "What is the capital of France?", "answers": ["Paris"]}) + "\n")
    out = tmp_path / "eval"
    assert eval_main(["qa", "--bench", str(bench), "--agent", "tiny", "--corpus", str(small_corpus_dir), "--quiet",
                      "--out", str(out)]) == 0
    run = json.loads((out / "results.json").read_text())
    assert run["adapter"] == str(tmp_path / "artifacts" / "tiny" / "adapter")
    assert run["agent_config"]["max_new_tokens"] == 12
