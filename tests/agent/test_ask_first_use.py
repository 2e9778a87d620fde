"""``ask`` on a fresh default corpus: it answers from BM25 at once, says the dense index is being
built in the background, and ends with the time each first-use stage took; the model fetch runs in
a thread alongside the corpus build and hands its error to the caller.  (The background build itself
is tested in tests/corpus/test_staged_default.py; here a stand-in process takes its place.)"""

from __future__ import annotations

import time

import pytest


def test_model_fetch_runs_in_a_thread_and_hands_back_its_time_or_error(monkeypatch):
    import research_agent.inference.models as models

    calls = []

    def slow_resolve(name, progress=True):
        calls.append(name)
        time.sleep(0.2)
        if name == "broken":
            raise models.ModelError("no such model")
        return "/somewhere"

    monkeypatch.setattr(models, "resolve_model_dir", slow_resolve)
    t0 = time.perf_counter()
    fetch = models.ModelFetch("smollm2-135m", progress=False)
    assert time.perf_counter() - t0 < 0.15  # the caller goes on at once
    assert fetch.wait() >= 0.2 and calls == ["smollm2-135m"]
    with pytest.raises(models.ModelError, match="no such model"):
        models.ModelFetch("broken", progress=False).wait()
    assert models.is_ready("/a/local/dir") and models.is_ready("some/hub-id")


@pytest.mark.model
def test_first_ask_answers_from_bm25_and_prints_its_first_use_stages(tmp_path, monkeypatch, capsys):
    import subprocess

    import corpus.build
    import corpus.staged
    from corpus.factbook import factbook_documents
    from corpus.staged import BACKGROUND
    from research_agent.ask import main
    from research_agent.inference.models import resolve_model_dir

    resolve_model_dir("smollm2-135m", progress=False)  # fetched and converted once per machine
    out = tmp_path / "default"

    def stand_in_build(root):  # tests/corpus/test_staged_default.py runs the real one
        BACKGROUND[root] = subprocess.Popen(["sleep", "60"])
        return BACKGROUND[root]

    monkeypatch.setattr(corpus.staged, "start_dense_build", stand_in_build)
    monkeypatch.setenv("RESEARCH_AGENT_CORPUS", str(out))
    monkeypatch.setattr(
        corpus.build, "preset_documents", lambda preset, quiet=False: factbook_documents(["pe"])
    )
    monkeypatch.setattr(corpus.build, "preset_source_hashes", lambda preset, quiet=False: {})
    try:
        rc = main(
            [
                "What is the capital of Peru?",
                "--model",
                "smollm2-135m",
                "--max-turns",
                "1",
                "--max-new-tokens",
                "8",
                "--quiet",
            ]
        )
    finally:
        proc = BACKGROUND.pop(out, None)
        if proc is not None:
            proc.kill()
            proc.wait(timeout=30)
    assert rc in (0, 3)  # smollm2 with 8 tokens is not asserted to answer well
    err = capsys.readouterr().err
    assert "answering from BM25 while the dense index builds in the background (pid" in err
    stages = err[err.index("first-use stages (install excluded):") :].splitlines()
    assert stages[1].split()[:6] == ["default", "corpus:", "chunks", "+", "BM25", "index"]
    assert stages[2].lstrip().startswith("time to first answer (from the start of ask)")
    assert stages[2].endswith(" s") and len(stages) == 3  # smollm2 was ready: no fetch stage
