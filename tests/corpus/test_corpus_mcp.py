"""``python -m corpus mcp`` through the MCP SDK's own client: the server is spawned as a subprocess
over stdio (as an assistant spawns it), and served over streamable HTTP on loopback; its tools give
what ``corpus search`` / the Browser give, and bad arguments come back as MCP errors."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import socket
import sys
import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is in the dev and mcp extras")
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from corpus import cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
QUERIES = [
    "How do honeybees tell nestmates where the flowers are? waggle dance",
    "What is the capital of Kenya?",
    "spring tides and neap tides moon",
    "most expensive spice harvested from crocus flowers",
    "Karl von Frisch Nobel Prize 1973",
]


class SyncClient:
    """The SDK's async ``Client``, held open in a thread of its own so that plain tests can call it:
    one server process (or HTTP session) for the whole module, as an assistant keeps one."""

    def __init__(self, server, timeout_s: float = 120, mode: str = "auto"):
        self.timeout_s, self.mode = timeout_s, mode
        self._loop = asyncio.new_event_loop()
        self._ready: Future = Future()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._hold(server),),
                                        daemon=True)
        self._thread.start()
        self._ready.result(timeout=timeout_s)  # the server started and answered the handshake

    async def _hold(self, server) -> None:
        try:
            async with Client(server, read_timeout_seconds=self.timeout_s, mode=self.mode) as client:
                self._client, self._stop = client, asyncio.Event()
                self._ready.set_result(None)
                await self._stop.wait()
        except BaseException as e:
            if not self._ready.done():
                self._ready.set_exception(e)
            raise

    def run(self, method: str, *args, **kwargs):
        call = getattr(self._client, method)(*args, **kwargs)
        return asyncio.run_coroutine_threadsafe(call, self._loop).result(timeout=self.timeout_s)

    def call(self, tool: str, **arguments):
        return self.run("call_tool", tool, arguments)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)


@pytest.fixture(scope="module")
def stdio(small_corpus):
    """``python -m corpus mcp --corpus DIR`` spawned by the SDK's stdio client."""
    env = {k: v for k, v in os.environ.items() if k.startswith(("HF_", "TOKENIZERS", "RESEARCH_AGENT", "OMP"))}
    params = StdioServerParameters(command=sys.executable, args=["-m", "corpus", "mcp", "--corpus",
                                                                 str(small_corpus.path)],
                                   env={**env, "PYTHONPATH": str(ROOT)}, cwd=str(ROOT))
    client = SyncClient(params)
    yield client
    client.close()


@pytest.fixture(scope="module")
def http_url(small_corpus):
    """The same server over streamable HTTP on a free loopback port, in this process; its URL."""
    from corpus import open_corpus
    from corpus.mcp_server import build_server, serve_http

    sock = socket.create_server(("127.0.0.1", 0))
    ready: Future = Future()
    server = build_server(open_corpus(small_corpus.path))
    threading.Thread(target=serve_http, args=(server, "127.0.0.1"), kwargs={"sock": sock, "on_ready": ready.set_result},
                     daemon=True).start()
    return ready.result(timeout=30)


def corpus_search(path: Path, query: str) -> list[dict]:
    """What ``python -m corpus search DIR QUERY --json`` prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["search", str(path), query, "--json"]) == 0
    return json.loads(out.getvalue())


def text(result) -> str:
    return "\n".join(block.text for block in result.content)


def test_the_client_lists_the_three_tools_with_schemas(stdio):
    tools = {t.name: t for t in stdio.run("list_tools").tools}
    assert set(tools) == {"search", "open", "find"}
    assert tools["search"].input_schema["required"] == ["query"]
    assert tools["open"].input_schema["required"] == ["doc"]
    assert tools["find"].input_schema["required"] == ["pattern"]
    assert "hits" in tools["search"].output_schema["properties"]
    assert all(t.description for t in tools.values())


@pytest.mark.parametrize("query", QUERIES)
def test_search_gives_what_corpus_search_gives(stdio, small_corpus, query):
    expected = corpus_search(small_corpus.path, query)
    result = stdio.call("search", query=query)
    assert not result.is_error, text(result)
    hits = result.structured_content["hits"]
    assert hits[0]["chunk_id"] == expected[0]["chunk_id"]  # the same top hit
    assert [h["chunk_id"] for h in hits] == [h["chunk_id"] for h in expected]
    assert hits[0]["score"] == pytest.approx(expected[0]["score"], abs=1e-6)
    assert f"1. {expected[0]['title']} [{expected[0]['chunk_id']}]" in text(result)


def test_search_limits_are_the_browsers(stdio, browser):
    assert len(stdio.call("search", query="capital", k=1000).structured_content["hits"]) == 50
    hits = stdio.call("search", query="capital", k=3).structured_content["hits"]
    assert [h["chunk_id"] for h in hits] == [h.chunk_id for h in browser.search("capital", k=3)]


def test_open_then_find_reads_the_opened_document(stdio, browser):
    page = stdio.call("open", doc="factbook/ke")
    assert not page.is_error, text(page)
    assert page.structured_content["page"] == browser.fork().open("factbook/ke").to_dict()
    assert "L1: " in text(page) and "page 1/" in text(page)
    found = stdio.call("find", pattern="Capital")
    local = browser.fork()
    local.open("factbook/ke")
    assert found.structured_content == {"doc_id": "factbook/ke", "matches": [m.to_dict() for m in local.find("Capital")]}
    assert "Nairobi" in text(found)


def test_open_a_chunk_id_and_find_in_a_named_document(stdio, browser):
    chunk = browser.search("spring tides and neap tides moon")[0].chunk_id
    page = stdio.call("open", doc=chunk).structured_content["page"]
    assert chunk in page["chunk_ids"]
    found = stdio.call("find", pattern="nairobi", doc="factbook/ke").structured_content
    assert found["doc_id"] == "factbook/ke" and found["matches"]
    regex = stdio.call("find", pattern=r"neap\s+tides?", regex=True, doc="notes/tides.md").structured_content
    assert regex["matches"] and all("neap" in m["text"].lower() for m in regex["matches"])


@pytest.mark.parametrize(
    "tool, arguments, message",
    [
        ("search", {"query": ""}, "QueryError: empty query"),
        ("search", {"query": "   "}, "QueryError: empty query"),
        ("search", {"query": "x" * 10_000}, "QueryError: query too long"),
        ("search", {"query": "bees", "k": 0}, "QueryError: k must be a positive integer"),
        ("search", {"query": "bees", "k": -3}, "QueryError: k must be a positive integer"),
        ("search", {"query": "bees", "k": "many"}, "k"),
        ("search", {"query": "bees", "k": 2.5}, "k"),
        ("search", {"query": "bees", "k": True}, "k"),
        ("search", {}, "query"),
        ("open", {"doc": "factbook/nowhere"}, "DocumentNotFound: no document 'factbook/nowhere'"),
        ("open", {"doc": "factbook/ke#999"}, "DocumentNotFound: no chunk 'factbook/ke#999'"),
        ("open", {"doc": ""}, "DocumentNotFound"),
        ("open", {"doc": "factbook/ke", "page": 999}, "PageOutOfRange: page 999 is past the end"),
        ("open", {"doc": "factbook/ke", "page": 0}, "PageOutOfRange"),
        ("find", {"pattern": ""}, "QueryError: empty find pattern"),
        ("find", {"pattern": "(unclosed", "regex": True, "doc": "factbook/ke"}, "QueryError: invalid regular expression"),
        ("find", {"pattern": "x", "doc": "factbook/nowhere"}, "DocumentNotFound"),
    ],
)
def test_bad_arguments_are_error_results_not_tracebacks(stdio, tool, arguments, message):
    result = stdio.call(tool, **arguments)
    assert result.is_error
    assert message in text(result)
    assert "Traceback" not in text(result)


def test_an_unknown_tool_is_an_error_and_the_server_keeps_serving(stdio):
    try:
        result = stdio.call("telepathy", query="x")
    except MCPError as e:  # a JSON-RPC error is as good as an error result
        assert "telepathy" in str(e)
    else:
        assert result.is_error and "telepathy" in text(result)
    assert not stdio.call("search", query="bees").is_error


def test_find_before_any_open_says_to_open_first(small_corpus):
    """A fresh server: nothing opened in this session yet (its own process, as a new client gets)."""
    from corpus import open_corpus
    from corpus.mcp_server import build_server

    client = SyncClient(build_server(open_corpus(small_corpus.path)))  # in-process transport
    try:
        result = client.call("find", pattern="Capital")
        assert result.is_error and "NoDocumentOpen" in text(result) and "pass doc" in text(result)
    finally:
        client.close()


def test_streamable_http_serves_the_same_results(http_url, stdio):
    """The SDK's client speaks the stateless protocol by default: no session, so find names its doc."""
    client = SyncClient(http_url)
    try:
        for query in QUERIES[:2]:
            assert (client.call("search", query=query).structured_content
                    == stdio.call("search", query=query).structured_content)
        assert client.call("find", pattern="neap", doc="notes/tides.md").structured_content["matches"]
        assert not client.call("open", doc="notes/tides.md").is_error
        stateless = client.call("find", pattern="neap")
        assert stateless.is_error and "no session" in text(stateless) and "pass doc" in text(stateless)
        assert client.call("open", doc="factbook/nowhere").is_error
    finally:
        client.close()


def test_an_http_session_keeps_its_opened_document(http_url):
    """A client with a session (the initialize handshake, as most assistants connect) has its own
    opened document, as it would over stdio."""
    first, second = SyncClient(http_url, mode="legacy"), SyncClient(http_url, mode="legacy")
    try:
        assert not first.call("open", doc="notes/tides.md").is_error
        assert not second.call("open", doc="factbook/ke").is_error
        assert first.call("find", pattern="neap").structured_content["doc_id"] == "notes/tides.md"
        assert second.call("find", pattern="Nairobi").structured_content["doc_id"] == "factbook/ke"
    finally:
        first.close()
        second.close()


def test_a_directory_that_is_no_corpus_fails_at_start_with_a_message(tmp_path, capsys):
    assert cli.main(["mcp", "--corpus", str(tmp_path / "nothing")]) == 2
    assert "error:" in capsys.readouterr().err
