"""Run directories: results JSON, resume after an interruption, schema and identity checks."""

from __future__ import annotations

import json

import pytest

from eval.drain import EvalStopped
from eval.rundir import CONFIG_VERSION, RunDirError, load_results, migrate
from eval.runner import evaluate
from research_agent.store import TrajectoryStore
from research_agent.tasks import ResearchTasks


class FakeBrowser:
    manifest = {"embedding_model": "all-MiniLM-L6-v2", "chunks": 3}


CONFIG = {"template": "fast", "max_turns": 4}


def run(items, out, **kw):
    kw["run_info"] = {"bench": "toy", **kw.get("run_info", {"model": "m"})}
    return evaluate(ResearchTasks(), items, object(), out, config=CONFIG, browser=FakeBrowser(), progress=False, **kw)


def test_results_json_records_config_versions_and_manifest(scripted, make_items, tmp_path):
    scripted.wrong = {"q1"}
    results = run(make_items(4), tmp_path / "r")
    saved = load_results(tmp_path / "r")
    assert saved["metrics"] == results["metrics"]
    m = saved["metrics"]
    assert m["em"] == pytest.approx(0.75)
    assert m["funnel_retrieved"] == 4 and m["funnel_opened"] == 0, "answered from snippets: never opened"
    assert m["reached_cited_rate"] == 1.0 and m["reached_correct_rate"] == pytest.approx(0.75)
    assert saved["agent_config"] == CONFIG and saved["model"] == "m" and saved["bench"] == "toy"
    assert saved["index_manifest"] == FakeBrowser.manifest
    assert "python" in saved["versions"]
    lines = (tmp_path / "r" / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[0])["gold"]["answers"]


def test_resume_after_interruption_does_not_redo_answered_questions(scripted, make_items, tmp_path):
    items = make_items(6)
    scripted.interrupt_after = 3
    with pytest.raises(KeyboardInterrupt):
        run(items, tmp_path / "r")
    path = tmp_path / "r" / "trajectories.jsonl"
    assert len(path.read_text().splitlines()) == 3
    assert not (tmp_path / "r" / "results.json").exists()
    with pytest.raises(RunDirError, match="interrupted"):
        load_results(tmp_path / "r")
    with path.open("a") as f:  # killed in the middle of writing the fourth record
        f.write('{"question": "question 3?", "id": "q3", "steps": [{"act')

    scripted.interrupt_after = None
    results = run(items, tmp_path / "r")
    assert scripted.calls[-1] == ["q3", "q4", "q5"], "only the unanswered questions run again"
    assert results["n_resumed"] == 3 and results["metrics"]["n"] == 6
    ids = list(TrajectoryStore(path.parent).scan()[0])
    assert sorted(ids) == [f"q{i}" for i in range(6)], "no duplicates, broken line gone"

    again = run(items, tmp_path / "r")  # everything done: nothing runs, results rewritten
    assert len(scripted.calls) == 2 and again["metrics"] == results["metrics"]


def test_larger_limit_extends_the_same_run(scripted, make_items, tmp_path):
    items = make_items(6)
    run(items[:2], tmp_path / "r", run_info={"model": "m", "limit": 2})
    results = run(items, tmp_path / "r", run_info={"model": "m", "limit": 6})
    assert scripted.calls[-1] == ["q2", "q3", "q4", "q5"] and results["metrics"]["n"] == 6


def test_a_run_directory_of_older_code_resumes(scripted, make_items, tmp_path):
    """Older code wrote run.json without task_type or config_version and answers without the code that
    made them; the same command resumes such a directory (``rundir.migrate``) and answers only the rest."""
    from eval.benchmarks import CorpusSpec

    items, out = make_items(4), tmp_path / "r"
    info = {"model": "m", "adapter": None, "endpoint": None, "corpus": CorpusSpec().to_dict()}
    run(items[:2], out, run_info=info)
    old = {"schema": 1, "bench": "toy", "agent_config": CONFIG, **info}  # what eval qa wrote before
    (out / "run.json").write_text(json.dumps(old))
    store = out / "trajectories.jsonl"
    rows = [json.loads(line) for line in store.read_text().splitlines()]
    store.write_text("".join(json.dumps({**r, "meta": {}}) + "\n" for r in rows))

    results = run(items, out, run_info=info)
    assert scripted.calls[-1] == ["q2", "q3"] and results["n_resumed"] == 2 and results["metrics"]["n"] == 4
    assert results["question_ids"] == ["q0", "q1", "q2", "q3"] and results["answer_code"]["unrecorded"] == 2
    now = json.loads((out / "run.json").read_text())
    assert now["task_type"] == "research" and now["config_version"] == CONFIG_VERSION
    (out / "run.json").write_text(json.dumps({**old, "model": "other"}))
    with pytest.raises(RunDirError, match="different run.*model"):  # migrated, still compared
        run(items, out, run_info=info)


def test_migrate_brings_an_older_run_json_to_todays_layout(tmp_path):
    from research_agent.code.agent import CodeAgentConfig

    qa = {"schema": 1, "bench": "toy", "agent_config": CONFIG, "model": "m"}
    assert migrate(qa) == {**qa, "task_type": "research", "config_version": CONFIG_VERSION}
    today = CodeAgentConfig(mode="code-only", test_feedback=False).to_dict()
    older = {k: v for k, v in today.items() if k != "redraw_seed"}
    code = migrate({"schema": 1, "mode": "code-only", "tasks": "t", "agent_config": older})
    assert code["task_type"] == "code" and code["agent_config"] == today  # both at the values that reproduce it
    assert migrate(code) is code  # today's layout is left as it is
    # version 1 recorded the since retired continue_quotes and suggest_search: off, they are today's run
    v1 = {"schema": 1, "mode": "code-only", "tasks": "t", "task_type": "code", "config_version": 1}
    retired = {"continue_quotes": False, "suggest_search": False}
    assert migrate({**v1, "agent_config": {**today, **retired}})["agent_config"] == today
    on = migrate({**v1, "agent_config": {**today, **retired, "continue_quotes": True}})
    assert on["agent_config"] == {**today, "continue_quotes": True}  # on, it is not: a resume is refused
    with pytest.raises(RunDirError, match="newer than this code"):
        migrate({**qa, "config_version": CONFIG_VERSION + 1})


def test_a_stop_saves_what_finished_and_writes_no_results(scripted, make_items, tmp_path):
    import threading

    stop = threading.Event()
    stop.set()  # as after a first Ctrl-C: nothing more starts
    with pytest.raises(EvalStopped, match="0 of 3 saved"):
        run(make_items(3), tmp_path / "r", stop=stop)
    assert not (tmp_path / "r" / "results.json").exists()
    assert run(make_items(3), tmp_path / "r")["metrics"]["n"] == 3  # the same command resumes


def test_resume_refuses_a_different_experiment(scripted, make_items, tmp_path):
    run(make_items(2), tmp_path / "r")
    with pytest.raises(RunDirError, match="different run.*model"):
        run(make_items(2), tmp_path / "r", run_info={"model": "other"})


def test_a_resume_knows_an_adapter_by_its_files_not_its_path(scripted, make_items, tmp_path):
    """A run restored into another directory names its adapter by another path; the same files are the
    same adapter, other files are another experiment."""
    items = make_items(4)
    run(items[:2], tmp_path / "r", run_info={"model": "m", "adapter": "runs/a/sft/adapter", "adapter_sha256": "h1"})
    done = run(items, tmp_path / "r", run_info={"model": "m", "adapter": "/elsewhere/sft/adapter", "adapter_sha256": "h1"})
    assert scripted.calls[-1] == ["q2", "q3"] and done["adapter"] == "/elsewhere/sft/adapter"
    with pytest.raises(RunDirError, match="different run.*adapter"):
        run(items, tmp_path / "r", run_info={"model": "m", "adapter": "/elsewhere/sft/adapter", "adapter_sha256": "h2"})
    with pytest.raises(RunDirError, match="different run.*adapter"):  # no hash recorded: the path must match
        run(items, tmp_path / "r2", run_info={"model": "m", "adapter": "a"})
        run(items, tmp_path / "r2", run_info={"model": "m", "adapter": "b"})


def test_corrupt_middle_line_stops_instead_of_lying(scripted, make_items, tmp_path):
    run(make_items(3), tmp_path / "r")
    path = tmp_path / "r" / "trajectories.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "{broken", lines[2]]) + "\n")
    with pytest.raises(RunDirError, match="line 2 is corrupt"):
        TrajectoryStore(path.parent).scan()


def test_older_schema_run_dir_is_refused(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    (old / "results.json").write_text(json.dumps({"metrics": {"em": 0.5}}))
    with pytest.raises(RunDirError, match="older eval"):
        load_results(old)
    with pytest.raises(RunDirError, match="does not exist"):
        load_results(tmp_path / "missing")
