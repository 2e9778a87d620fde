"""The live web behind the Browser interface: Tavily search, page fetch + trafilatura extraction.

The agent cannot tell this backend from the local corpus: ``search`` returns ``Hit``s, ``open`` shows a
page as numbered, paged lines, ``find`` greps the opened page.  What is particular to the web is
handled here, once: every network call is retried with exponential backoff on timeouts, 429 and 5xx;
a per-run budget (calls, and Tavily credits) is a hard limit checked *before* each request, so a
runaway agent cannot spend more than it was given; pages are size- and type-checked before they are
parsed; responses go to a disk cache, and can be recorded (``record_dir``) and replayed
(``replay_dir``) so a live run becomes a reproducible offline data set.  A replay never touches
the network: a request that was not recorded raises ``ReplayMiss``.

Ids: a hit's ``doc_id`` is its URL (without fragment).  Chunk ``URL#0`` is the search snippet the agent
saw in the hit; chunk ``URL#N`` (N ≥ 1) is page N of the opened document, so a citation always
points at text the agent actually read and ``chunk_text`` can return it.
"""

from __future__ import annotations

import os
import random
import re
import textwrap
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urlsplit

from corpus.browser import (
    BrowserError,
    DocumentNotFound,
    FindMatch,
    Hit,
    NoDocumentOpen,
    Page,
    PageOutOfRange,
    QueryError,
)
from corpus.replay import ResponseStore

LINE_WIDTH = 200  # wrap long extracted lines like the local corpus does
LINES_PER_PAGE = 30
MAX_QUERY_CHARS = 400  # Tavily rejects longer queries; failing early saves a paid call
MAX_RESULTS = 20  # Tavily's max_results upper bound
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"text/plain"})
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
MAX_BACKOFF_S = 30.0
USER_AGENT = "research-agent/0.1 (live Browser backend)"
MISSING_KEY = (
    "the live backend needs a Tavily API key: set TAVILY_API_KEY in the environment "
    "(get one at https://app.tavily.com), or replay a recorded run offline with --replay DIR, "
    "or use --backend local"
)


class LiveConfigError(BrowserError):
    """The live backend is not usable as configured (no TAVILY_API_KEY, key rejected, bad options)."""


class BudgetExceeded(BrowserError):
    """The run has used all the network calls (or Tavily credits) it was allowed."""


class FetchFailed(BrowserError):
    """A page could not be fetched or read: HTTP error, timeout after retries, too large, not HTML."""


class SearchFailed(FetchFailed):
    """The search API failed after retries or answered something that is not a search result."""


class ReplayMiss(BrowserError):
    """Replaying a recorded run met a request that was never recorded (no network call is made)."""


class _Retryable(Exception):
    """A transient failure worth another attempt (timeout, connection reset, 429, 5xx, garbage JSON)."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


# errors worth recording, so that a replay shows the agent the same failure as the live run did
_RECORDED_ERRORS: dict[str, type[BrowserError]] = {
    c.__name__: c for c in (FetchFailed, SearchFailed, QueryError, DocumentNotFound)
}


@dataclass
class Budget:
    """Hard limits for one run, shared by all forks of a browser (and their threads)."""

    max_calls: int
    max_credits: float | None = None
    calls: int = 0
    credits: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def charge_call(self, what: str) -> None:
        """Reserve one network request, or raise before it is sent."""
        with self._lock:
            if self.calls >= self.max_calls:
                raise BudgetExceeded(
                    f"the run's budget of {self.max_calls} live calls is spent (needed one more for {what}); "
                    "answer with what you have, or raise max_calls"
                )
            if self.max_credits is not None and self.credits >= self.max_credits:
                raise BudgetExceeded(
                    f"the run's budget of {self.max_credits:g} Tavily credits is spent ({what} refused)"
                )
            self.calls += 1

    def add_credits(self, credits: float) -> None:
        with self._lock:
            self.credits += credits


@dataclass
class LiveDocument:
    url: str
    title: str
    lines: list[str]

    @property
    def total_pages(self) -> int:
        return max(1, -(-len(self.lines) // LINES_PER_PAGE))

    def page_lines(self, page: int) -> list[str]:
        return self.lines[(page - 1) * LINES_PER_PAGE : page * LINES_PER_PAGE]


def layout_lines(text: str, width: int = LINE_WIDTH) -> list[str]:
    """Extracted text → display lines: blank lines dropped, long lines wrapped at word boundaries."""
    lines: list[str] = []
    for raw in text.splitlines():
        raw = " ".join(raw.split())
        if raw:
            lines.extend(textwrap.wrap(raw, width=width, break_long_words=True, break_on_hyphens=False))
    return lines


def split_chunk_id(doc_or_url: str) -> tuple[str, int | None]:
    """``URL#N`` → (URL, N); anything else → (URL without fragment, None)."""
    base, sep, frag = doc_or_url.strip().rpartition("#")
    if sep and frag.isdigit():
        return urldefrag(base).url, int(frag)
    return urldefrag(doc_or_url.strip()).url, None


def check_web_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise DocumentNotFound(
            f"{url!r} is not an http(s) URL; the live backend opens web pages (use a hit's url or doc_id)"
        )
    return url


def extract_main_text(body: bytes, content_type: str, url: str) -> tuple[str, str]:
    """(title, main text) of a fetched page; trafilatura strips navigation, footers and ads from HTML."""
    if content_type in TEXT_TYPES:
        return url.rsplit("/", 1)[-1] or url, body.decode("utf-8", errors="replace")
    import trafilatura  # slow to import; only live runs need it

    doc = trafilatura.bare_extraction(
        body, url=url, with_metadata=True, include_comments=False, include_tables=True
    )
    text = (getattr(doc, "text", None) or "").strip()
    if not text:
        raise FetchFailed(f"{url}: no main text could be extracted from the page (empty or all boilerplate)")
    return (getattr(doc, "title", None) or url), text


class _Shared:
    """What all forks of one LiveBrowser share: config, clients, stores, budget, memoized documents."""

    MAX_DOCS = 32

    def __init__(
        self,
        api_key: str | None,
        base_url: str | None,
        cache: ResponseStore | None,
        recorder: ResponseStore | None,
        replayer: ResponseStore | None,
        budget: Budget,
        timeout_s: float,
        max_page_bytes: int,
        retries: int,
        backoff_s: float,
        search_depth: str,
    ):
        self.api_key, self.base_url = api_key, base_url
        self.cache, self.recorder, self.replayer = cache, recorder, replayer
        self.budget = budget
        self.timeout_s, self.max_page_bytes = timeout_s, max_page_bytes
        self.retries, self.backoff_s, self.search_depth = retries, backoff_s, search_depth
        self.docs: OrderedDict[str, LiveDocument] = OrderedDict()
        self.snippets: dict[str, str] = {}
        self.lock = threading.Lock()
        self.local = threading.local()  # requests sessions are not safe to share across threads
        self.stats = {"searches": 0, "fetches": 0, "cache_hits": 0, "replayed": 0, "retries": 0}

    # --- responses: replay, cache, live; recording what was served -------------------------------
    def respond(self, kind: str, request: dict[str, Any], live: Callable[[dict[str, Any]], dict[str, Any]]):
        if self.replayer is not None:
            record = self.replayer.get(kind, request)
            if record is None:
                raise ReplayMiss(
                    f"replay: no recorded {kind} for {request} in {self.replayer.root} "
                    "(the replayed run must make the same calls as the recorded one; no network call was made)"
                )
            self._count("replayed")
            return _unwrap(record)
        record = self.cache.get(kind, request) if self.cache is not None else None
        if record is not None and "response" in record:
            self._count("cache_hits")
            response = record["response"]
        else:
            try:
                response = live(request)
            except tuple(_RECORDED_ERRORS.values()) as e:
                if self.recorder is not None:
                    self.recorder.put_error(kind, request, type(e).__name__, str(e))
                raise
            if self.cache is not None:
                self.cache.put_response(kind, request, response)
        if self.recorder is not None:
            self.recorder.put_response(kind, request, response)
        return response

    def _count(self, key: str) -> None:
        with self.lock:
            self.stats[key] += 1

    def retrying(self, what: str, attempt: Callable[[], dict[str, Any]], failure: type[FetchFailed]):
        """Run ``attempt`` until it succeeds, retrying transient failures with exponential backoff.

        Every attempt is charged to the budget: the limit is on requests sent, which is what a
        rate-limited API and the user's bill see.
        """
        last: _Retryable | None = None
        for i in range(self.retries + 1):
            self.budget.charge_call(what)
            try:
                return attempt()
            except _Retryable as e:
                last = e
            if i < self.retries:
                self._count("retries")
                delay = self.backoff_s * 2**i if last.retry_after is None else last.retry_after
                time.sleep(min(MAX_BACKOFF_S, delay) * random.uniform(1.0, 1.2))
        raise failure(f"{what} failed after {self.retries + 1} attempts: {last}")

    # --- the two kinds of live calls ------------------------------------------------------------
    def live_search(self, request: dict[str, Any]) -> dict[str, Any]:
        self._count("searches")
        response = self.retrying(
            f"search {request['query']!r}", lambda: self._search_once(request), SearchFailed
        )
        self.budget.add_credits(response["credits"])
        return response

    def _search_once(self, request: dict[str, Any]) -> dict[str, Any]:
        import requests
        from tavily import TavilyClient
        from tavily import errors as tv

        client = getattr(self.local, "tavily", None)
        if client is None:
            client = self.local.tavily = TavilyClient(api_key=self.api_key, api_base_url=self.base_url)
        try:
            data = client.search(
                request["query"],
                max_results=request["k"],
                search_depth=request["depth"],
                timeout=self.timeout_s,
                include_usage=True,
            )
        except tv.TimeoutError as e:
            raise _Retryable(f"timed out after {self.timeout_s:g} s") from e
        except tv.UsageLimitExceededError as e:
            raise _Retryable(f"rate limited (HTTP 429) {e}".strip()) from e
        except tv.InvalidAPIKeyError as e:
            raise LiveConfigError(
                f"Tavily rejected TAVILY_API_KEY (HTTP 401): check the key. {e}".strip()
            ) from e
        except tv.ForbiddenError as e:
            raise LiveConfigError(
                f"Tavily refused the request (HTTP 403/432/433: no access or plan limit reached): {e}"
            ) from e
        except tv.BadRequestError as e:
            raise QueryError(f"Tavily rejected the query {request['query']!r}: {e}") from e
        except requests.HTTPError as e:
            status = e.response.status_code if e.response is not None else 0
            if status in RETRY_STATUS:
                raise _Retryable(f"HTTP {status}", _retry_after(e.response)) from e
            raise SearchFailed(f"search API answered HTTP {status}") from e
        except (requests.ConnectionError, requests.Timeout) as e:
            raise _Retryable(f"connection failed: {e}") from e
        except ValueError as e:  # requests' JSONDecodeError: a gateway's HTML error page, a cut body
            raise _Retryable(f"search API answered invalid JSON ({e})") from e
        return _clean_search_response(data, request["depth"])

    def live_fetch(self, request: dict[str, Any]) -> dict[str, Any]:
        self._count("fetches")
        return self.retrying(f"fetch {request['url']}", lambda: self._fetch_once(request["url"]), FetchFailed)

    def _fetch_once(self, url: str) -> dict[str, Any]:
        import requests

        session = getattr(self.local, "http", None)
        if session is None:
            session = self.local.http = requests.Session()
            session.headers.update(
                {"User-Agent": USER_AGENT, "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9"}
            )
        deadline = time.monotonic() + self.timeout_s * 2  # a slow drip must not stall the run forever
        try:
            with session.get(url, timeout=self.timeout_s, stream=True) as resp:
                if resp.status_code in RETRY_STATUS:
                    raise _Retryable(f"HTTP {resp.status_code}", _retry_after(resp))
                if resp.status_code >= 400:
                    raise FetchFailed(f"{url}: HTTP {resp.status_code}")
                ctype = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
                if ctype and ctype not in HTML_TYPES | TEXT_TYPES:
                    raise FetchFailed(
                        f"{url} is {ctype}, not a web page; the live backend reads HTML and text only"
                    )
                declared = resp.headers.get("Content-Length", "")
                if declared.isdigit() and int(declared) > self.max_page_bytes:
                    raise FetchFailed(
                        f"{url} is {int(declared):,} bytes, over the {self.max_page_bytes:,}-byte limit"
                    )
                body = self._read_body(resp, url, deadline)
                final_url = resp.url
        except (requests.Timeout, requests.ConnectionError) as e:
            raise _Retryable(f"timed out or connection failed: {e}") from e
        except requests.RequestException as e:  # invalid URL, too many redirects, ...
            raise FetchFailed(f"{url}: {e}") from e
        ctype = ctype or ("text/html" if body.lstrip()[:1] == b"<" else "text/plain")
        title, text = extract_main_text(body, ctype, final_url)
        return {
            "url": url,
            "final_url": final_url,
            "content_type": ctype,
            "bytes": len(body),
            "title": title,
            "text": text,
        }

    def _read_body(self, resp: Any, url: str, deadline: float) -> bytes:
        parts, size = [], 0
        for block in resp.iter_content(chunk_size=1 << 16):
            parts.append(block)
            size += len(block)
            if size > self.max_page_bytes:
                raise FetchFailed(f"{url} is over the {self.max_page_bytes:,}-byte page limit")
            if time.monotonic() > deadline:
                raise _Retryable(f"reading {url} took over {self.timeout_s * 2:g} s")
        return b"".join(parts)

    # --- documents ------------------------------------------------------------------------------
    def document(self, url: str) -> LiveDocument:
        with self.lock:
            if url in self.docs:
                self.docs.move_to_end(url)
                return self.docs[url]
        response = self.respond("fetch", {"url": url}, self.live_fetch)
        doc = LiveDocument(url=url, title=response["title"], lines=layout_lines(response["text"]))
        if not doc.lines:
            raise FetchFailed(f"{url}: the page has no text")
        with self.lock:
            self.docs[url] = doc
            while len(self.docs) > self.MAX_DOCS:
                self.docs.popitem(last=False)
        return doc


def _retry_after(resp: Any) -> float | None:
    value = (resp.headers.get("Retry-After", "") if resp is not None else "").strip()
    return float(value) if value.replace(".", "", 1).isdigit() else None


def _clean_search_response(data: Any, depth: str) -> dict[str, Any]:
    """Keep what the Browser needs (and a replay must reproduce); reject what is not a result list."""
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        raise SearchFailed(f"search API answered something that is not a result list: {str(data)[:200]}")
    clean = []
    for r in results:
        if not isinstance(r, dict) or not isinstance(r.get("url"), str):
            raise SearchFailed(f"search API returned a result without a url: {str(r)[:200]}")
        clean.append(
            {
                "url": r["url"],
                "title": str(r.get("title") or r["url"]),
                "content": str(r.get("content") or ""),
                "score": float(r.get("score") or 0.0),
            }
        )
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    credits = float(usage.get("credits", 2 if depth == "advanced" else 1))
    return {"results": clean, "credits": credits}


def _unwrap(record: dict[str, Any]) -> dict[str, Any]:
    if "error" in record:
        err = record["error"]
        raise _RECORDED_ERRORS.get(err.get("type"), FetchFailed)(err.get("message", "recorded failure"))
    return record["response"]


class LiveBrowser:
    """The Browser over the live web (see the module docstring).

    ``fork()`` gives a browser with its own opened page that shares the cache, the budget, the
    recorder and the fetched documents, so parallel rollouts or service sessions cost one budget.
    """

    def __init__(
        self,
        api_key: str | None,
        *,
        base_url: str | None = None,
        cache_dir: str | Path | None = None,
        record_dir: str | Path | None = None,
        replay_dir: str | Path | None = None,
        max_calls: int = 50,
        timeout_s: float = 15.0,
        max_page_bytes: int = 5_000_000,
        retries: int = 3,
        max_credits: float | None = None,
        backoff_s: float = 0.5,
        search_depth: str = "basic",
    ):
        if replay_dir is not None and record_dir is not None:
            raise LiveConfigError(
                "record_dir and replay_dir exclude each other: record a live run, then replay it"
            )
        if replay_dir is None and not api_key:
            raise LiveConfigError(MISSING_KEY)
        if replay_dir is not None and not Path(replay_dir).is_dir():
            raise LiveConfigError(
                f"replay directory {replay_dir} does not exist (record a run with --record first)"
            )
        if max_calls < 0 or retries < 0 or timeout_s <= 0 or max_page_bytes <= 0:
            raise LiveConfigError("max_calls and retries must be >= 0, timeout_s and max_page_bytes > 0")
        if search_depth not in ("basic", "advanced", "fast", "ultra-fast"):
            raise LiveConfigError(f"unknown Tavily search_depth {search_depth!r}")
        self._shared = _Shared(
            api_key,
            base_url,
            ResponseStore(cache_dir) if cache_dir is not None and replay_dir is None else None,
            ResponseStore(record_dir) if record_dir is not None else None,
            ResponseStore(replay_dir) if replay_dir is not None else None,
            Budget(max_calls=max_calls, max_credits=max_credits),
            timeout_s,
            max_page_bytes,
            retries,
            backoff_s,
            search_depth,
        )
        self._doc: LiveDocument | None = None

    @classmethod
    def from_env(cls, **kw: Any) -> LiveBrowser:
        """Configure from the environment: TAVILY_API_KEY (required unless replaying), TAVILY_BASE_URL.

        The disk cache defaults to ``<research-agent cache>/live`` so repeated runs do not pay twice.
        """
        from corpus.files import cache_dir

        api_key = kw.pop("api_key", None) or os.environ.get("TAVILY_API_KEY") or None
        if api_key is None and kw.get("replay_dir") is None:
            raise LiveConfigError(MISSING_KEY)
        kw.setdefault("base_url", os.environ.get("TAVILY_BASE_URL") or None)
        if "cache_dir" not in kw:
            kw["cache_dir"] = cache_dir() / "live"
        return cls(api_key, **kw)

    def fork(self) -> LiveBrowser:
        clone = object.__new__(LiveBrowser)
        clone._shared = self._shared
        clone._doc = None
        return clone

    @property
    def budget(self) -> Budget:
        return self._shared.budget

    def usage(self) -> dict[str, float]:
        """Calls and credits spent, searches and fetches made, cache hits, replayed responses, retries."""
        s = self._shared
        with s.lock:
            return {"calls": s.budget.calls, "credits": s.budget.credits, **s.stats}

    # --- the Browser protocol -------------------------------------------------------------------
    def search(self, query: str, k: int = 5) -> list[Hit]:
        query = " ".join(str(query).split())
        if not query:
            raise QueryError("empty search query")
        if len(query) > MAX_QUERY_CHARS:
            raise QueryError(f"search query is {len(query)} characters; keep it under {MAX_QUERY_CHARS}")
        k = max(1, min(int(k), MAX_RESULTS))
        s = self._shared
        response = s.respond("search", {"query": query, "k": k, "depth": s.search_depth}, s.live_search)
        hits = []
        for r in response["results"][:k]:
            doc_id = urldefrag(r["url"]).url
            hits.append(
                Hit(
                    doc_id=doc_id,
                    chunk_id=f"{doc_id}#0",
                    title=r["title"],
                    url=r["url"],
                    snippet=r["content"],
                    score=r["score"],
                )
            )
        with s.lock:
            for h in hits:
                s.snippets[h.doc_id] = h.snippet
        return hits

    def open(self, doc_or_url: str, page: int = 1) -> Page:
        url, chunk = split_chunk_id(doc_or_url)
        if chunk and page == 1:
            page = chunk  # chunk URL#N is page N
        doc = self._shared.document(check_web_url(url))
        if not 1 <= page <= doc.total_pages:
            raise PageOutOfRange(f"{url} has {doc.total_pages} page(s); page {page} does not exist")
        self._doc = doc
        return Page(
            doc_id=url,
            title=doc.title,
            url=url,
            lines=doc.page_lines(page),
            first_line=(page - 1) * LINES_PER_PAGE + 1,
            page=page,
            total_pages=doc.total_pages,
            total_lines=len(doc.lines),
            chunk_ids=[f"{url}#{page}"],
        )

    def find(self, pattern: str, regex: bool = False) -> list[FindMatch]:
        if self._doc is None:
            raise NoDocumentOpen("find needs an open page: open a search hit first")
        if not pattern or not pattern.strip():
            raise QueryError("empty find pattern")
        if regex:
            try:
                rx = re.compile(pattern, re.IGNORECASE)
            except re.error as e:
                raise QueryError(f"invalid regular expression {pattern!r}: {e}") from e
            matches: Callable[[str], Any] = rx.search
        else:
            needle = pattern.lower()
            matches = lambda line: needle in line.lower()  # noqa: E731
        doc = self._doc
        return [
            FindMatch(line_no=i + 1, text=line, chunk_id=f"{doc.url}#{i // LINES_PER_PAGE + 1}")
            for i, line in enumerate(doc.lines)
            if matches(line)
        ]

    def chunk_text(self, chunk_id: str) -> str:
        url, chunk = split_chunk_id(chunk_id)
        if chunk is None:
            raise DocumentNotFound(f"{chunk_id!r} is not a chunk id (expected URL#N)")
        if chunk == 0:
            with self._shared.lock:
                snippet = self._shared.snippets.get(url)
            if snippet is None:
                raise DocumentNotFound(
                    f"{chunk_id}: no search in this run returned {url}, so its snippet is unknown"
                )
            return snippet
        doc = self._shared.document(check_web_url(url))
        if chunk > doc.total_pages:
            raise DocumentNotFound(f"{chunk_id}: {url} has only {doc.total_pages} page chunk(s)")
        return "\n".join(doc.page_lines(chunk))
