"""``python -m eval code``: per-mode runs with resume, pass@1 and tool-call metrics, the comparison
table, the seed's bar plot (with the after-RL bar), and a tiny real-model run through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corpus.files import seeded_subset
from eval.code import main, select_ids
from eval.code_metrics import code_metrics
from eval.code_modes import evaluate_code
from eval.code_report import rl_result
from eval.rundir import CONFIG_VERSION, RunDirError, start_run
from research_agent.code.agent import CodeAgentConfig
from research_agent.code.apidocs import api_docs_browser
from research_agent.code.tasks import load_tasks
from tests.doubles import ScriptedPolicy

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TODAY = {"task_type": "code", "config_version": CONFIG_VERSION}  # what a run.json written by this code adds to an older one


class ModeAwarePolicy(ScriptedPolicy):
    """Plays each mode's natural script (search/execute first, then submit).

    ``solutions`` maps a phrase of a task's prompt to the code submitted for it.
    """

    def __init__(self, tokenizer, solutions: dict[str, str]):
        super().__init__(tokenizer)
        self.solutions = solutions

    def reply(self, prompt: list[int]) -> str:
        text = self.tokenizer.decode(prompt)
        code = next(sol for phrase, sol in self.solutions.items() if phrase in text)
        first = "<result>" not in text
        if "<search>your query</search>" in text and first:
            return "<search>json loads</search>"
        if "```submit" in text and first:
            return "```python\nprint('trying')\n```\n"
        if "```submit" in text:
            return f"```submit\n{code}\n```\n"
        return f"```python\n{code}\n```\n"  # no-tools


@pytest.fixture(scope="module")
def tasks(dataframebench_two):
    return dataframebench_two


@pytest.fixture(scope="module")
def docs(json_docs_dir):
    return api_docs_browser(json_docs_dir, ["json"], retriever="bm25", progress=False)


def _policy(tok, tasks):
    heatmap, scores = tasks  # DFB/B0001 (heatmap) gets a wrong solution, DFB/B0002 its reference
    assert "heatmap" in heatmap.prompt and "Score: 85" in scores.prompt
    return ModeAwarePolicy(
        tok,
        {
            "heatmap": "def task_func(rows=1000, string_length=3):\n    return None",
            "Score: 85": scores.meta["reference"],
        },
    )


def test_all_modes_write_results_table_and_plot_and_resume(smol, tasks, docs, tmp_path):
    _, tok = smol
    policy = _policy(tok, tasks)
    info = {"tasks": "dataframebench:test", "model": "scripted", "adapter": None}
    out = tmp_path / "base"
    cfg = CodeAgentConfig(test_feedback=False)  # the scripted wrong answer is submitted once
    summary = evaluate_code(
        tasks,
        policy,
        docs,
        ["no-tools", "code-only", "multi-tool"],
        out,
        config=cfg,
        run_info=info,
        progress=False,
        concurrency=2,
    )
    for mode, m in summary["modes"].items():
        assert m["n"] == 2 and m["pass_at_1"] == 0.5, mode
        assert m["submitted"] == 1.0 and m["tool_calls"]["submit"] == 1.0
    assert summary["modes"]["no-tools"]["turns"] == 1.0
    assert summary["modes"]["code-only"]["tool_calls"]["execute"] == 1.0
    assert summary["modes"]["multi-tool"]["tool_calls"]["search"] == 1.0
    assert summary["modes"]["multi-tool"]["reward_shaped"] == pytest.approx((1.0 + 0.05) / 2)
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk["modes"] == summary["modes"] and on_disk["versions"]["python"]
    for mode in ("no-tools", "code-only", "multi-tool"):
        lines = (out / mode / "trajectories.jsonl").read_text().splitlines()
        assert len(lines) == 2 and json.loads((out / mode / "results.json").read_text())["metrics"]["n"] == 2
    table = (out / "table.md").read_text()
    assert "| No tools (base) | 2 | 50.0% |" in table and "Multi-tool (base)" in table
    assert (out / "pass_at_1.png").read_bytes().startswith(PNG_MAGIC)
    assert not list(out.glob(".*"))  # no temp files left behind by the atomic writes
    calls = len(policy.prompts)
    # --compare: a whole run (every mode a row) beside one mode's results file, no generation
    cmp = tmp_path / "cmp"
    assert main(["--compare", f"base={out}", f"only={out / 'code-only' / 'results.json'}", "--out", str(cmp)]) == 0
    assert len(policy.prompts) == calls
    rows = [line for line in (cmp / "table.md").read_text().splitlines() if line.startswith("| base") or
            line.startswith("| only")]
    assert [r.split(" | ")[0] for r in rows] == ["| base, no tools", "| base, code only", "| base, multi-tool",
                                                 "| only"]
    assert all(" | 2 | 50.0% |" in r for r in rows)
    assert (cmp / "pass_at_1.png").read_bytes().startswith(PNG_MAGIC)
    (tmp_path / "bad.json").write_text("{not json")
    assert main(["--compare", str(tmp_path / "bad.json"), "--out", str(cmp)]) == 2

    again = evaluate_code(tasks, policy, docs, ["no-tools"], out, config=cfg, run_info=info, progress=False)
    assert len(policy.prompts) == calls and again["modes"]["no-tools"]["pass_at_1"] == 0.5  # resumed, nothing rerun
    # modes that never read the docs resume whatever docs index a later invocation names
    other_docs = {**info, "docs": "/somewhere/else"}
    again = evaluate_code(tasks, policy, docs, ["code-only"], out, config=cfg, run_info=other_docs, progress=False)
    assert len(policy.prompts) == calls and again["modes"]["code-only"]["pass_at_1"] == 0.5
    with pytest.raises(RunDirError, match="docs"):
        evaluate_code(tasks, policy, docs, ["multi-tool"], out, config=cfg, run_info=other_docs, progress=False)
    with pytest.raises(RunDirError, match="different run"):
        evaluate_code(
            tasks, policy, docs, ["no-tools"], out, config=cfg, run_info={**info, "model": "other"}, progress=False
        )



def test_after_rl_bar_comes_from_an_adapter_run(smol, tasks, docs, tmp_path):
    _, tok = smol
    policy = _policy(tok, tasks)
    base_info = {"tasks": "dataframebench:test", "model": "scripted", "adapter": None}
    evaluate_code(tasks, policy, docs, ["multi-tool"], tmp_path / "base", run_info=base_info, progress=False)
    with pytest.raises(RunDirError, match="without --adapter"):
        rl_result(tmp_path / "base")
    rl_info = {**base_info, "adapter": "runs/rl/final"}
    evaluate_code(tasks, policy, docs, ["multi-tool"], tmp_path / "rl", run_info=rl_info, progress=False)
    assert rl_result(tmp_path / "rl")["pass_at_1"] == 0.5
    summary = evaluate_code(
        tasks,
        policy,
        docs,
        ["no-tools"],
        tmp_path / "cmp",
        run_info=base_info,
        rl_run=tmp_path / "rl",
        progress=False,
    )
    assert "| Multi-tool (after RL) | 2 | 50.0% |" in summary["table"]
    assert (tmp_path / "cmp" / "pass_at_1.png").read_bytes().startswith(PNG_MAGIC)


def test_metrics_of_nothing_and_bad_modes(tasks, docs, tmp_path):
    assert code_metrics([]) == {"n": 0}
    with pytest.raises(ValueError, match="unknown mode"):
        evaluate_code(tasks, None, docs, ["tools"], tmp_path, progress=False)


def test_cli_runs_a_tiny_real_model_and_reports_clear_errors(smol, tmp_path, capsys):
    out = tmp_path / "cli"
    argv = [
        "--tasks",
        "dataframebench:test",
        "--limit",
        "2",
        "--mode",
        "no-tools",
        "--model",
        "smollm2-135m",
        "--set",
        "max_new_tokens=16",
        "--out",
        str(out),
        "--quiet",
    ]
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    m = results["modes"]["no-tools"]
    assert m["n"] == 2 and 0.0 <= m["pass_at_1"] <= 1.0 and m["turns"] == 1.0
    assert results["agent_config"]["max_new_tokens"] == 16 and results["model"] == "smollm2-135m"
    assert (out / "table.md").exists() and (out / "pass_at_1.png").read_bytes().startswith(PNG_MAGIC)
    lines = (out / "no-tools" / "trajectories.jsonl").read_text().splitlines()
    for line in lines:
        steps = json.loads(line)["steps"]
        assert len(steps) == 1 and len(steps[0]["completion_ids"]) <= 16
    subset = [t.id for t in seeded_subset(load_tasks("dataframebench:test"), 2, 0)]
    assert sorted(json.loads(line)["id"] for line in lines) == sorted(subset), "--limit is the seeded subset"
    assert subset != ["DFB/B0001", "DFB/B0002"]
    assert main(["--tasks", "mbpp", "--out", str(tmp_path / "x"), "--quiet"]) == 2
    assert "unknown task spec" in capsys.readouterr().err
    assert (
        main([*argv[:-3], "--out", str(tmp_path / "y"), "--rl-run", str(out), "--quiet"]) == 2
    )  # a base run is no after-RL result
    assert "without --adapter" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="error: expected name=value"):
        main([*argv, "--set", "temperature"])
    assert main([*argv[:-3], "--ids", "B0001,B9999", "--out", str(tmp_path / "z"), "--quiet"]) == 2
    assert "B9999" in capsys.readouterr().err and not (tmp_path / "z").exists()


def test_ids_pick_named_tasks_in_task_order():
    tasks = load_tasks("dataframebench:test", limit=20)
    picked = select_ids(tasks, "B0017, DFB/B0013")
    assert [t.id for t in picked] == ["DFB/B0013", "DFB/B0017"]
    assert select_ids(tasks, None) == tasks
    with pytest.raises(ValueError, match="B0050"):
        select_ids(tasks, "B0013,B0050")  # beyond --limit 20


def test_rescore_retests_saved_submissions_without_generating(smol, tasks, tmp_path):
    from eval.code_rescore import rescore

    _, tok = smol
    policy = _policy(tok, tasks)
    info = {"tasks": "dataframebench:test", "limit": 2, "model": "scripted", "adapter": None, "docs": None}
    out = tmp_path / "run"
    evaluate_code(tasks, policy, None, ["no-tools"], out, run_info=info, progress=False)
    path = out / "no-tools" / "trajectories.jsonl"
    # an older scorer failed the right submission (say, a library was missing then)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        if row["gold"]["passed"]:
            row["gold"]["passed"] = False
            row["steps"][-1]["info"].update(passed=False, error="ModuleNotFoundError: No module named 'x'")
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    calls = len(policy.prompts)

    summary = rescore(out, progress=False)
    assert len(policy.prompts) == calls  # nothing generated
    assert summary["modes"]["no-tools"]["pass_at_1"] == 0.5 and summary["rescored"]
    mode = json.loads((out / "no-tools" / "results.json").read_text())
    assert mode["rescore_flips"] == 1 and mode["metrics"]["pass_at_1"] == 0.5
    fixed = [json.loads(line) for line in path.read_text().splitlines()]
    before = [r["steps"][-1]["info"]["before_rescore"] for r in fixed]
    assert sorted(b["error"] or "" for b in before)[-1].startswith("ModuleNotFoundError")
    assert "| No tools (base) | 2 | 50.0% |" in (out / "table.md").read_text()
    assert main(["--rescore", "--out", str(out), "--quiet"]) == 0  # the CLI path; idempotent
    assert json.loads((out / "no-tools" / "results.json").read_text())["rescore_flips"] == 0
    with pytest.raises(RunDirError, match="no `python -m eval code`"):
        rescore(tmp_path / "empty", progress=False)


def test_a_mode_directory_of_older_code_resumes(smol, tasks, tmp_path):
    """Older code wrote a mode's run.json without task_type or config_version, and with only the agent
    settings it knew; the same command resumes it (``rundir.migrate``) without running a task again."""
    _, tok = smol
    policy = _policy(tok, tasks)
    info = {"tasks": "dataframebench:test", "model": "scripted", "adapter": None, "endpoint": None, "docs": None}
    cfg = CodeAgentConfig(test_feedback=False)
    evaluate_code(tasks, policy, None, ["no-tools"], tmp_path, config=cfg, run_info=info, progress=False)
    path = tmp_path / "no-tools" / "run.json"
    run = json.loads(path.read_text())
    younger = ("redraw_seed", "recall_passing_run", "observation_format")
    old = {k: v for k, v in run.items() if k not in ("task_type", "config_version")}
    old["agent_config"] = {k: v for k, v in run["agent_config"].items() if k not in younger}
    path.write_text(json.dumps(old))
    calls = len(policy.prompts)
    again = evaluate_code(tasks, policy, None, ["no-tools"], tmp_path, config=cfg, run_info=info, progress=False)
    assert len(policy.prompts) == calls and again["modes"]["no-tools"]["pass_at_1"] == 0.5
    assert json.loads(path.read_text())["config_version"] == CONFIG_VERSION
    mode = json.loads((tmp_path / "no-tools" / "results.json").read_text())
    assert mode["question_ids"] == [t.id for t in tasks] and mode["n_resumed"] == 2


def test_runs_made_before_observation_format_resume_only_where_it_cannot_matter(tmp_path):
    """An old run.json has no observation_format: it was made inline. A code-only resume with the
    new chat default is a different run; a no-tools resume (no result is ever shown) is not."""
    import dataclasses

    from research_agent.code.agent import CodeAgentConfig

    for mode, same in (("no-tools", True), ("code-only", False)):
        new = CodeAgentConfig(mode=mode).to_dict()
        old = {k: v for k, v in new.items() if k != "observation_format"}
        info = {
            "schema": 1,
            "mode": mode,
            "tasks": "t",
            "model": "m",
            "adapter": None,
            "endpoint": None,
            "docs": None,
        }
        d = tmp_path / mode
        d.mkdir()
        (d / "run.json").write_text(json.dumps({**info, "agent_config": old}))
        if same:
            start_run(d, {**info, **TODAY, "agent_config": new})
            assert json.loads((d / "run.json").read_text())["agent_config"]["observation_format"] == "chat"
        else:
            with pytest.raises(RunDirError, match="observation_format"):
                start_run(d, {**info, **TODAY, "agent_config": new})
            inline = dataclasses.replace(CodeAgentConfig(mode=mode), observation_format="inline").to_dict()
            start_run(d, {**info, **TODAY, "agent_config": inline})  # asking for the old format resumes it


def test_runs_made_before_loop_stopping_resume_only_without_it(tmp_path, capsys):
    from eval.code import build_parser, code_config
    from research_agent.code.agent import CodeAgentConfig

    def config_from_pairs(pairs):
        return code_config(build_parser().parse_args(["--out", "o", *(f"--set={p}" for p in pairs)]))

    assert config_from_pairs(["stop_loops=false"]).stop_loops is False
    assert config_from_pairs(["stop_loops=True", "max_turns=3"]) == CodeAgentConfig(max_turns=3)
    with pytest.raises(SystemExit, match="is not a boolean"):
        config_from_pairs(["stop_loops=maybe"])
    new = CodeAgentConfig(mode="code-only").to_dict()
    old = {k: v for k, v in new.items() if k != "stop_loops"}
    info = {"schema": 1, "mode": "code-only", "tasks": "t", "model": "m", "adapter": None, "endpoint": None,
            "docs": None}
    (tmp_path / "run.json").write_text(json.dumps({**info, "agent_config": old}))
    with pytest.raises(RunDirError, match="stop_loops"):
        start_run(tmp_path, {**info, **TODAY, "agent_config": new})
    start_run(tmp_path, {**info, **TODAY, "agent_config": {**new, "stop_loops": False}})


def test_runs_made_before_the_submit_hint_resume_without_it_or_in_no_tools(tmp_path):
    from research_agent.code.agent import CodeAgentConfig

    info = {"schema": 1, "tasks": "t", "model": "m", "adapter": None, "endpoint": None, "docs": None}
    for mode, same in (("no-tools", True), ("code-only", False)):
        new = CodeAgentConfig(mode=mode).to_dict()
        old = {k: v for k, v in new.items() if k != "submit_hint"}
        d = tmp_path / mode
        d.mkdir()
        (d / "run.json").write_text(json.dumps({**info, "mode": mode, "agent_config": old}))
        if same:
            start_run(d, {**info, **TODAY, "mode": mode, "agent_config": new})
            continue
        with pytest.raises(RunDirError, match="submit_hint"):
            start_run(d, {**info, **TODAY, "mode": mode, "agent_config": new})
        start_run(d, {**info, **TODAY, "mode": mode, "agent_config": {**new, "submit_hint": False}})


class StoppingPolicy(ModeAwarePolicy):
    """Sets ``stop`` during its first generate call, as a Ctrl-C arriving mid-task would."""

    def __init__(self, tokenizer, solutions, stop):
        super().__init__(tokenizer, solutions)
        self.stop = stop

    def generate(self, prompts, **kw):
        self.stop.set()
        return super().generate(prompts, **kw)


def test_a_stop_saves_the_task_in_flight_skips_the_rest_and_resumes(smol, tasks, docs, tmp_path):
    import threading

    from eval.drain import EvalStopped

    _, tok = smol
    solutions = _policy(tok, tasks).solutions
    stop = threading.Event()
    info = {"tasks": "dataframebench:test", "model": "scripted", "adapter": None}
    with pytest.raises(EvalStopped, match="1 of 2 saved in .*no-tools"):
        evaluate_code(tasks, StoppingPolicy(tok, solutions, stop), docs, ["no-tools"], tmp_path, run_info=info,
                      progress=False, concurrency=1, stop=stop)
    lines = (tmp_path / "no-tools" / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 1  # the task in flight ran to the end and was written; the queued one never started
    assert not (tmp_path / "no-tools" / "results.json").exists()  # no metrics over half a run
    policy = ModeAwarePolicy(tok, solutions)
    summary = evaluate_code(tasks, policy, docs, ["no-tools"], tmp_path, run_info=info, progress=False)
    assert len(policy.prompts) == 1 and summary["modes"]["no-tools"]["n"] == 2  # only the skipped task ran


@pytest.fixture
def default_signals():
    """Python's own SIGINT/SIGTERM handling, as a command starts with: the drain takes over only those,
    and a library an earlier test ran in this process (a server, a trainer) may have left its own."""
    import signal

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


def test_first_signal_asks_for_a_drain_not_an_exit(default_signals):
    import os
    import signal
    import threading

    from eval.drain import drain_on_signals

    stop = threading.Event()
    before = signal.getsignal(signal.SIGINT)
    with drain_on_signals(stop):
        os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt: the handler only sets the event
        assert stop.wait(5)
    assert signal.getsignal(signal.SIGINT) is before


def test_a_drain_with_a_deadline_aborts_the_tasks_still_in_flight(default_signals):
    """``--drain-s``: the drain gets the second signal's action once its time is up; a drain that ends
    in time is not aborted afterwards."""
    import os
    import signal
    import threading
    import time

    from eval.code import main
    from eval.drain import drain_on_signals

    stop, aborted = threading.Event(), threading.Event()
    with drain_on_signals(stop, drain_s=0.2, abort=lambda signum: aborted.set()):
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5) and not aborted.is_set()  # draining
        assert aborted.wait(5)  # time is up: the tasks still in flight are given up
    stop, aborted = threading.Event(), threading.Event()
    with drain_on_signals(stop, drain_s=0.3, abort=lambda signum: aborted.set()):
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.wait(5)
    time.sleep(0.5)
    assert not aborted.is_set()  # the drain ended in time: its deadline went with it
    with pytest.raises(SystemExit):
        main(["--tasks", "humaneval", "--out", "x", "--drain-s", "-1"])


def test_a_drain_deadline_ends_a_real_process():
    """The deadline fires on a timer thread, where Python refuses to set a signal handler: the real
    abort has to run in the main thread (a test double for it ran anywhere and hid that)."""
    import signal
    import subprocess
    import sys
    import time

    child = subprocess.Popen(
        [sys.executable, "-c",
         "import threading, time\n"
         "from eval.drain import drain_on_signals\n"
         "with drain_on_signals(threading.Event(), drain_s=0.5):\n"
         "    print('ready', flush=True)\n"
         "    time.sleep(60)  # a task still in flight\n"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        assert child.stdout.readline().strip() == "ready"
        t0 = time.monotonic()
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=20) == -signal.SIGTERM
        assert time.monotonic() - t0 < 20
        assert "stopping: finishing the tasks in flight for up to 0.5 s" in child.stderr.read()
    finally:
        child.kill()
