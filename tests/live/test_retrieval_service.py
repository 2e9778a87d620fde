"""The retrieval service answers exactly as the in-process Browser does, under concurrent load, on loopback."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from corpus.browser import Browser, DocumentNotFound, NoDocumentOpen, PageOutOfRange, QueryError
from corpus.live import FetchFailed
from corpus.service import RemoteBrowser, ServiceUnavailable, make_server

TOPICS = {
    "volcanoes": "Volcanoes erupt molten rock called lava. Basalt forms when lava cools quickly near the surface.",
    "rivers": "The Nile is a major river flowing north through northeastern Africa into the Mediterranean Sea.",
    "comets": "A comet is an icy body that releases gas when passing close to the Sun, forming a visible coma and tail.",
    "bridges": "Suspension bridges hang the deck from vertical suspenders attached to main cables over towers.",
    "bees": "Honey bees communicate the direction of flowers to nest mates with the waggle dance.",
    "glaciers": "Glaciers are persistent bodies of dense ice that move under their own weight, carving valleys.",
    "printing": "Johannes Gutenberg introduced movable type printing to Europe around the year 1440.",
    "vaccines": "Edward Jenner's smallpox vaccine of 1796 used material from cowpox lesions.",
}
QUERIES = [
    "lava basalt",
    "river Africa",
    "icy comet tail",
    "suspension cables",
    "bee dance",
    "ice valleys",
    "Gutenberg movable type",
    "smallpox Jenner",
]


def serving(browser, **kw):
    server = make_server(browser, **kw)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop(server) -> None:
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    from corpus import build_corpus

    src = tmp_path_factory.mktemp("docs")
    for name, lead in TOPICS.items():
        filler = "\n\n".join(
            f"{name.title()} note {i}: {lead} Observers recorded detail number {i} about "
            f"{name} in the archive of the society."
            for i in range(40)
        )
        (src / f"{name}.md").write_text(f"# {name.title()}\n\n{lead}\n\n{filler}\n", encoding="utf-8")
    out = tmp_path_factory.mktemp("index") / "corpus"
    build_corpus(sources=[src], out=out, progress=False)
    return out


@pytest.fixture(scope="module")
def local_browser(corpus_dir):
    from corpus import open_corpus

    return open_corpus(corpus_dir)  # the default, hybrid retriever


@pytest.fixture(scope="module")
def service(local_browser):
    server = serving(local_browser)
    yield server
    stop(server)


def outcome(fn, *args, **kw):
    """A call's result or its error (type and message), so answers and failures compare alike."""
    try:
        result = fn(*args, **kw)
    except Exception as e:
        return ("error", type(e).__name__, str(e))
    if isinstance(result, list):
        return [r.to_dict() for r in result]
    return result.to_dict() if hasattr(result, "to_dict") else result


def script(b, query: str) -> list:
    """One client's session (10 calls): search, open the top hit (two pages), find, a citation, errors."""
    out = [outcome(b.search, query, k=3)]
    hits = b.search(query, k=3)
    top = hits[0].doc_id
    out.append(outcome(b.open, top))
    out.append(outcome(b.open, top, page=2))
    out.append(outcome(b.find, query.split()[0]))
    out.append(outcome(b.find, r"note \d+:", regex=True))
    out.append(outcome(b.chunk_text, hits[0].chunk_id))
    out.append(outcome(b.open, top, page=999))
    out.append(outcome(b.open, "no-such-document"))
    out.append(outcome(b.find, "(", regex=True))
    return out


def test_remote_answers_as_in_process(local_browser, service):
    """Every query's session, run concurrently (one thread each), matches the in-process answers."""
    remote = RemoteBrowser(service.url)
    assert isinstance(remote, Browser)
    expected = [script(local_browser.fork(), q) for q in QUERIES]
    with ThreadPoolExecutor(len(QUERIES)) as pool:
        assert list(pool.map(lambda q: script(remote.fork(), q), QUERIES)) == expected
    assert outcome(remote.fork().find, "x") == outcome(local_browser.fork().find, "x")  # NoDocumentOpen
    with pytest.raises(NoDocumentOpen):
        remote.fork().find("x")
    with pytest.raises(PageOutOfRange):
        remote.open(local_browser.search("lava")[0].doc_id, page=999)
    with pytest.raises(DocumentNotFound):
        remote.open("no-such-document")
    with pytest.raises(QueryError):
        remote.search("")


def test_concurrent_clients_get_their_own_sessions(corpus_dir):
    """8 clients × 200 requests; each client's open/find must see its own document.

    BM25 keeps this load test fast on two cores; the hybrid retriever is checked concurrently above.
    """
    from corpus import open_corpus

    local = open_corpus(corpus_dir, retriever="bm25")
    expected = {q: script(local.fork(), q) for q in QUERIES}
    calls_per_script = 10
    server = serving(local)

    def client(i: int) -> int:
        b = RemoteBrowser(server.url)
        q = QUERIES[i % len(QUERIES)]
        done = 0
        while done < 200:
            assert script(b, q) == expected[q]
            done += calls_per_script
        return done

    try:
        with ThreadPoolExecutor(8) as pool:
            assert sum(pool.map(client, range(8))) == 1600
        assert requests.get(f"{server.url}/health", timeout=5).json()["sessions"] == 8
    finally:
        stop(server)


@pytest.mark.parametrize(
    "path, body, status, message",
    [
        ("/search", b"{not json", 400, "not valid JSON"),
        ("/search", b"[1, 2]", 400, "JSON object"),
        ("/search", b"{}", 400, "missing field 'query'"),
        ("/search", json.dumps({"query": "lava", "k": "5"}).encode(), 400, "'k' must be int"),
        ("/search", json.dumps({"query": "lava", "k": True}).encode(), 400, "'k' must be int"),
        ("/search", json.dumps({"query": "lava", "k": 0}).encode(), 400, "between 1 and 100"),
        ("/open", json.dumps({"doc": "x"}).encode(), 400, "missing field 'session'"),
        ("/open", json.dumps({"session": "", "doc": "x"}).encode(), 400, "1..128"),
        (
            "/find",
            json.dumps({"session": "s", "pattern": "x", "regex": "yes"}).encode(),
            400,
            "'regex' must be bool",
        ),
        ("/chunk", json.dumps({"chunk_id": 7}).encode(), 400, "'chunk_id' must be str"),
        ("/nowhere", b"{}", 404, "no endpoint"),
    ],
)
def test_malformed_requests_get_4xx_with_a_message(service, path, body, status, message):
    resp = requests.post(service.url + path, data=body, timeout=5)
    assert resp.status_code == status
    assert message in resp.json()["message"]


def test_health_and_unknown_get(service):
    assert requests.get(f"{service.url}/health", timeout=5).json()["status"] == "ok"
    assert requests.get(f"{service.url}/search", timeout=5).status_code == 404


def test_sessions_are_bounded_lru(local_browser):
    server = serving(local_browser, max_sessions=2)
    try:
        doc = local_browser.search("lava")[0].doc_id
        first, second, third = (RemoteBrowser(server.url) for _ in range(3))
        for b in (first, second, third):
            b.open(doc)
        assert third.find("lava") and second.find("lava")
        with pytest.raises(NoDocumentOpen):
            first.find("lava")  # evicted: the oldest session lost its open page
        third.close()
        assert requests.get(f"{server.url}/health", timeout=5).json()["sessions"] == 1
    finally:
        stop(server)


def test_service_over_the_live_backend(live, web):
    """The live backend behind the service: same answers, and its own errors cross the wire typed."""
    browser = live()
    server = serving(browser)
    try:
        remote = RemoteBrowser(server.url)
        hits = remote.search("kestrel falcon")
        assert [h.to_dict() for h in hits] == [h.to_dict() for h in browser.search("kestrel falcon")]
        local = browser.fork()
        assert remote.open(hits[0].doc_id).to_dict() == local.open(hits[0].doc_id).to_dict()
        assert [m.to_dict() for m in remote.find("voles")] == [m.to_dict() for m in local.find("voles")]
        assert remote.find("voles")
        with pytest.raises(FetchFailed, match="application/pdf"):
            remote.open(web.page_url("paper.pdf"))
    finally:
        stop(server)


def test_unreachable_service_is_a_clear_error():
    server = make_server(RemoteBrowser("http://127.0.0.1:9"))  # any object with fork() can be served
    url = server.url
    server.server_close()  # nothing listens there any more
    with pytest.raises(ServiceUnavailable, match="corpus serve"):
        RemoteBrowser(url, timeout_s=2).search("lava")
    with pytest.raises(TypeError, match="fork"):
        make_server(object())
