"""LiveBrowser over a loopback web: real tavily-python client, real HTTP, real trafilatura."""

from __future__ import annotations

import time

import pytest

from corpus.browser import Browser, DocumentNotFound, NoDocumentOpen, PageOutOfRange, QueryError
from corpus.live import (
    LINE_WIDTH,
    LINES_PER_PAGE,
    BudgetExceeded,
    FetchFailed,
    LiveBrowser,
    LiveConfigError,
    SearchFailed,
)


def test_search_returns_hits_keyed_by_url(live, web):
    b = live()
    assert isinstance(b, Browser)
    hits = b.search("kestrel bird of prey", k=3)
    assert hits[0].url == web.page_url("kestrel")
    assert hits[0].doc_id == hits[0].url and hits[0].chunk_id == f"{hits[0].url}#0"
    assert "falcon family" in hits[0].snippet
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert b.chunk_text(hits[0].chunk_id) == hits[0].snippet  # a cited snippet can be checked
    assert web.count("search:") == 1 and b.usage()["credits"] == 1


def test_open_extracts_main_text_without_boilerplate(live, web):
    b = live()
    page = b.open(web.page_url("kestrel"))
    text = "\n".join(page.lines)
    assert "bird of prey" in text and "chestnut brown" in text
    for boiler in ("cookies", "Subscribe", "Copyright", "Privacy policy", "celebrity diets"):
        assert boiler not in text
    assert page.first_line == 1 and page.page == 1 and page.total_pages == 1
    assert page.chunk_ids == [f"{web.page_url('kestrel')}#1"]
    assert page.numbered().startswith("L1: ")


def test_paging_wrapping_and_find(live, web):
    b = live()
    url = web.page_url("telescope")
    first = b.open(url)
    assert first.total_pages > 2 and len(first.lines) == LINES_PER_PAGE
    assert all(len(line) <= LINE_WIDTH for line in first.lines)
    second = b.open(url, page=2)
    assert second.first_line == LINES_PER_PAGE + 1 and second.chunk_ids == [f"{url}#2"]
    with pytest.raises(PageOutOfRange):
        b.open(url, page=first.total_pages + 1)
    assert b.open(f"{url}#3").page == 3  # a chunk id opens its page
    assert web.count("/pages/telescope") == 1  # fetched once, paged from memory

    matches = b.find("year 1642")
    assert len(matches) == 1
    all_lines = [
        line for p in range(1, first.total_pages + 1) for line in b.chunk_text(f"{url}#{p}").split("\n")
    ]
    assert "year 1642" in all_lines[matches[0].line_no - 1]
    assert matches[0].chunk_id == f"{url}#{(matches[0].line_no - 1) // LINES_PER_PAGE + 1}"
    assert len(b.find(r"year 16[0-1]\d", regex=True)) == 20
    with pytest.raises(QueryError):
        b.find("([", regex=True)
    with pytest.raises(QueryError):
        b.find("  ")


def test_find_needs_an_open_page_and_forks_are_isolated(live, web):
    b = live()
    with pytest.raises(NoDocumentOpen):
        b.find("kestrel")
    b.open(web.page_url("kestrel"))
    fork = b.fork()
    with pytest.raises(NoDocumentOpen):
        fork.find("kestrel")
    fork.open(web.page_url("basalt"))
    assert b.find("basalt") == [] and b.find("voles")
    assert fork.find("basalt") and not fork.find("voles")
    fork.open(web.page_url("kestrel"))
    assert web.count("/pages/") == 2  # forks share fetched documents
    assert fork.budget is b.budget


def test_budget_is_a_hard_limit(live, web):
    b = live(max_calls=2)
    b.search("kestrel")
    b.open(web.page_url("basalt"))
    with pytest.raises(BudgetExceeded, match="2 live calls"):
        b.fork().open(web.page_url("telescope"))
    assert web.count() == 2  # the third request never left the machine
    b.open(web.page_url("basalt"), page=1)  # memoized pages cost nothing

    c = live(max_credits=1)
    c.search("basalt")
    with pytest.raises(BudgetExceeded, match="credits"):
        c.search("kestrel")


def test_retries_count_against_the_budget(live, web):
    b = live(max_calls=2, retries=5)
    with pytest.raises(BudgetExceeded):
        b.search("basalt fault:500:9")
    assert web.count("search:") == 2


def test_disk_cache_serves_repeated_calls(live, web, tmp_path):
    first = live(cache_dir=tmp_path / "cache")
    hits = first.search("basalt lava")
    page = first.open(hits[0].url)
    second = live(cache_dir=tmp_path / "cache")
    assert second.search("basalt lava") == hits
    assert second.open(hits[0].url) == page
    assert web.count() == 2 and second.usage()["cache_hits"] == 2 and second.usage()["calls"] == 0


# --- the fault matrix: each fault is retried or reported as intended -------------------------------
@pytest.mark.parametrize(
    "query, requests_seen",
    [
        ("kestrel fault:429:2", 3),
        ("kestrel fault:500:1", 2),
        ("kestrel fault:timeout:1", 2),
        ("kestrel fault:garbage:1", 2),
    ],
)
def test_search_faults_are_retried(live, web, query, requests_seen):
    b = live()
    hits = b.search(query)
    assert hits and hits[0].url == web.page_url("kestrel")
    assert web.count("search:") == requests_seen
    assert b.usage()["retries"] == requests_seen - 1


@pytest.mark.parametrize(
    "query, error, match, requests_seen",
    [
        ("kestrel fault:500:9", SearchFailed, "after 3 attempts: HTTP 500", 3),
        ("kestrel fault:garbage:9", SearchFailed, "invalid JSON", 3),
        ("kestrel fault:timeout:9", SearchFailed, "timed out", 3),
        ("kestrel fault:badshape:9", SearchFailed, "not a result list", 1),
    ],
)
def test_search_faults_that_persist_are_reported(live, web, query, error, match, requests_seen):
    with pytest.raises(error, match=match):
        live().search(query)
    assert web.count("search:") == requests_seen


def test_rejected_key_is_a_config_error_not_retried(live, web):
    with pytest.raises(LiveConfigError, match="TAVILY_API_KEY"):
        live(api_key="tvly-wrong").search("kestrel")
    assert web.count("search:") == 1


@pytest.mark.parametrize("page, requests_seen", [("slow-once", 2), ("ratelimited-once", 2), ("notes.txt", 1)])
def test_fetch_faults_are_retried(live, web, page, requests_seen):
    p = live().open(web.page_url(page))
    assert p.lines
    assert web.count(f"/pages/{page}") == requests_seen


@pytest.mark.parametrize(
    "page, match, requests_seen",
    [
        ("error500", "after 3 attempts: HTTP 500", 3),
        ("missing", "HTTP 404", 1),
        ("paper.pdf", "application/pdf, not a web page", 1),
        ("huge-declared", "50,000,000 bytes, over the 5,000,000-byte limit", 1),
        ("huge-streamed", "over the 5,000,000-byte page limit", 1),
        ("js-app-shell", "no main text", 1),
    ],
)
def test_fetch_faults_are_reported(live, web, page, match, requests_seen):
    started = time.monotonic()
    with pytest.raises(FetchFailed, match=match):
        live().open(web.page_url(page))
    assert web.count(f"/pages/{page}") == requests_seen
    assert time.monotonic() - started < 10


def test_non_web_ids_are_refused_without_a_request(live, web):
    b = live()
    for bad in ("file:///etc/passwd", "not a url", "ftp://example.org/x"):
        with pytest.raises(DocumentNotFound, match="http"):
            b.open(bad)
    with pytest.raises(DocumentNotFound, match="snippet"):
        b.chunk_text(f"{web.page_url('kestrel')}#0")  # never returned by a search
    with pytest.raises(QueryError):
        b.search("   ")
    with pytest.raises(QueryError, match="under 400"):
        b.search("word " * 200)
    assert web.count() == 0


def test_from_env_names_the_missing_key(monkeypatch, web):
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    with pytest.raises(LiveConfigError, match="TAVILY_API_KEY"):
        LiveBrowser.from_env()
    with pytest.raises(LiveConfigError, match="TAVILY_API_KEY"):
        LiveBrowser(None)
    monkeypatch.setenv("TAVILY_API_KEY", web.api_key)
    monkeypatch.setenv("TAVILY_BASE_URL", web.url)
    b = LiveBrowser.from_env(cache_dir=None)
    assert b.search("basalt")[0].url == web.page_url("basalt")
