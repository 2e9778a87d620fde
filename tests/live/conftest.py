"""A loopback web for the live backend's tests: Tavily's search API plus real HTML pages, with faults.

The real tavily-python client and real HTTP fetches are pointed at this server (127.0.0.1 only); it is
the one test double.  Faults are chosen by the request itself so tests stay independent:
a query containing ``fault:KIND:N`` fails N times with KIND (``429``, ``500``, ``timeout``,
``garbage``, ``badshape``) before answering; pages under ``/pages/`` include slow, rate-limited,
failing, huge and non-HTML ones.  Every request is logged so tests can count what reached the network.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

API_KEY = "tvly-test-key"
SLOW_S = 1.5  # longer than the tests' client timeout

BOILER_TOP = """<header><nav><a href="/">Home</a> | <a href="/news">News</a> | <a href="/login">Log in</a>
| <a href="/subscribe">Subscribe now</a></nav><div class="cookie-banner">We use cookies to improve your experience.
Accept all cookies?</div></header><aside class="sidebar"><h3>Trending</h3><ul><li><a href="/x">Ten celebrity
diets</a></li><li><a href="/y">You won't believe this gadget</a></li></ul></aside>"""
BOILER_BOTTOM = """<footer><p>Copyright 2024 Example Media Group. All rights reserved.</p><p><a href="/privacy">
Privacy policy</a> | <a href="/terms">Terms of use</a> | <a href="/ads">Advertise with us</a></p></footer>"""

ARTICLES = {
    "kestrel": (
        "The Common Kestrel",
        [
            "The common kestrel is a bird of prey species belonging to the falcon family Falconidae.",
            "It is widespread in Europe, Asia and Africa, and has occasionally reached the east coast of North America.",
            "Kestrels hover over open country while hunting, scanning the ground for small mammals such as voles.",
            "The female lays three to seven eggs in a scrape, a tree hole, a cliff ledge or an old crow nest.",
            "Its plumage is chestnut brown with blackish spots on the upperparts in both sexes.",
        ],
    ),
    "basalt": (
        "Basalt",
        [
            "Basalt is an aphanitic extrusive igneous rock formed from the rapid cooling of low-viscosity lava.",
            "More than ninety percent of all volcanic rock on Earth is basalt, and it underlies most of the ocean floor.",
            "Columnar jointing, as at the Giant's Causeway in Northern Ireland, forms as thick basalt flows cool and contract.",
            "Basalt weathers relatively quickly compared with granite and produces fertile soils.",
        ],
    ),
    "telescope": (
        "History of the Telescope",
        [
            f"Paragraph {i}: in the year {1600 + i} opticians refined the refracting telescope further, grinding "
            f"lenses of focal length {10 + i} centimetres and recording observations of {['Jupiter', 'Saturn', 'the Moon', 'Venus'][i % 4]} "
            "in notebooks that historians still study today, because every improvement of the lens changed what "
            "astronomers could see and therefore what they could argue about in their letters to one another."
            for i in range(80)
        ],
    ),
}


def article_html(title: str, paragraphs: list[str]) -> str:
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title} | Example Media</title></head><body>"
        f"{BOILER_TOP}<main><article><h1>{title}</h1>{body}</article></main>{BOILER_BOTTOM}</body></html>"
    )


class FakeWeb:
    """The loopback server and its request log."""

    api_key = API_KEY

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []  # (method, path or "search:<query>")
        self.seen: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def page_url(self, name: str) -> str:
        return f"{self.url}/pages/{name}"

    def count(self, prefix: str = "") -> int:
        with self.lock:
            return sum(1 for _, what in self.log if what.startswith(prefix))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _note(self, method: str, what: str) -> int:
        """Log a request; return how many times this exact request was seen before."""
        with self.lock:
            self.log.append((method, what))
            n = self.seen[what]
            self.seen[what] += 1
            return n

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        web = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def send(self, status: int, body: bytes, ctype: str, headers: dict[str, str] | None = None):
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(body)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test): expected

            def do_POST(self):
                if self.path != "/search":
                    return self.send(404, b'{"detail": {"error": "no such endpoint"}}', "application/json")
                data = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                query = data.get("query", "")
                n = web._note("POST", f"search:{query}")
                if self.headers.get("Authorization") != f"Bearer {API_KEY}":
                    return self.send(
                        401,
                        b'{"detail": {"error": "Unauthorized: missing or invalid API key."}}',
                        "application/json",
                    )
                fault = re.search(r"fault:(\w+):(\d+)", query)
                if fault and n < int(fault.group(2)):
                    return self.fault(fault.group(1))
                self.send(
                    200,
                    json.dumps(search_response(web, query, data.get("max_results") or 5)).encode(),
                    "application/json",
                )

            def fault(self, kind: str):
                if kind == "429":
                    self.send(
                        429, b'{"detail": {"error": "rate limit"}}', "application/json", {"Retry-After": "0"}
                    )
                elif kind == "500":
                    self.send(500, b"Internal Server Error", "text/plain")
                elif kind == "timeout":
                    time.sleep(SLOW_S)
                    self.send(200, b'{"results": []}', "application/json")
                elif kind == "garbage":
                    self.send(200, b"<html>502 Bad Gateway</html>{not json", "application/json")
                elif kind == "badshape":
                    self.send(200, b'{"results": "nope"}', "application/json")

            def do_GET(self):
                if not self.path.startswith("/pages/"):
                    return self.send(404, b"not found", "text/plain")
                name = self.path[len("/pages/") :]
                n = web._note("GET", self.path)
                if name in ARTICLES:
                    return self.send(200, article_html(*ARTICLES[name]).encode(), "text/html; charset=utf-8")
                if name == "slow-once":
                    if n == 0:
                        time.sleep(SLOW_S)
                    return self.send(200, article_html(*ARTICLES["kestrel"]).encode(), "text/html")
                if name == "ratelimited-once":
                    if n == 0:
                        return self.send(429, b"slow down", "text/plain", {"Retry-After": "0"})
                    return self.send(200, article_html(*ARTICLES["basalt"]).encode(), "text/html")
                if name == "error500":
                    return self.send(500, b"boom", "text/plain")
                if name == "notes.txt":
                    return self.send(200, b"Plain notes.\nKestrels hover.\n", "text/plain; charset=utf-8")
                if name == "paper.pdf":
                    return self.send(200, b"%PDF-1.4 fake", "application/pdf")
                if name == "js-app-shell":  # a client-rendered page: no text without JavaScript
                    return self.send(
                        200,
                        b"<html><head><title>App</title><script>render()</script></head>"
                        b"<body><div id='root'></div></body></html>",
                        "text/html",
                    )
                if name in ("huge-declared", "huge-streamed"):
                    return self.huge(declared=name == "huge-declared")
                self.send(404, b"no such page", "text/plain")

            def huge(self, declared: bool):
                """50 MB of HTML; the client must stop reading at its limit."""
                block = b"<p>" + b"filler text " * 5000 + b"</p>"
                total = 50_000_000
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    if declared:
                        self.send_header("Content-Length", str(total))
                    self.end_headers()
                    sent = 0
                    while sent < total:
                        self.wfile.write(block)
                        sent += len(block)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True

        return Handler


def search_response(web: FakeWeb, query: str, k: int) -> dict:
    """Tavily's response shape; results are the articles sharing the most (long) words with the query."""
    words = {w for w in re.findall(r"\w+", query.lower()) if len(w) > 3 and not w.startswith("fault")}
    scored = []
    for name, (title, paras) in ARTICLES.items():
        text = " ".join([title, *paras]).lower()
        score = sum(1 for w in words if w in text)
        if score:
            scored.append((score, name, title, paras[0]))
    scored.sort(key=lambda t: (-t[0], t[1]))
    top = max((s for s, *_ in scored), default=1)
    results = [
        {
            "url": web.page_url(name),
            "title": title,
            "content": snippet,
            "score": round(s / top, 4),
            "raw_content": None,
        }
        for s, name, title, snippet in scored[:k]
    ]
    return {
        "query": query,
        "follow_up_questions": None,
        "answer": None,
        "images": [],
        "results": results,
        "response_time": 0.01,
        "usage": {"credits": 1},
        "request_id": "test",
    }


@pytest.fixture
def web():
    server = FakeWeb()
    yield server
    server.close()


@pytest.fixture
def live(web, tmp_path):
    """A LiveBrowser on the loopback web with short timeouts and near-zero backoff."""
    from corpus.live import LiveBrowser

    def make(**kw):
        kw.setdefault("base_url", web.url)
        kw.setdefault("timeout_s", 0.5)
        kw.setdefault("backoff_s", 0.01)
        kw.setdefault("retries", 2)
        return LiveBrowser(kw.pop("api_key", API_KEY), **kw)

    return make
