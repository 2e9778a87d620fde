"""Record a live run, replay it offline: identical results, and a miss is an error, never a network call."""

from __future__ import annotations

import pytest

from corpus.live import FetchFailed, LiveBrowser, LiveConfigError, ReplayMiss
from corpus.replay import ResponseStore


def session(b: LiveBrowser, page_url) -> list:
    """A small research session; failures are part of what the agent saw, so they are results too."""
    out: list = []
    hits = b.search("telescope lenses history", k=3)
    out.append([h.to_dict() for h in hits])
    out.append(b.open(hits[0].url).to_dict())
    out.append(b.open(hits[0].url, page=2).to_dict())
    out.append([m.to_dict() for m in b.find("Saturn")])
    out.append(b.chunk_text(hits[0].chunk_id))
    out.append(b.search("basalt columnar jointing")[0].to_dict())
    for bad in ("paper.pdf", "missing"):
        try:
            b.open(page_url(bad))
        except FetchFailed as e:
            out.append((type(e).__name__, str(e)))
    return out


def test_record_then_replay_is_identical_and_offline(live, web, tmp_path):
    recorded = session(live(record_dir=tmp_path / "rec"), web.page_url)
    live_requests = web.count()
    assert ResponseStore(tmp_path / "rec").count("search") == 2
    assert ResponseStore(tmp_path / "rec").count("fetch") == 3  # including the two failures

    replayer = LiveBrowser(None, replay_dir=tmp_path / "rec")  # no key needed, no base_url at all
    assert session(replayer, web.page_url) == recorded
    assert web.count() == live_requests
    assert replayer.usage()["calls"] == 0 and replayer.usage()["replayed"] == 5

    with pytest.raises(ReplayMiss, match="no recorded search"):
        replayer.search("a question nobody asked")
    with pytest.raises(ReplayMiss, match="no recorded fetch"):
        replayer.open(web.page_url("kestrel"))
    assert web.count() == live_requests


def test_recording_includes_cache_hits(live, web, tmp_path):
    """A run served from the cache must still be replayable in full."""
    session(live(cache_dir=tmp_path / "cache"), web.page_url)
    before = web.count()
    recorded = session(live(cache_dir=tmp_path / "cache", record_dir=tmp_path / "rec"), web.page_url)
    assert web.count() == before + 2  # failures are not cached: the two bad pages were asked again
    assert session(LiveBrowser(None, replay_dir=tmp_path / "rec"), web.page_url) == recorded


def test_replay_options_are_checked(tmp_path):
    with pytest.raises(LiveConfigError, match="exclude"):
        LiveBrowser("k", record_dir=tmp_path / "a", replay_dir=tmp_path)
    with pytest.raises(LiveConfigError, match="does not exist"):
        LiveBrowser(None, replay_dir=tmp_path / "never-recorded")


def test_corrupt_cache_entries_are_refetched(live, web, tmp_path):
    b = live(cache_dir=tmp_path / "cache")
    b.search("kestrel")
    for f in (tmp_path / "cache" / "search").glob("*.json"):
        f.write_text("{half a rec")
    assert live(cache_dir=tmp_path / "cache").search("kestrel")[0].url == web.page_url("kestrel")
    assert web.count("search:") == 2
