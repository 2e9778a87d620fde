"""Ingest (A1) on the session corpus: HTML main text, Markdown, text, JSONL, and bad input skipped."""

from __future__ import annotations

from corpus_sources import BOILERPLATE, EXPECTED_SKIPS


def test_html_main_text_without_boilerplate(browser):
    doc = browser.document("html/bees.html")
    assert "waggle dance to tell their nestmates" in doc.text
    assert "trophallaxis" in doc.text
    for junk in (*BOILERPLATE.values(), "Privacy policy", "About us", "Accept all cookies"):
        assert junk not in doc.text, f"boilerplate {junk!r} kept"
    assert doc.title in ("How honeybees communicate", "Honeybees")
    assert doc.meta["source"] == "html"


def test_html_links_are_the_main_texts_links(browser):
    doc = browser.document("html/bees.html")
    assert "html/frisch.html" in doc.links  # a relative link to a page of the same corpus: its doc id
    assert "https://en.wikipedia.org/wiki/Waggle_dance" in doc.links
    assert not any("contact" in link or "about" in link or "shop" in link for link in doc.links)


def test_html_canonical_url_is_the_document_url(browser):
    assert browser.document("html/volcano.html").url == "https://example.org/etna"
    assert browser.open("https://example.org/etna/").doc_id == "html/volcano.html"


def test_markdown_title_text_and_links(browser):
    doc = browser.document("notes/tides.md")
    assert doc.title == "Ocean tides"
    assert "gravitational pull of the Moon" in doc.text
    assert doc.links == ["html/volcano.html"]


def test_text_file(browser):
    doc = browser.document("notes/lichen.txt")
    assert doc.title == "lichen"
    assert doc.text.startswith("Lichens are partnerships")


def test_jsonl_records_keep_ids_urls_titles_and_extra_fields(browser):
    doc = browser.document("rec-saffron")
    assert doc.title == "Saffron"
    assert doc.url == "https://example.org/saffron"
    assert doc.meta["lang"] == "en"
    assert browser.document("rec-glacier").text.startswith("A glacier is")


def test_each_bad_item_is_skipped_with_one_line_naming_file_and_reason(small_corpus):
    skipped = {s["source"]: s["reason"] for s in small_corpus.manifest["skipped"]}
    assert small_corpus.manifest["counts"]["skipped"] == len(EXPECTED_SKIPS)
    for where, word in EXPECTED_SKIPS.items():
        assert where in skipped, f"{where} was not skipped"
        assert word.lower() in skipped[where].lower()
        lines = [ln for ln in small_corpus.stderr.splitlines() if ln.startswith(f"skipped {where}:")]
        assert len(lines) == 1, small_corpus.stderr


def test_the_build_went_on_past_bad_input(small_corpus, browser):
    ids = {d.id for d in browser.documents()}
    assert {
        "html/bees.html",
        "html/frisch.html",
        "html/volcano.html",
        "notes/tides.md",
        "notes/lichen.txt",
        "rec-saffron",
        "rec-glacier",
    } <= ids
    assert not ids & {"html/broken.html", "notes/latin1.txt", "notes/empty.md", "rec-broken", "rec-notext"}


def test_html_without_main_text_is_empty(tmp_path):
    from corpus.sources import Skips, path_documents

    (tmp_path / "nav.html").write_text(
        "<html><head><title>t</title></head><body><script>var a;</script></body></html>"
    )
    skips = Skips(quiet=True)
    assert list(path_documents([tmp_path], skips)) == []
    assert skips.items == [{"source": "nav.html", "reason": "empty document (no main text)"}]


def test_missing_source_path_is_a_clear_error(tmp_path):
    import pytest

    from corpus import CorpusError, build_corpus

    with pytest.raises(CorpusError, match="does not exist"):
        build_corpus([tmp_path / "nope"], tmp_path / "out", progress=False)
