"""The Browser as a small JSON HTTP service, and ``RemoteBrowser``, the client that makes it a Browser again.

Search-R1 and OpenResearcher run the retriever as its own process so that the trainer, the rollout
workers and the retriever can live in different processes or machines; this is that service.  The
API is a few POST endpoints and a health check, all JSON:

    POST /search {"query": str, "k": int}                  -> {"hits": [Hit, ...]}
    POST /open   {"session": str, "doc": str, "page": int} -> {"page": Page}
    POST /find   {"session": str, "pattern": str, "regex": bool} -> {"matches": [FindMatch, ...]}
    POST /chunk  {"chunk_id": str}                         -> {"text": str}
    POST /close  {"session": str}                          -> {"closed": bool}
    GET  /health                                           -> {"status": "ok", "browser": ..., "sessions": n}

``open``/``find`` have state (the opened document), so each client session gets its own
``browser.fork()``; forks share the index, so a session costs a little memory, and the least recently
used sessions are dropped beyond ``max_sessions`` (a dropped session's next ``find`` reports that no
page is open).  Errors are ``{"error": <exception type>, "message": ...}`` with 404 for unknown
documents/pages and 400 for everything else the caller got wrong; ``RemoteBrowser`` raises the same
``BrowserError`` subclass the in-process browser would have raised.  There is no authentication:
bind to loopback (the default) or a trusted network only.

``BoundedHTTPServer`` (also behind ``research_agent.inference.serve``) keeps a slow, idle or greedy
client from exhausting the server: a bounded worker pool, a listen backlog of 1024 (the stdlib's 5
reset 171 of 200 simultaneous clients), a deadline for receiving each request and a body size limit
(413).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import socket
import sys
import threading
import time
import uuid
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from corpus.browser import (
    BrowserError,
    DocumentNotFound,
    FindMatch,
    Hit,
    Page,
    PageOutOfRange,
)

MAX_BODY_BYTES = 1 << 20
MAX_SESSION_ID = 128
DEFAULT_MAX_SESSIONS = 256
READ_TIMEOUT_S = 5.0  # a connection must deliver each request within this long, or it is dropped
MAX_WORKERS = 256  # connections served at once; the rest wait in the listen backlog
LISTEN_BACKLOG = 1024
LINGER_S = 1.0  # after refusing a body, how long to read what the client still sends


class ServiceUnavailable(BrowserError):
    """The retrieval service could not be reached (not started, wrong URL, crashed)."""


class RemoteError(BrowserError):
    """The service reported an error this client has no exception type for (or an invalid answer)."""


class BadRequest(Exception):
    """A request the service cannot parse: 400 with a message saying which field is wrong."""


# --- bounded HTTP server (shared with research_agent.inference.serve) ------------------------------------
class RequestRefused(Exception):
    """The HTTP request itself is refused (body too large, not received in time): ``status`` says why."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class _DeadlineReader(io.RawIOBase):
    """A socket's input that raises ``TimeoutError`` once ``deadline`` (``time.monotonic``) has passed,
    however slowly the bytes trickle in: a per-read timeout alone lets a client that sends one byte
    every few seconds hold a worker forever."""

    def __init__(self, sock: socket.socket, io_timeout: float):
        self.sock, self.io_timeout, self.deadline = sock, io_timeout, math.inf

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request was not received in time")
        self.sock.settimeout(min(left, self.io_timeout))
        try:
            return self.sock.recv_into(buf)
        finally:
            self.sock.settimeout(self.io_timeout)  # writes keep the plain timeout


class BoundedHTTPServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer a slow, idle or greedy client cannot exhaust.

    At most ``max_workers`` connections are served at once; further ones wait in the kernel's listen
    backlog (``request_queue_size``).  A connection must deliver each request (line, headers, body)
    within ``read_timeout_s`` of the server starting to wait for it, so an idle keep-alive connection,
    or one trickling bytes, frees its worker after that long.  Handlers derive from ``BoundedHandler``.
    """

    daemon_threads = True  # a stuck client connection must not keep the process alive
    request_queue_size = LISTEN_BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BoundedHandler],
        *,
        max_workers: int = MAX_WORKERS,
        read_timeout_s: float = READ_TIMEOUT_S,
    ):
        if max_workers < 1 or not read_timeout_s > 0:
            raise ValueError(
                f"need max_workers >= 1 and read_timeout_s > 0, not {max_workers}, {read_timeout_s}"
            )
        self.read_timeout_s = read_timeout_s
        self._workers = threading.BoundedSemaphore(max_workers)
        self._closing = threading.Event()
        super().__init__(address, handler)

    def process_request(self, request, client_address) -> None:
        while not self._workers.acquire(timeout=0.5):  # all busy: the accept loop waits, clients queue
            if self._closing.is_set():
                self.shutdown_request(request)
                return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._workers.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._workers.release()

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):  # a client gone is routine
            super().handle_error(request, client_address)

    def shutdown(self) -> None:
        self._closing.set()
        super().shutdown()


class BoundedHandler(BaseHTTPRequestHandler):
    """Request handler for ``BoundedHTTPServer``: reads bodies through ``read_body`` (at most
    ``max_body_bytes``) and answers refusals with ``refuse``; subclasses define ``reply_error``."""

    protocol_version = "HTTP/1.1"  # keep-alive: a rollout worker makes thousands of small calls
    disable_nagle_algorithm = True  # headers and body go out as two writes: Nagle + delayed ACK = +40 ms
    max_body_bytes = MAX_BODY_BYTES
    server: BoundedHTTPServer

    def reply_error(self, status: int, message: str) -> None:
        """A refusal as JSON; servers with their own error shape (OpenAI's, the retrieval API's) override it."""
        self.send_json(status, {"error": message})

    def send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up
            self.close_connection = True

    def setup(self) -> None:
        self.timeout = self.server.read_timeout_s  # the socket's timeout for writes (and each read)
        super().setup()
        self.rfile.close()
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self.timeout))

    def handle_one_request(self) -> None:
        self.rfile.raw.deadline = time.monotonic() + self.server.read_timeout_s
        super().handle_one_request()  # a TimeoutError there closes the connection

    def handle_expect_100(self) -> bool:
        try:
            self._declared_length()
        except RequestRefused as e:  # refused before the client sends the body
            self.refuse(e, linger=False)
            return False
        return super().handle_expect_100()

    def _declared_length(self) -> int:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raise RequestRefused(411, "send the body with a Content-Length (chunked bodies are not accepted)")
        length = self.headers.get("Content-Length", "0").strip()
        if not length.isdigit():
            raise RequestRefused(400, f"Content-Length must be a number, not {length[:40]!r}")
        if int(length) > self.max_body_bytes:
            raise RequestRefused(
                413, f"the body has {int(length)} bytes; this server takes at most {self.max_body_bytes}"
            )
        return int(length)

    def read_body(self) -> bytes:
        """The request's body; ``RequestRefused`` (411, 413, 408, 400) when it cannot be taken."""
        length = self._declared_length()
        try:
            data = self.rfile.read(length)
        except TimeoutError:
            raise RequestRefused(
                408, f"the request did not arrive within {self.server.read_timeout_s:g} s"
            ) from None
        if len(data) < length:
            raise RequestRefused(400, f"the body ended after {len(data)} of {length} bytes")
        return data

    def refuse(self, e: RequestRefused, linger: bool = True) -> None:
        """Answer ``e`` and close the connection.  After a 413 the client may still be sending the body:
        read and drop it for a moment (a lingering close), so the client gets the answer, not a reset."""
        self.close_connection = True
        try:
            self.reply_error(e.status, str(e))
            if linger and e.status == 413:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_WR)
                self.rfile.raw.deadline = time.monotonic() + LINGER_S
                while self.rfile.read1(1 << 16):
                    pass
        except OSError:  # the client left, or kept sending past the linger time
            pass


# --- server ------------------------------------------------------------------------------------
class SessionPool:
    """One forked browser (and a lock) per client session, least recently used dropped first."""

    def __init__(self, root: Any, max_sessions: int = DEFAULT_MAX_SESSIONS):
        self.root = root
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, tuple[Any, threading.Lock]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session: str, create: bool = True) -> tuple[Any, threading.Lock]:
        """The session's browser; an unknown session gets a fresh fork, stored only when ``create``.

        ``find`` does not create sessions: a find in a never-opened (or dropped) session must answer
        as a fresh browser would (no page open) without evicting a live session to store nothing.
        """
        with self._lock:
            entry = self._sessions.get(session)
            if entry is None and not create:
                return self.root.fork(), threading.Lock()
            if entry is None:
                entry = self._sessions[session] = (self.root.fork(), threading.Lock())
                while len(self._sessions) > self.max_sessions:
                    self._sessions.popitem(last=False)
            else:
                self._sessions.move_to_end(session)
            return entry

    def close(self, session: str) -> bool:
        with self._lock:
            return self._sessions.pop(session, None) is not None

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)


class RetrievalServer(BoundedHTTPServer):
    def __init__(self, address: tuple[str, int], browser: Any, max_sessions: int, **bounds: Any):
        super().__init__(address, RetrievalHandler, **bounds)
        self.browser = browser
        self.sessions = SessionPool(browser, max_sessions)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


def _field(body: dict[str, Any], name: str, kind: type, default: Any = ...) -> Any:
    value = body.get(name, default)
    if value is ...:
        raise BadRequest(f"missing field {name!r}")
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadRequest(f"field {name!r} must be {kind.__name__}, got {type(value).__name__}")
    return value


def _session_id(body: dict[str, Any]) -> str:
    session = _field(body, "session", str)
    if not 0 < len(session) <= MAX_SESSION_ID:
        raise BadRequest(f"field 'session' must be 1..{MAX_SESSION_ID} characters")
    return session


class RetrievalHandler(BoundedHandler):
    """Routes JSON requests to the shared browser (search, chunk) or the session's fork (open, find)."""

    server: RetrievalServer
    _REFUSALS = {400: "BadRequest", 408: "RequestTimeout", 411: "LengthRequired", 413: "PayloadTooLarge"}

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # one line per request would drown the trainer's output

    def do_GET(self) -> None:
        if self.path != "/health":
            return self.send_json(404, {"error": "NotFound", "message": f"no endpoint GET {self.path}"})
        self.send_json(
            200,
            {
                "status": "ok",
                "browser": type(self.server.browser).__name__,
                "sessions": len(self.server.sessions),
            },
        )

    def do_POST(self) -> None:
        route = {
            "/search": self._search,
            "/open": self._open,
            "/find": self._find,
            "/chunk": self._chunk,
            "/close": self._close,
        }.get(self.path)
        try:
            body = self._body()
            if route is None:
                return self.send_json(404, {"error": "NotFound", "message": f"no endpoint POST {self.path}"})
            self.send_json(200, route(body))
        except RequestRefused as e:
            self.refuse(e)
        except BadRequest as e:
            self.send_json(400, {"error": "BadRequest", "message": str(e)})
        except (DocumentNotFound, PageOutOfRange) as e:
            self.send_json(404, {"error": type(e).__name__, "message": str(e)})
        except BrowserError as e:
            self.send_json(400, {"error": type(e).__name__, "message": str(e)})
        except Exception as e:  # a bug in a backend: say so, keep serving the others
            self.send_json(500, {"error": "InternalError", "message": f"{type(e).__name__}: {e}"})

    def _body(self) -> dict[str, Any]:
        raw = self.read_body()
        try:
            body = json.loads(raw or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise BadRequest(f"body is not valid JSON: {e}") from e
        if not isinstance(body, dict):
            raise BadRequest("body must be a JSON object")
        return body

    def _search(self, body: dict[str, Any]) -> dict[str, Any]:
        query, k = _field(body, "query", str), _field(body, "k", int, 5)
        if not 1 <= k <= 100:
            raise BadRequest("field 'k' must be between 1 and 100")
        return {"hits": [h.to_dict() for h in self.server.browser.search(query, k=k)]}

    def _open(self, body: dict[str, Any]) -> dict[str, Any]:
        browser, lock = self.server.sessions.get(_session_id(body))
        doc, page = _field(body, "doc", str), _field(body, "page", int, 1)
        with lock:
            return {"page": browser.open(doc, page=page).to_dict()}

    def _find(self, body: dict[str, Any]) -> dict[str, Any]:
        browser, lock = self.server.sessions.get(_session_id(body), create=False)
        pattern, regex = _field(body, "pattern", str), _field(body, "regex", bool, False)
        with lock:
            return {"matches": [m.to_dict() for m in browser.find(pattern, regex=regex)]}

    def _chunk(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"text": self.server.browser.chunk_text(_field(body, "chunk_id", str))}

    def _close(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"closed": self.server.sessions.close(_session_id(body))}

    def reply_error(self, status: int, message: str) -> None:
        self.send_json(status, {"error": self._REFUSALS.get(status, "BadRequest"), "message": message})


def make_server(
    browser: Any,
    host: str = "127.0.0.1",
    port: int = 0,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    *,
    max_workers: int = MAX_WORKERS,
    read_timeout_s: float = READ_TIMEOUT_S,
) -> RetrievalServer:
    """A ready (not yet serving) server; call ``serve_forever()`` in a thread or the main loop.

    ``max_workers`` connections are served at once (the rest wait in the backlog); a connection that
    does not deliver a whole request within ``read_timeout_s`` is dropped."""
    if not callable(getattr(browser, "fork", None)):
        raise TypeError(f"{type(browser).__name__} has no fork(): the service needs one browser per session")
    return RetrievalServer(
        (host, port), browser, max_sessions, max_workers=max_workers, read_timeout_s=read_timeout_s
    )


def serve(
    dir: str | Path, host: str = "127.0.0.1", port: int = 8765, retriever: str = "hybrid", **bounds: Any
) -> None:
    """Open the corpus in ``dir`` and serve it until interrupted (``bounds``: see ``make_server``)."""
    from corpus import open_corpus

    server = make_server(open_corpus(dir, retriever=retriever), host, port, **bounds)
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: serving on {host} without authentication", file=sys.stderr)
    print(f"serving {dir} ({retriever}) at {server.url}  (Ctrl-C stops)", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m corpus serve", description=__doc__.split("\n")[0])
    parser.add_argument("dir", help="a corpus directory built by `python -m corpus build`")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8765, help="port (0: any free port, printed at start)")
    parser.add_argument(
        "--retriever", default="hybrid", help="retriever of the corpus (e.g. bm25, dense, hybrid)"
    )
    parser.add_argument(
        "--max-workers",
        type=int,
        default=MAX_WORKERS,
        help="connections served at once; more wait in the listen backlog (each keep-alive client holds one)",
    )
    parser.add_argument(
        "--read-timeout-s",
        type=float,
        default=READ_TIMEOUT_S,
        help="a connection must deliver each request within this long (idle keep-alive ones are dropped)",
    )
    args = parser.parse_args(argv)
    if args.max_workers < 1 or not args.read_timeout_s > 0:
        parser.error("--max-workers must be >= 1 and --read-timeout-s > 0")
    serve(
        args.dir,
        args.host,
        args.port,
        args.retriever,
        max_workers=args.max_workers,
        read_timeout_s=args.read_timeout_s,
    )
    return 0


# --- client ------------------------------------------------------------------------------------
def _error_types() -> dict[str, type[BrowserError]]:
    """Every BrowserError subclass by name, so a remote error becomes the same exception locally."""
    import corpus.live  # noqa: F401 - registers the live backend's errors

    found: dict[str, type[BrowserError]] = {}
    todo: list[type[BrowserError]] = [BrowserError]
    while todo:
        cls = todo.pop()
        found.setdefault(cls.__name__, cls)
        todo.extend(cls.__subclasses__())
    return found


class RemoteBrowser:
    """A Browser whose search/open/find run in a retrieval service at ``url``.

    Each instance is one session on the server (its own opened document); ``fork()`` opens another.
    """

    def __init__(self, url: str, timeout_s: float = 30, session_id: str | None = None):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.session_id = session_id or uuid.uuid4().hex
        self._local = threading.local()  # one keep-alive connection per thread

    def fork(self) -> RemoteBrowser:
        return RemoteBrowser(self.url, self.timeout_s)

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health", None)

    def search(self, query: str, k: int = 5) -> list[Hit]:
        return [Hit(**h) for h in self._call("POST", "/search", {"query": query, "k": k})["hits"]]

    def open(self, doc_or_url: str, page: int = 1) -> Page:
        body = {"session": self.session_id, "doc": doc_or_url, "page": page}
        return Page(**self._call("POST", "/open", body)["page"])

    def find(self, pattern: str, regex: bool = False) -> list[FindMatch]:
        body = {"session": self.session_id, "pattern": pattern, "regex": regex}
        return [FindMatch(**m) for m in self._call("POST", "/find", body)["matches"]]

    def chunk_text(self, chunk_id: str) -> str:
        return self._call("POST", "/chunk", {"chunk_id": chunk_id})["text"]

    def close(self) -> None:
        """Free this session's state on the server (optional: the server drops idle sessions anyway)."""
        self._call("POST", "/close", {"session": self.session_id})

    def _call(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        import requests

        http = getattr(self._local, "http", None)
        if http is None:
            http = self._local.http = requests.Session()
            http.trust_env = False  # a proxy from the environment must not intercept a loopback service
        try:
            try:
                resp = http.request(method, self.url + path, json=body, timeout=self.timeout_s)
            except requests.ConnectionError as e:
                if isinstance(e, requests.Timeout):
                    raise
                # the server drops idle keep-alive connections; one that closed just as this call
                # went out is retried once on a new connection (every endpoint is idempotent)
                resp = http.request(method, self.url + path, json=body, timeout=self.timeout_s)
        except requests.RequestException as e:
            raise ServiceUnavailable(
                f"retrieval service at {self.url} is not reachable ({type(e).__name__}: {e}); "
                "start it with `python -m corpus serve DIR --port N`"
            ) from e
        try:
            payload = resp.json()
        except ValueError as e:
            raise RemoteError(f"{self.url}{path} answered HTTP {resp.status_code} that is not JSON") from e
        if resp.status_code == 200 and isinstance(payload, dict):
            return payload
        error = payload.get("error", "") if isinstance(payload, dict) else ""
        message = payload.get("message", str(payload)) if isinstance(payload, dict) else str(payload)
        cls = _error_types().get(error, RemoteError)
        raise cls(message if cls is not RemoteError else f"{error or resp.status_code}: {message}")


if __name__ == "__main__":
    sys.exit(main())
