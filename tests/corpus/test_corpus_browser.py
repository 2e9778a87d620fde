"""The Browser over the session corpus: search in all three modes, open, find, and their errors."""

from __future__ import annotations

import threading
import time

import pytest

from corpus.browser import Browser, DocumentNotFound, NoDocumentOpen, PageOutOfRange, QueryError

MODES = ["dense", "bm25", "hybrid"]


def test_local_browser_is_a_browser(browser):
    assert isinstance(browser, Browser)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "query, doc_id",
    [
        ("How do honeybees tell nestmates where the flowers are? waggle dance", "html/bees.html"),
        ("What is the capital of Kenya?", "factbook/ke"),
        ("spring tides and neap tides moon", "notes/tides.md"),
        ("most expensive spice harvested from crocus flowers", "rec-saffron"),
    ],
)
def test_known_query_returns_the_right_document_first(browser, mode, query, doc_id):
    hits = browser.search(query, k=5, mode=mode)
    assert hits, f"{mode}: no hits"
    assert hits[0].doc_id == doc_id, [(h.chunk_id, h.score) for h in hits]
    top = hits[0]
    assert top.chunk_id.startswith(f"{doc_id}#") and top.title == browser.document(doc_id).title
    assert top.snippet and len(top.snippet) <= 310
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:], strict=False))


def test_hit_fields(browser):
    hit = browser.search("Karl von Frisch Nobel Prize 1973", k=3)[0]
    assert hit.doc_id == "html/frisch.html"
    assert hit.to_dict().keys() == {"doc_id", "chunk_id", "title", "url", "snippet", "score"}
    assert "Nobel" in hit.snippet
    assert browser.chunk_text(hit.chunk_id).startswith("Karl von Frisch")


def test_k_is_capped_at_50(browser):
    assert len(browser.search("capital", k=1000)) == 50
    assert len(browser.search("capital", k=3)) == 3


@pytest.mark.parametrize("query", ["", "   \n", "x" * 10_000])
def test_empty_or_huge_query_is_a_query_error(browser, query):
    with pytest.raises(QueryError):
        browser.search(query)


def test_bad_k_and_mode_are_query_errors(browser):
    with pytest.raises(QueryError):
        browser.search("bees", k=0)
    with pytest.raises(QueryError):
        browser.search("bees", mode="telepathy")


def test_query_without_indexed_words_gives_no_bm25_hits(browser):
    assert browser.search("the of and", mode="bm25") == []
    assert browser.search("zzqxj", mode="bm25") == []
    assert browser.search("zzqxj", mode="hybrid")  # dense still ranks something


def test_open_shows_numbered_pages_with_the_total(browser):
    doc = browser.document("factbook/fr")
    p1 = browser.open("factbook/fr")
    assert (p1.doc_id, p1.title, p1.page, p1.first_line) == ("factbook/fr", "France", 1, 1)
    assert len(p1.lines) == 30 and p1.total_pages == -(-p1.total_lines // 30) > 3
    assert p1.lines[0] == "France" and "Capital: Paris" in p1.lines
    assert p1.numbered().splitlines()[3] == "L4: Capital: Paris"
    assert all(len(line) <= 200 for line in p1.lines)
    assert p1.chunk_ids[0] == "factbook/fr#0"
    p2 = browser.open("factbook/fr", page=2)
    assert p2.first_line == 31 and p2.page == 2
    last = browser.open("factbook/fr", page=p1.total_pages)
    assert last.first_line + len(last.lines) - 1 == p1.total_lines
    assert last.lines[-1] == doc.text.splitlines()[-1][-len(last.lines[-1]) :]


def test_open_page_chunk_ids_are_the_chunks_overlapping_the_page(browser):
    from corpus.documents import wrap_lines

    doc = browser.document("factbook/fr")
    lines = wrap_lines(doc.text)
    page = browser.open("factbook/fr", page=2)
    assert page.lines == [doc.text[ln.start : ln.end] for ln in lines[30:60]]
    lo, hi = lines[30].start, lines[59].end
    assert page.chunk_ids == [c.id for c in browser.chunks("factbook/fr") if c.start < hi and c.end > lo]
    assert len(page.chunk_ids) >= 2


def test_open_a_chunk_id_shows_the_page_holding_it(browser):
    chunks = browser.chunks("factbook/fr")
    target = chunks[len(chunks) // 2]
    page = browser.open(target.id)
    assert target.id in page.chunk_ids
    assert target.text.splitlines()[0][:50] in "\n".join(page.lines)
    assert browser.open(target.id, page=1).page == 1


def test_open_by_url_and_title(browser):
    assert browser.open("https://example.org/saffron").doc_id == "rec-saffron"
    assert browser.open(browser.document("factbook/ke").url).doc_id == "factbook/ke"
    assert browser.open("Kenya").doc_id == "factbook/ke"


@pytest.mark.parametrize(
    "ref", ["factbook/zz", "nothing here", "factbook/fr#9999", "https://nowhere.example/x", ""]
)
def test_unknown_document_is_document_not_found(browser, ref):
    with pytest.raises(DocumentNotFound):
        browser.fork().open(ref)


@pytest.mark.parametrize("page", [0, -1, 10_000])
def test_page_out_of_range(browser, page):
    with pytest.raises(PageOutOfRange, match="page"):
        browser.fork().open("factbook/fr", page=page)


def test_find_literal_gives_the_right_line_numbers(browser):
    b = browser.fork()
    b.open("factbook/fr")
    matches = b.find("capital: paris")  # case-insensitive
    assert [m.line_no for m in matches][:1] == [4]
    lines = b._c.docs[b._c.doc_index["factbook/fr"]].text  # noqa: SLF001 - check against the raw text
    for m in matches:
        page = b.open("factbook/fr", page=(m.line_no - 1) // 30 + 1)
        assert page.lines[(m.line_no - 1) % 30] == m.text
        assert "capital: paris" in m.text.lower()
        assert m.text in b.chunk_text(m.chunk_id) or m.text[:60] in b.chunk_text(m.chunk_id)
    assert len(matches) >= 2 and "Capital: Paris" in lines


def test_find_regex(browser):
    b = browser.fork()
    b.open("factbook/ke")
    matches = b.find(r"^capital: \w+$", regex=True)
    assert [m.text for m in matches][:1] == ["Capital: Nairobi"]
    assert b.find("Capital: Nai.obi") == []  # literal by default: "." is not a wildcard


def test_find_catastrophic_regex_is_stopped(browser):
    b = browser.fork()
    b.open("rec-glacier")
    t0 = time.monotonic()
    with pytest.raises(QueryError, match="took longer"):
        b.find(r"(a|aa)+$", regex=True)
    assert time.monotonic() - t0 < 5


def test_find_errors(browser):
    b = browser.fork()
    with pytest.raises(NoDocumentOpen):
        b.find("anything")
    b.open("factbook/fr")
    for bad in ("", "   "):
        with pytest.raises(QueryError):
            b.find(bad)
    with pytest.raises(QueryError, match="invalid"):
        b.find("(unclosed", regex=True)
    with pytest.raises(QueryError):
        b.find("x" * 10_000)


def test_fork_has_its_own_open_document(browser):
    a, b = browser.fork(), browser.fork()
    assert a._c is b._c is browser._c  # noqa: SLF001 - the loaded index is shared
    a.open("factbook/fr")
    b.open("factbook/ke")
    assert a.find("Capital: Paris") and not a.find("Nairobi")
    assert b.find("Nairobi") and not b.find("Capital: Paris")
    with pytest.raises(NoDocumentOpen):
        browser.fork().find("Paris")


def test_search_from_many_threads_matches_serial_results(browser):
    queries = [
        "capital of Kenya",
        "waggle dance",
        "glacier moraine",
        "Mount Etna lava",
        "saffron crocus",
        "capital of Japan",
        "Brazil population",
        "spring tides",
    ] * 3
    expected = {q: [h.chunk_id for h in browser.search(q, k=5)] for q in set(queries)}
    results: dict[int, list[str]] = {}
    errors: list[BaseException] = []

    def worker(i: int, q: str) -> None:
        try:
            b = browser.fork()
            results[i] = [h.chunk_id for h in b.search(q, k=5)]
            b.open(results[i][0])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i, q)) for i, q in enumerate(queries)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(results[i] == expected[q] for i, q in enumerate(queries))


def test_document_records(browser):
    doc = browser.document("factbook/fr")
    assert doc.meta["capital"] == "Paris" and "factbook/sp" in doc.links
    with pytest.raises(DocumentNotFound):
        browser.document("nope")
    with pytest.raises(DocumentNotFound):
        browser.chunk_text("factbook/fr#9999")
    with pytest.raises(DocumentNotFound):
        browser.chunk_text("no-hash-here")
    assert len(list(browser.documents())) == browser.manifest["counts"]["documents"]
