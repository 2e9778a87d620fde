"""The files of the session corpus: HTML pages wrapped in boilerplate (nav, cookie banner, footer),
Markdown, text, JSONL records, and bad input that a build must skip."""

from __future__ import annotations

import json
from pathlib import Path

FACTBOOK_GECS = ["fr", "sp", "ke", "ja", "br"]

BOILERPLATE = {
    "nav": "Shop our merchandise",
    "cookie": "We use cookies to improve your experience",
    "footer": "All rights reserved",
}


def page(title: str, heading: str, paragraphs: list[str], canonical: str = "") -> str:
    body = "\n".join(f"<p>{p}</p>" for p in paragraphs)
    link = f'<link rel="canonical" href="{canonical}">' if canonical else ""
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title} | Nature Notes</title>{link}</head>
<body>
<nav><ul><li><a href="index.html">Home</a></li><li><a href="about.html">About us</a></li>
<li><a href="shop.html">{BOILERPLATE["nav"]}</a></li></ul></nav>
<div id="cookie-banner" class="cookie-consent"><p>{BOILERPLATE["cookie"]}. Accept all cookies?</p>
<button>Accept</button></div>
<main><article>
<h1>{heading}</h1>
{body}
</article></main>
<footer><p>Copyright 2024 Nature Notes. {BOILERPLATE["footer"]}. Privacy policy. Terms of service.</p>
<a href="contact.html">Contact</a></footer>
</body></html>
"""


BEES = [
    "Honeybees use the waggle dance to tell their nestmates where flowers are. The angle of the dance "
    "relative to vertical encodes the direction of the food source relative to the sun.",
    "The duration of the waggle run encodes the distance to the flowers. Karl von Frisch decoded this "
    'language; read <a href="frisch.html">his biography</a> or <a href="https://en.wikipedia.org/wiki/Waggle_dance">'
    "the encyclopedia article</a>.",
    "Foragers also share nectar by trophallaxis, passing food mouth to mouth, which tells the hive about the "
    "quality of the nectar they found.",
]
FRISCH = [
    "Karl von Frisch was an Austrian ethologist who studied the senses of the honeybee. He showed that bees "
    "can see ultraviolet light and distinguish colours.",
    "He shared the Nobel Prize in Physiology or Medicine in 1973 with Konrad Lorenz and Nikolaas Tinbergen.",
]
VOLCANO = [
    "Mount Etna on the east coast of Sicily is one of the most active volcanoes in the world. Its eruptions "
    "produce lava flows, ash columns and volcanic bombs.",
    "Basaltic magma from Etna is runny, so its lava can travel many kilometres before it cools and hardens.",
]
TIDES_MD = """# Ocean tides

Tides are the rise and fall of sea levels caused by the gravitational pull of the Moon and the Sun.

## Spring and neap tides

When the Sun and Moon line up, at new and full moon, their pulls add up and produce spring tides with
the largest range. At the quarter moons they pull at right angles and the range is smallest: neap tides.

See [the volcano page](../html/volcano.html) for something completely different.
"""
RECORDS = [
    {
        "id": "rec-saffron",
        "url": "https://example.org/saffron",
        "title": "Saffron",
        "text": "Saffron is a spice harvested by hand from the stigmas of the crocus flower. About 150 flowers "
        "yield a single gram, which makes saffron the most expensive spice by weight.",
        "lang": "en",
    },
    {
        "id": "rec-glacier",
        "url": "https://example.org/glaciers",
        "title": "Glaciers",
        "text": "A glacier is a persistent body of dense ice that moves under its own weight. Glaciers carve "
        "U-shaped valleys and leave moraines of rock debris when they retreat.\n"
        + "Catastrophic test line: "
        + "a" * 60
        + "b",
    },
]
BAD_JSONL_LINES = [
    '{"id": "rec-broken", "title": "Broken", "text": "unterminated',
    '{"id": "rec-notext", "title": "No text"}',
]


def write_sources(src: Path) -> None:
    (src / "html").mkdir(parents=True)
    (src / "notes").mkdir()
    (src / "data").mkdir()
    (src / "html" / "bees.html").write_text(
        page("Honeybees", "How honeybees communicate", BEES), encoding="utf-8"
    )
    (src / "html" / "frisch.html").write_text(
        page("Karl von Frisch", "Karl von Frisch", FRISCH), encoding="utf-8"
    )
    (src / "html" / "volcano.html").write_text(
        page("Etna", "Mount Etna", VOLCANO, canonical="https://example.org/etna"), encoding="utf-8"
    )
    (src / "notes" / "tides.md").write_text(TIDES_MD, encoding="utf-8")
    (src / "notes" / "lichen.txt").write_text(
        "Lichens are partnerships between a fungus and an alga or cyanobacterium.\n"
        "They colonise bare rock and are among the first organisms to grow after a lava flow.\n",
        encoding="utf-8",
    )
    lines = [json.dumps(r) for r in RECORDS] + BAD_JSONL_LINES
    (src / "data" / "records.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    # bad input: each must be skipped with one line naming the file and the reason
    (src / "html" / "broken.html").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (src / "notes" / "latin1.txt").write_bytes("Caf\xe9 cr\xe8me br\xfbl\xe9e".encode("latin-1"))
    (src / "notes" / "empty.md").write_text("   \n\n", encoding="utf-8")
    (src / "data" / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n")


# Each bad item above, and a word its skip reason must contain.
EXPECTED_SKIPS = {
    "html/broken.html": "binary",
    "notes/latin1.txt": "undecodable",
    "notes/empty.md": "empty",
    "data/records.jsonl:3": "not JSON",
    "data/records.jsonl:4": "missing field 'text'",
    "data/image.png": "unsupported",
}
