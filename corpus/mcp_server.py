"""``python -m corpus mcp``: a corpus's Browser as a Model Context Protocol server.

Assistants and agent frameworks take tools over MCP; this hands them the Browser the agent uses,
as three tools with the Browser's results, limits and errors:

    search(query, k=5)              -> {"hits": [Hit, ...]}         at most 50 hits
    open(doc, page=None)            -> {"page": Page}               30 numbered lines a page
    find(pattern, doc=None, regex)  -> {"doc_id", "matches": [FindMatch, ...]}   at most 200 lines

Each result is the same JSON as the retrieval service's (``corpus.service``) in the tool's
structured content, and as readable text (numbered hits, numbered lines) for the model.  A Browser
error (``QueryError``, ``DocumentNotFound``, ``PageOutOfRange``, ``NoDocumentOpen``) is a tool
result with ``isError`` and the Browser's message, which a model can read and act on; arguments of
the wrong type are refused the same way, by the SDK's validation.

``open`` has state (``find`` greps the opened document), so each MCP session gets its own
``browser.fork()``, kept as the retrieval service keeps its sessions (``service.SessionPool``):
one for the stdio connection, one per ``Mcp-Session-Id`` over HTTP.  A client without a session
(stateless HTTP) passes ``doc`` to ``find``.

    python -m corpus mcp [--corpus DIR]                               # stdio, for an assistant to spawn
    python -m corpus mcp --transport http [--host 127.0.0.1] [--port 8000]   # streamable HTTP at /mcp

There is no authentication: HTTP binds to loopback unless ``--host`` says otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field
from typing_extensions import TypedDict  # pydantic reads typing.TypedDict only from Python 3.12

from corpus.browser import BrowserError, FindMatch, Hit, NoDocumentOpen, Page
from corpus.service import DEFAULT_MAX_SESSIONS, SessionPool
from corpus.store import CorpusError

try:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import CallToolResult, TextContent
except ImportError as e:  # an optional extra: say how to get it
    raise ImportError(f"the MCP server needs the MCP SDK 2.x ({e}): pip install 'research-agent[mcp]'") from e

TOOLS = ("search", "open", "find")
STDIO_SESSION = "stdio"  # the one client of a stdio server
INSTRUCTIONS = (
    "Search a document corpus and read it. `search` ranks chunks (hybrid dense + BM25); `open` a hit's "
    "doc_id or chunk_id to read its document as numbered lines, 30 a page; `find` lists the lines of the "
    "opened document that contain a pattern. Cite what you use by chunk id, e.g. [factbook/fr#0]."
)


# --- the structured results: the retrieval service's JSON, as schemas the client can read ------------
class HitRecord(TypedDict):
    doc_id: str
    chunk_id: str
    title: str
    url: str
    snippet: str
    score: float


class PageRecord(TypedDict):
    doc_id: str
    title: str
    url: str
    lines: list[str]
    first_line: int
    page: int
    total_pages: int
    total_lines: int
    chunk_ids: list[str]


class MatchRecord(TypedDict):
    line_no: int
    text: str
    chunk_id: str


class SearchResult(TypedDict):
    hits: list[HitRecord]


class OpenResult(TypedDict):
    page: PageRecord


class FindResult(TypedDict):
    doc_id: str
    matches: list[MatchRecord]


# --- text for the model ------------------------------------------------------------------------
def hits_text(hits: list[Hit]) -> str:
    if not hits:
        return "No results."
    lines = []
    for i, h in enumerate(hits, 1):
        lines.append(f"{i}. {h.title} [{h.chunk_id}] (score {h.score:.4f})")
        if h.url:
            lines.append(f"   {h.url}")
        lines.append(f"   {h.snippet}")
    return "\n".join(lines)


def page_text(page: Page) -> str:
    last = page.first_line + len(page.lines) - 1
    head = [
        f"{page.title} ({page.doc_id}) {page.url}".rstrip(),
        f"page {page.page}/{page.total_pages}, lines {page.first_line}-{last} of {page.total_lines}",
    ]
    if page.chunk_ids:
        head.append("cite as: " + " ".join(f"[{c}]" for c in page.chunk_ids))
    return "\n".join(head + [page.numbered()])


def matches_text(pattern: str, doc_id: str, matches: list[FindMatch]) -> str:
    if not matches:
        return f"No lines of {doc_id} contain {pattern!r}."
    return "\n".join(f"L{m.line_no} [{m.chunk_id}]: {m.text}" if m.chunk_id else f"L{m.line_no}: {m.text}"
                     for m in matches)


def _result(text: str, structured: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)


# --- the server ----------------------------------------------------------------------------------
def build_server(browser: Any, *, max_sessions: int = DEFAULT_MAX_SESSIONS, name: str = "research-agent corpus"
                 ) -> MCPServer:
    """An ``MCPServer`` with the three tools over ``browser`` (anything with the Browser interface and
    ``fork()``, e.g. ``corpus.open_corpus(DIR)``); run it with ``.run("stdio")`` or serve its
    ``streamable_http_app()``."""
    if not callable(getattr(browser, "fork", None)):
        raise TypeError(f"{type(browser).__name__} has no fork(): the server needs one browser per session")
    sessions = SessionPool(_Reader(browser), max_sessions)
    server = MCPServer(name, instructions=INSTRUCTIONS, log_level="WARNING")

    def session_key(ctx: Context) -> str | None:
        """stdio has one client; HTTP names its session in a header, unless the client speaks the
        stateless protocol (no session: nothing stays open between its calls)."""
        headers = ctx.headers
        return STDIO_SESSION if headers is None else headers.get("mcp-session-id")

    def session_reader(key: str | None, create: bool = True):
        return sessions.get(key, create=create) if key is not None else sessions.get("", create=False)

    def refused(e: BrowserError | CorpusError) -> ToolError:
        return ToolError(f"{type(e).__name__}: {e}")

    @server.tool(description="Rank the corpus's chunks for a query (hybrid dense + BM25 unless the server "
                 "says otherwise). Each hit has a doc_id to open and a chunk_id to cite. At most 50 hits.")
    def search(
        query: Annotated[str, Field(description="words to search for (at most 2000 characters)")],
        k: Annotated[int, Field(strict=True, description="how many hits (1 or more; at most 50 are returned)")] = 5,
    ) -> Annotated[CallToolResult, SearchResult]:
        try:
            hits = browser.search(query, k=k)
        except (BrowserError, CorpusError) as e:
            raise refused(e) from None
        return _result(hits_text(hits), {"hits": [h.to_dict() for h in hits]})

    @server.tool(name="open", description="Show a document as numbered lines, 30 a page. doc is a doc id, a "
                 "chunk id (opens the page holding that chunk), a URL or an exact title. The page lists "
                 "the chunk ids it overlaps, to cite.")
    def open_(
        doc: Annotated[str, Field(description="doc id, chunk id, URL or exact title from search results")],
        ctx: Context,
        page: Annotated[int | None, Field(strict=True, description="page number from 1 (default: 1, or "
                                          "the page holding a chunk id)")] = None,
    ) -> Annotated[CallToolResult, OpenResult]:
        reader, lock = session_reader(session_key(ctx))
        try:
            with lock:
                shown = reader.open(doc, page)
        except (BrowserError, CorpusError) as e:
            raise refused(e) from None
        return _result(page_text(shown), {"page": shown.to_dict()})

    @server.tool(description="List the lines of the opened document (or of doc, which is opened first) that "
                 "contain pattern, case-insensitive; at most 200. regex=true takes a regular expression "
                 "(time-limited).")
    def find(
        pattern: Annotated[str, Field(description="text to look for (at most 500 characters)")],
        ctx: Context,
        doc: Annotated[str | None, Field(description="a document to open and search instead of the one "
                                         "opened last")] = None,
        regex: Annotated[bool, Field(strict=True, description="read pattern as a regular expression")] = False,
    ) -> Annotated[CallToolResult, FindResult]:
        key = session_key(ctx)
        reader, lock = session_reader(key, create=doc is not None)  # a find that fails stores nothing
        try:
            with lock:
                if doc is not None:
                    reader.open(doc, None)
                matches = reader.browser.find(pattern, regex=regex)
                doc_id = reader.doc_id
        except NoDocumentOpen as e:
            why = ("this connection keeps no session (stateless HTTP), so nothing stays open between calls"
                   if key is None else str(e))
            raise ToolError(f"NoDocumentOpen: {why}; or pass doc to find in that document") from None
        except (BrowserError, CorpusError) as e:
            raise refused(e) from None
        return _result(matches_text(pattern, doc_id, matches),
                       {"doc_id": doc_id, "matches": [m.to_dict() for m in matches]})

    return server


class _Reader:
    """One session's browser and the id of the document it opened (the Browser protocol does not
    name it, and ``find`` reports which document it searched)."""

    def __init__(self, browser: Any):
        self.browser, self.doc_id = browser, ""

    def fork(self) -> _Reader:
        return _Reader(self.browser.fork())

    def open(self, doc: str, page: int | None) -> Page:
        shown = self.browser.open(doc) if page is None else self.browser.open(doc, page=page)
        self.doc_id = shown.doc_id
        return shown


# --- running it ----------------------------------------------------------------------------------
def serve_http(server: MCPServer, host: str = "127.0.0.1", port: int = 8000,
               sock: socket.socket | None = None, on_ready=None) -> None:
    """Serve ``server`` over streamable HTTP at ``/mcp`` until interrupted.

    ``sock`` is an already bound socket (port 0 picks a free port); ``on_ready(url)`` is called with
    the endpoint's URL.  The SDK checks the Host header against ``host`` (DNS rebinding protection)."""
    import uvicorn

    if sock is None:
        sock = socket.create_server((host, port))
    bound_host, bound_port = sock.getsockname()[:2]
    url = f"http://{host}:{bound_port}/mcp"
    app = server.streamable_http_app(host=host)
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    if on_ready is not None:
        on_ready(url)
    uv.run(sockets=[sock])


def main(argv: list[str] | None = None) -> int:
    from corpus.local import add_retriever_flag

    parser = argparse.ArgumentParser(prog="python -m corpus mcp", description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=None,
                        help="corpus directory (default: $RESEARCH_AGENT_CORPUS or the default corpus, built on first use)")
    add_retriever_flag(parser)
    parser.add_argument("--transport", default="stdio", choices=["stdio", "http"],
                        help="stdio (an assistant spawns the server) or streamable HTTP")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP: address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000, help="HTTP: port (0: any free port, printed at start)")
    parser.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS,
                        help="HTTP: sessions whose opened document is kept; the least recently used go first")
    args = parser.parse_args(argv)
    from corpus import open_corpus

    try:
        # stdout is the protocol's channel on stdio: whatever loading the corpus prints goes to stderr
        with contextlib.redirect_stdout(sys.stderr):
            browser = open_corpus(Path(args.corpus) if args.corpus else None, retriever=args.retriever)
    except CorpusError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    server = build_server(browser, max_sessions=args.max_sessions)
    if args.transport == "stdio":
        server.run("stdio")
        return 0
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: serving on {args.host} without authentication", file=sys.stderr)
    try:
        sock = socket.create_server((args.host, args.port))
    except OSError as e:
        print(f"error: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 2

    def ready(url: str) -> None:
        print(f"serving {browser.path} ({browser.retriever}) over MCP at {url}  (Ctrl-C stops)",
              file=sys.stderr, flush=True)

    try:
        serve_http(server, args.host, sock=sock, on_ready=ready)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
