"""The retrieval service answers exactly as the in-process Browser does, under concurrent load, on loopback."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
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


@pytest.fixture(scope="module")
def bm25_browser(corpus_dir):
    """BM25 keeps the load tests fast on two cores; the hybrid retriever is checked concurrently above."""
    from corpus import open_corpus

    return open_corpus(corpus_dir, retriever="bm25")


def test_concurrent_clients_get_their_own_sessions(bm25_browser):
    """8 clients × 200 requests; each client's open/find must see its own document."""
    local = bm25_browser
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


# --- bounds: backlog, worker pool, read deadline, body size ------------------------------------
def _post_raw(url: str, path: str, body: bytes, timeout: float = 20) -> tuple[int, dict]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def test_200_simultaneous_clients_are_all_answered(bm25_browser):
    """The stdlib's listen backlog of 5 reset 171 of 200 clients connecting at once; none now."""
    server = serving(bm25_browser)
    n, errors, statuses = 200, [], []
    start = threading.Barrier(n, timeout=20)
    body = json.dumps({"query": "lava basalt", "k": 3}).encode()

    def client() -> None:
        start.wait()
        try:
            statuses.append(_post_raw(server.url, "/search", body)[0])
        except Exception as e:  # noqa: BLE001 - counted, not raised in a thread
            errors.append(f"{type(e).__name__}: {e}")

    try:
        threads = [threading.Thread(target=client) for _ in range(n)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert errors == [] and statuses == [200] * n
        assert time.monotonic() - t0 < 20
    finally:
        stop(server)


def _connect(server) -> socket.socket:
    return socket.create_connection(server.server_address[:2], timeout=5)


def _closed_after(sock: socket.socket) -> tuple[float, bytes]:
    """Seconds until the server closes ``sock`` and what it sent before."""
    t0, got = time.monotonic(), b""
    while chunk := sock.recv(4096):
        got += chunk
    return time.monotonic() - t0, got


def test_idle_and_trickling_connections_are_dropped_without_blocking_others(bm25_browser):
    server = serving(bm25_browser, read_timeout_s=0.5, max_workers=4)
    try:
        idle = _connect(server)
        slow = _connect(server)
        slow.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n\r\n")

        def trickle() -> None:  # a byte every 0.1 s: every read succeeds, the request never completes
            for _ in range(30):
                time.sleep(0.1)
                try:
                    slow.send(b" ")
                except OSError:
                    return

        threading.Thread(target=trickle, daemon=True).start()
        t0 = time.monotonic()
        assert requests.get(f"{server.url}/health", timeout=5).status_code == 200
        assert time.monotonic() - t0 < 0.3  # answered at once while the two hold on

        waited, got = _closed_after(idle)
        assert 0.2 < waited < 2 and got == b""  # dropped after the read timeout
        waited, got = _closed_after(slow)
        assert waited < 2 and b" 408 " in got.split(b"\r\n")[0] and b"RequestTimeout" in got

        # every worker held by an idle connection: the next client waits only until they are dropped
        held = [_connect(server) for _ in range(4)]
        time.sleep(0.1)
        t0 = time.monotonic()
        assert requests.get(f"{server.url}/health", timeout=5).status_code == 200
        assert time.monotonic() - t0 < 2
        for s in (idle, slow, *held):
            s.close()
    finally:
        stop(server)


def test_oversized_bodies_get_413_and_others_are_still_served(bm25_browser):
    server = serving(bm25_browser)
    try:
        big = json.dumps({"query": "lava " * 300_000}).encode()  # 1.5 MB > MAX_BODY_BYTES
        resp = requests.post(f"{server.url}/search", data=big, timeout=10)
        assert resp.status_code == 413 and resp.json()["error"] == "PayloadTooLarge"
        assert "at most 1048576" in resp.json()["message"]

        # a client that announces a huge body and waits for "100 Continue" hears 413 before sending it
        sock = _connect(server)
        sock.sendall(
            b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\nExpect: 100-continue\r\n\r\n"
        )
        t0 = time.monotonic()
        _, got = _closed_after(sock)
        assert b" 413 " in got.split(b"\r\n")[0] and time.monotonic() - t0 < 2
        sock.close()

        # one that just streams a huge body gets 413 too, while another client is answered at once
        sock = _connect(server)
        sock.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n")
        sock.sendall(b"x" * 100_000)
        t0 = time.monotonic()
        assert RemoteBrowser(server.url).search("lava basalt")
        assert time.monotonic() - t0 < 2
        _, got = _closed_after(sock)
        assert b" 413 " in got.split(b"\r\n")[0]
        sock.close()
    finally:
        stop(server)


def test_remote_browser_reconnects_after_the_server_drops_its_idle_connection(bm25_browser):
    server = serving(bm25_browser, read_timeout_s=0.3)
    try:
        remote = RemoteBrowser(server.url)
        first = remote.search("lava basalt")
        time.sleep(0.6)  # the kept-alive connection is closed by the server meanwhile
        assert remote.search("lava basalt") == first
    finally:
        stop(server)
