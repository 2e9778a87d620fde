"""``langgraph.json`` and ``research_agent.studio.graph``: the graph loads the way ``langgraph dev``
loads it (no server), is cheap to import, and a run really runs the agent, under a checkpointer as
the server keeps one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from research_agent.agent import ResearchAgent
from research_agent.configs import ConfigError
from research_agent.studio import agent_config, answer_record, graph
from tests.doubles import ScriptedPolicy

ROOT = Path(__file__).resolve().parents[2]

# What langgraph-api's _graph_from_spec does with each "graphs" entry of langgraph.json: a path
# ("./x.py:attr") is executed as a file under a made-up module name, not imported from its package;
# a module ("pkg.mod:attr") is imported. Run in a fresh interpreter, which also shows what it imports.
LOADER = textwrap.dedent("""
    import importlib, importlib.util, json, sys, time
    from pathlib import Path
    from langgraph_cli.config import validate_config_file
    from langgraph.pregel import Pregel

    config = validate_config_file(Path("langgraph.json"))
    t0, found = time.perf_counter(), {}
    for graph_id, spec in config["graphs"].items():
        source, variable = (spec["path"] if isinstance(spec, dict) else spec).rsplit(":", 1)
        if "/" in source:
            name = source.replace("/", "__").replace(".py", "").replace(" ", "_").lstrip(".")
            modspec = importlib.util.spec_from_file_location(name, source)
            module = importlib.util.module_from_spec(modspec)
            sys.modules[name] = module
            modspec.loader.exec_module(module)
        else:
            module = importlib.import_module(source)
        value = module.__dict__[variable]
        found[graph_id] = {"pregel": isinstance(value, Pregel), "callable": callable(value),
                           "checkpointer": value.checkpointer is not None, "store": value.store is not None,
                           "nodes": sorted(value.nodes)}
    print(json.dumps({"graphs": found, "dependencies": config["dependencies"],
                      "seconds": time.perf_counter() - t0,
                      "heavy": sorted(m for m in ("torch", "transformers", "faiss", "sentence_transformers")
                                      if m in sys.modules)}))
""")


def test_langgraph_json_loads_the_compiled_research_graph_as_the_cli_does():
    pytest.importorskip("langgraph_cli", reason="langgraph-cli is in the dev extra")
    out = subprocess.run([sys.executable, "-c", LOADER], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded["dependencies"] == ["."]
    assert loaded["graphs"] == {"research_agent": {"pregel": True, "callable": False, "checkpointer": False,
                                                   "store": False, "nodes": ["__start__", "research"]}}
    # cheap to import: the model and the corpus wait for the first run
    assert loaded["heavy"] == [], loaded


def test_the_graph_tells_studio_its_input_settings_and_output():
    assert graph.get_input_jsonschema()["required"] == ["question"]
    settings = graph.get_context_jsonschema()["properties"]
    assert {"model", "adapter", "endpoint", "corpus", "max_turns", "max_tool_calls"} <= set(settings)
    assert {"answer", "citations", "sources", "steps", "stop_reason"} <= set(graph.get_output_jsonschema()["properties"])


@pytest.mark.model
def test_a_run_really_runs_the_agent_and_its_state_is_plain_json(small_corpus_dir):
    """The real model on a real corpus, one turn, under a checkpointer as ``langgraph dev`` runs it:
    the episode's live objects must stay out of the stored state."""
    served = graph.copy(update={"checkpointer": InMemorySaver()})
    thread = {"configurable": {"thread_id": "studio-test"}}
    context = {"model": "smollm2-135m", "corpus": str(small_corpus_dir), "max_turns": 1, "max_new_tokens": 16}
    streamed, final = [], None
    for mode, chunk in served.stream({"question": "What is the capital of France?"}, thread, context=context,
                                     stream_mode=["custom", "values"]):
        if mode == "custom":
            streamed.append(chunk["step"])
        else:
            final = chunk
    assert final["model"] == "smollm2-135m"
    assert len(final["steps"]) == 1 and streamed == final["steps"]  # each step streamed as it was taken
    assert final["stop_reason"] in ("answer", "max_turns") and final["seconds"] > 0
    stored = served.get_state(thread).values
    assert stored["question"] == "What is the capital of France?"
    json.dumps(stored)  # plain JSON: nothing of the policy, the browser or the environment


def test_the_answer_record_carries_citations_and_the_text_they_cite(smol, small_browser):
    _, tok = smol
    policy = ScriptedPolicy(tok, ["<search>capital of France</search>", "<answer>Paris [factbook/fr#0]</answer>"])
    traj = ResearchAgent(policy, small_browser.fork(), agent_config({})).run("What is the capital of France?")
    record = answer_record(traj)
    assert record["answer"] == "Paris" and record["citations"] == ["factbook/fr#0"]
    assert "Paris" in record["sources"]["factbook/fr#0"]
    assert record["citation_check"]["unretrieved"] == [] and record["citation_check"]["support_rate"] == 1.0
    assert [s["action"] for s in record["steps"]] == ["search", "answer"]
    assert "factbook/fr#0" in record["steps"][0]["observation"]
    json.dumps(record)


def test_bad_input_and_settings_fail_before_any_model_loads():
    with pytest.raises(ValueError, match="the question is empty"):
        graph.invoke({"question": "  "})
    with pytest.raises(ConfigError, match="max_turns"):
        graph.invoke({"question": "Where is Peru?"}, context={"max_turns": "many"})
    assert agent_config({"max_turns": 2, "model": "ignored-here"}).max_turns == 2
    assert agent_config({}).semantic_citations  # ask's defaults
