"""The --trace page opens in a real headless Chromium: the DOM it builds holds every step, the answer
and the sources, and the screenshot is a drawn page, not a blank one.

Chromium is a system package (``apt-get install chromium``; .ci/run installs it).  Without it the
test is skipped with that instruction rather than silently passing.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from research_agent.agent import AgentConfig, ResearchAgent
from research_agent.trace import write_trace
from tests.doubles import ScriptedPolicy

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium: apt-get install chromium")


def _chromium(tmp_path, *args: str) -> subprocess.CompletedProcess:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=120)


def test_trace_renders_in_headless_chromium(smol, small_browser, tmp_path):
    _, tok = smol
    policy = ScriptedPolicy(tok, ["<search>capital of France</search>", "<open>factbook/fr</open>", "<find>Capital</find>",
                          "<bogus>", "<answer>Paris <b>&</b> [factbook/fr#0] [factbook/zz#1]</answer>"])
    traj = ResearchAgent(policy, small_browser.fork(), AgentConfig(max_tool_calls=5)).run(
        "What is the capital of France?")
    page = tmp_path / "trace.html"
    write_trace(traj, str(page))

    dom = _chromium(tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    for i in range(1, len(traj.steps) + 1):
        assert f'id="step-{i}"' in dom.stdout
    assert 'id="answer"' in dom.stdout and 'id="sources"' in dom.stdout
    # model text is escaped, so it shows as text and never becomes markup
    assert "&lt;b&gt;" in dom.stdout and "<b>&amp;</b>" not in dom.stdout
    assert "never retrieved" in dom.stdout  # the fabricated citation is flagged on the page

    shot = tmp_path / "trace.png"
    res = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1000,1400", page.as_uri())
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    from PIL import Image, ImageStat

    img = Image.open(shot).convert("L")
    assert img.size == (1000, 1400)
    assert ImageStat.Stat(img).stddev[0] > 5, "the screenshot is blank"
