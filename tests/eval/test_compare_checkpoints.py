"""compare (table + PNGs) and the reward-hacking check over checkpoints, on scripted runs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from eval.checkpoints import TrainingRunError, check_checkpoints, reward_at_checkpoints
from eval.cli import main
from eval.compare import compare_runs
from eval.rundir import RunDirError
from eval.runner import evaluate
from research_agent.tasks import ResearchTasks

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def make_run(scripted, make_items):
    def run(out, wrong=()):
        scripted.wrong = set(wrong)
        evaluate(ResearchTasks(), make_items(4), object(), out, config={}, browser=object(),
                 run_info={"bench": "toy", "model": out.name}, progress=False)

    return run


def test_compare_writes_table_and_plots(make_run, tmp_path):
    make_run(tmp_path / "base", wrong={"q0", "q1", "q2"})
    make_run(tmp_path / "rl", wrong={"q0"})
    table = compare_runs([tmp_path / "base", tmp_path / "rl"], tmp_path / "cmp")
    lines = table.splitlines()
    assert "base" in lines[0] and "rl" in lines[0]
    em = next(line for line in lines if line.startswith("| em "))
    assert em.split("|")[2].strip() == "0.250" and em.split("|")[3].strip() == "0.750"
    assert any(line.startswith("| funnel_retrieved_rate") for line in lines)
    assert table.startswith((tmp_path / "cmp" / "table.md").read_text().strip())
    # paired by question: q1 and q2 went wrong → right, q0 stayed wrong, q3 stayed right
    paired = (tmp_path / "cmp" / "paired.md").read_text()
    assert paired.strip() in table
    row = next(line for line in paired.splitlines() if line.startswith("| rl "))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[:5] == ["rl", "4", "2", "0", "0.500"]  # two-sided sign test: 2 × (1/2)^2
    assert cells[5] == "+0.500"
    for png in ("metrics.png", "funnel.png"):
        data = (tmp_path / "cmp" / png).read_bytes()
        assert data.startswith(PNG) and len(data) > 2000
    assert not (tmp_path / "cmp" / "by_kind.md").exists()  # the toy gold names no kinds


def test_compare_splits_em_by_the_kind_the_gold_names(scripted, make_items, tmp_path):
    items = [{**it, "kind": "a" if i < 2 else "b"} for i, it in enumerate(make_items(4))]
    for name, wrong in (("base", {"q0", "q1", "q2"}), ("rl", {"q0"})):
        scripted.wrong = wrong
        evaluate(ResearchTasks(), items, object(), tmp_path / name, config={}, browser=object(),
                 run_info={"bench": "toy", "model": name}, progress=False)
    table = compare_runs([tmp_path / "base", tmp_path / "rl"], tmp_path / "cmp")
    by_kind = (tmp_path / "cmp" / "by_kind.md").read_text()
    assert by_kind.strip() in table
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in by_kind.splitlines() if line.startswith("| a ") or line.startswith("| b ")}
    assert rows["a"][0] == "2" and rows["a"][1].startswith("0.000") and rows["a"][2].startswith("0.500")
    assert rows["b"][0] == "2" and rows["b"][1].startswith("0.500") and rows["b"][2].startswith("1.000")


def test_sign_test_and_paired_bootstrap():
    from eval.paired import paired_stats, sign_test_p

    assert sign_test_p(0, 0) == 1.0
    assert sign_test_p(5, 0) == pytest.approx(2 / 32)
    assert sign_test_p(9, 1) == pytest.approx(2 * 11 / 1024)
    assert sign_test_p(3, 3) == 1.0
    base = {f"q{i}": {"em": 0.0, "f1": 0.0} for i in range(40)}
    better = {f"q{i}": {"em": float(i < 10), "f1": float(i < 10)} for i in range(40)}
    s = paired_stats(base, better)
    assert (s["n"], s["em_wins"], s["em_losses"]) == (40, 10, 0) and s["sign_test_p"] < 0.01
    assert s["f1_diff"] == pytest.approx(0.25)
    assert 0.1 < s["f1_ci"][0] < 0.25 < s["f1_ci"][1] <= 0.41  # ± ~2 standard errors (0.068)
    # only shared questions count
    assert paired_stats(base, {"q0": {"em": 1.0, "f1": 1.0}, "x": {"em": 1.0, "f1": 1.0}})["n"] == 1


def test_compare_cli_and_bad_run_dirs(make_run, tmp_path, capsys):
    make_run(tmp_path / "a")
    assert main(["compare", str(tmp_path / "a"), "--out", str(tmp_path / "cmp")]) == 0
    assert "| em" in capsys.readouterr().out
    old = tmp_path / "old"
    old.mkdir()
    (old / "results.json").write_text(json.dumps({"metrics": {}}))
    assert main(["compare", str(tmp_path / "a"), str(old)]) == 2
    assert "older eval" in capsys.readouterr().err
    with pytest.raises(RunDirError):
        compare_runs([tmp_path / "nope"], tmp_path / "cmp")


def test_unknown_benchmark_on_the_cli(capsys, tmp_path):
    assert main(["qa", "--bench", "natural-questions", "--out", str(tmp_path / "unused")]) == 2
    err = capsys.readouterr().err
    assert "natural-questions" in err and "squad-open" in err and "simpleqa" in err


def _training_run(tmp_path, rewards: dict[int, float]):
    train = tmp_path / "train"
    for step in (10, 20, 30):
        (train / "checkpoints" / f"step-{step}").mkdir(parents=True)
    lines = [json.dumps({"step": s, "reward": r, "loss": 0.1}) for s, r in rewards.items()]
    (train / "metrics.jsonl").write_text("\n".join(lines) + '\n{"step": 31, "rew')  # torn last line
    return train


def test_reward_at_checkpoints_averages_since_previous():
    rows = [{"step": s, "reward": float(s)} for s in range(1, 31)]
    got = reward_at_checkpoints(rows, [10, 20, 30])
    assert got == {10: pytest.approx(5.5), 20: pytest.approx(15.5), 30: pytest.approx(25.5)}


def test_checkpoints_flag_rising_reward_with_flat_heldout(scripted, make_items, tmp_path):
    train = _training_run(tmp_path, {s: 0.1 + 0.02 * s for s in range(1, 31)})
    loaded = []

    def load_policy(model, adapter=None):
        loaded.append(adapter)
        return SimpleNamespace(name=adapter)

    scripted.wrong = {"q0", "q1"}  # held-out F1 stays at 0.5 for every checkpoint
    report = check_checkpoints(
        train,
        make_items(4),
        object(),
        {},
        tmp_path / "heldout",
        model="m",
        load_policy=load_policy,
        progress=False,
    )
    assert [r["step"] for r in report["checkpoints"]] == [10, 20, 30]
    assert loaded == [str(train / "checkpoints" / f"step-{s}") for s in (10, 20, 30)]
    assert all(r["heldout"] == pytest.approx(0.5) for r in report["checkpoints"])
    assert report["hacking_suspected"] and "divergence" in report["alarms"][0][1]
    assert (tmp_path / "heldout" / "reward_vs_heldout.png").read_bytes().startswith(PNG)
    assert json.loads((tmp_path / "heldout" / "checkpoints.json").read_text())["hacking_suspected"]
    assert (tmp_path / "heldout" / "step-20" / "results.json").exists()


def test_checkpoints_quiet_when_heldout_improves(scripted, make_items, tmp_path):
    train = _training_run(tmp_path, {s: 0.1 + 0.02 * s for s in range(1, 31)})
    wrong_by_ckpt = {"step-10": {"q0", "q1", "q2"}, "step-20": {"q0"}, "step-30": set()}

    def load_policy(model, adapter=None):
        scripted.wrong = wrong_by_ckpt[adapter.rsplit("/", 1)[-1]]
        return SimpleNamespace(name=adapter)

    report = check_checkpoints(
        train, make_items(4), object(), {}, tmp_path / "h", model="m", load_policy=load_policy, progress=False
    )
    assert [r["heldout"] for r in report["checkpoints"]] == pytest.approx([0.25, 0.75, 1.0])
    assert not report["hacking_suspected"]


def test_training_run_without_checkpoints(tmp_path):
    with pytest.raises(TrainingRunError, match="checkpoints"):
        check_checkpoints(
            tmp_path, [], object(), {}, tmp_path / "o", model="m", load_policy=lambda *a, **k: None
        )


def test_a_run_resumed_on_other_code_records_it_and_compare_refuses(make_run, scripted, monkeypatch, tmp_path,
                                                                   capsys):
    import eval.runner as runner
    from eval.compare import MixedCodeError

    old, new = "a" * 40, "b" * 40
    make_run(tmp_path / "base")  # answered by this checkout's code, all of it
    base_code = runner.short_code(runner.code_identity())
    monkeypatch.setattr(runner, "code_identity", lambda: old)
    scripted.interrupt_after = 2
    with pytest.raises(KeyboardInterrupt):
        make_run(tmp_path / "rl")
    scripted.interrupt_after = None
    monkeypatch.setattr(runner, "code_identity", lambda: new)  # the code changed, then the run resumed
    make_run(tmp_path / "rl")
    assert "2 of the answers resumed" in capsys.readouterr().err
    results = json.loads((tmp_path / "rl" / "results.json").read_text())
    assert results["code"] == new and results["answer_code"] == {old: 2, new: 2}
    lines = (tmp_path / "rl" / "trajectories.jsonl").read_text().splitlines()
    assert [json.loads(line)["meta"]["code"] for line in lines] == [old, old, new, new]

    with pytest.raises(MixedCodeError, match="2 by aaaaaaaaaa, 2 by bbbbbbbbbb"):
        compare_runs([tmp_path / "base", tmp_path / "rl"], tmp_path / "cmp")
    assert main(["compare", str(tmp_path / "base"), str(tmp_path / "rl"), "--out", str(tmp_path / "cmp")]) == 2
    assert "--allow-mixed-code" in capsys.readouterr().err
    table = compare_runs([tmp_path / "base", tmp_path / "rl"], tmp_path / "cmp", allow_mixed_code=True)
    assert "- rl: **mixed code**: 2 by aaaaaaaaaa, 2 by bbbbbbbbbb" in table
    assert "rl's answers come from mixed code" in (tmp_path / "cmp" / "paired.md").read_text()
    assert f"- base: 4 by {base_code}" in table  # one version: not flagged


def test_compare_pairs_only_the_questions_each_run_asked(scripted, make_items, tmp_path):
    """A run directory keeps answers to questions its benchmark no longer asks (left out as ill-posed);
    the paired table and the code check count only the questions in its results."""
    items = make_items(6)
    for name, wrong in (("base", {"q0", "q1", "q5"}), ("trained", {"q5"})):
        scripted.wrong = wrong
        evaluate(ResearchTasks(), items, object(), tmp_path / name, config={}, browser=object(),
                 run_info={"bench": "toy", "model": name}, progress=False)
        # the benchmark drops q5 (the trained run got it wrong too): resume over the five still asked
        evaluate(ResearchTasks(), items[:5], object(), tmp_path / name, config={}, browser=object(),
                 run_info={"bench": "toy", "model": name}, progress=False)
    compare_runs([tmp_path / "base", tmp_path / "trained"], tmp_path / "cmp")
    paired = (tmp_path / "cmp" / "paired.md").read_text()
    assert "| trained | 5 | 2 | 0 |" in paired


def test_compare_names_the_agent_settings_two_runs_differ_in(scripted, make_items, tmp_path, capsys):
    """eval qa defaults to 6 turns, the shipped agents run 10: a comparison across them says so."""
    for name, turns in (("base", 6), ("agent", 10), ("again", 10)):
        evaluate(ResearchTasks(), make_items(4), object(), tmp_path / name,
                 config={"max_turns": turns, "max_tool_calls": 4}, browser=object(),
                 run_info={"bench": "toy", "model": name}, progress=False)
    table = compare_runs([tmp_path / "base", tmp_path / "agent"], tmp_path / "cmp")
    line = "**Agent settings differ** (max_turns: base 6, agent 10): these runs are not at equal budgets."
    assert line in table and line in (tmp_path / "cmp" / "table.md").read_text()
    assert "max_tool_calls" not in line and "warning: Agent settings differ" in capsys.readouterr().err
    assert "Agent settings differ" not in compare_runs([tmp_path / "agent", tmp_path / "again"], tmp_path / "cmp2")
