"""Session fixtures shared by the agent, synthesis and training tests: a small real corpus built
from installed Factbook profiles, and the real fast model (smollm2-135m), each made once."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Fixtures that load a real language model (smollm2-135m), here or in a subfolder's conftest: every test
# that uses one, directly or through another fixture, is marked ``model`` (pytest_collection_modifyitems).
# A test that loads a model itself carries ``@pytest.mark.model`` (or its module's ``pytestmark``).
MODEL_FIXTURES = {"smol", "lora_model", "server"}

# France, Germany and their neighbours: enough for single- and multi-hop questions over border links
SMALL_GECS = ["fr", "gm", "it", "sp", "be", "lu", "sz", "au", "nl", "po", "an", "mn", "ez", "da", "pl"]


@pytest.fixture(scope="session")
def small_corpus_dir(tmp_path_factory):
    from corpus import build_corpus
    from corpus.factbook import factbook_documents

    out = tmp_path_factory.mktemp("corpus") / "factbook-small"
    build_corpus(out=out, documents=list(factbook_documents(gecs=SMALL_GECS)), progress=False)
    return out


@pytest.fixture(scope="session")
def small_browser(small_corpus_dir):
    from corpus import open_corpus

    return open_corpus(small_corpus_dir)


@pytest.fixture(scope="session")
def smol():
    """(model, tokenizer) of the fast model; fetched and converted once per machine."""
    from research_agent.inference.models import load_model

    return load_model("smollm2-135m", progress=False)


@pytest.fixture(scope="session")
def json_docs_dir(tmp_path_factory):
    """A real API-docs corpus over one small module (json), built once with the project's own builder."""
    from research_agent.code.apidocs import api_docs_browser

    path = tmp_path_factory.mktemp("apidocs") / "api-docs"
    api_docs_browser(path, ["json"], retriever="bm25", progress=False)
    return path


@pytest.fixture(scope="session")
def json_docs(json_docs_dir):
    """A BM25 browser over ``json_docs_dir`` (fork it per trajectory)."""
    from corpus import open_corpus

    return open_corpus(json_docs_dir, retriever="bm25")


@pytest.fixture(scope="module")
def server(smol):
    """``research_agent.inference.serve`` over the fast model in a thread on loopback; its base URL."""
    import threading

    from research_agent.inference.policy import LocalPolicy
    from research_agent.inference.serve import make_server

    model, tok = smol
    srv = make_server(LocalPolicy(model, tok, "smollm2-135m"), "smollm2-135m")
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def pytest_collection_modifyitems(config, items):
    """Mark every test that reaches a model fixture ``model``, so ``-m "not model"`` needs no marks kept by hand."""
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)
