"""The report and the live viewer in a real browser: Playwright driving Debian's Chromium, headless.

Needs /usr/bin/chromium (`.ci/setup-browser.sh`) and the `playwright` package (the [dev] extra); it never
downloads a browser. Skipped when either is missing, unless PALAESTRA_REQUIRE names ``browser`` (CI: ``all``),
which turns the skip into a failure. Screenshots go to tests/report/artifacts/ (git-ignored).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from palaestra.report import write_report
from palaestra.report.index import JournalIndex
from palaestra.report.rows import Filter
from palaestra.server.loopback import serve_app

from .conftest import XSS, rollout

CHROMIUM = os.environ.get("PALAESTRA_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
_missing = [what for what, ok in (("the playwright package", importlib.util.find_spec("playwright") is not None),
                                  (CHROMIUM, Path(CHROMIUM).exists())) if not ok]
# PALAESTRA_REQUIRE=browser (or =all, or the older PALAESTRA_REQUIRE_BROWSER=1) turns this skip into a
# failure: see tests/conftest.py.
pytestmark = pytest.mark.skipif(bool(_missing), reason=f"browser: needs {', '.join(_missing)} (.ci/setup-browser.sh)")
if not _missing:
    from playwright.sync_api import expect



class Watched:
    """A page plus everything it logged or fetched, so tests can assert 'no errors, no network'."""

    def __init__(self, page: Any) -> None:
        self.page, self.errors, self.urls = page, [], []
        page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        page.on("request", lambda r: self.urls.append(r.url))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def watched(browser: Any) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    yield Watched(context.new_page())
    context.close()


def _rows(page: Any) -> int:
    return int(page.locator("#rows tbody tr.row").count())


def test_static_report(watched: Watched, mixed_run: Path, artifacts: Path) -> None:
    page = watched.page
    url = write_report(mixed_run).as_uri()
    page.goto(url)
    page.wait_for_selector("#rows tbody tr.row")
    # charts render: real SVG boxes with content
    assert page.locator("svg.chart").count() >= 10
    assert page.locator("svg.heatmap rect.cell").count() == 8  # 4 tasks × 2 repeats
    box = page.locator("svg.chart").first.bounding_box()
    assert box is not None and box["width"] > 200 and box["height"] > 100
    assert _rows(page) == 9
    page.screenshot(path=str(artifacts / "report-overview.png"))

    # clicking a rollout shows its transcript; the XSS payload is shown as text and never runs
    page.locator("#rows tbody tr.row", has_text="beta").nth(1).click()
    page.wait_for_selector("#detail .msg")
    assert page.locator("#detail .msg").count() == 5
    assert page.locator("#detail .msg.role-user pre").inner_text() == XSS
    assert page.evaluate("window.__xss") is None and page.locator("img[src=x]").count() == 0
    assert "lookup" in page.locator("#detail").inner_text() and "Verdict" in page.locator("#detail").inner_text()
    page.locator("#rollouts").scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "report-transcript.png"))

    # filters: outcome, task, reward range, reset
    page.select_option("#f-outcome", "failed")
    assert _rows(page) == 2
    assert all(t.startswith("failed") for t in page.locator("#rows tbody .badge").all_inner_texts())
    page.select_option("#f-outcome", "all")
    page.select_option("#f-task", "gamma")
    assert _rows(page) == 3
    page.select_option("#f-task", "")
    page.fill("#f-min", "0.2")
    page.fill("#f-max", "0.6")
    page.locator("#f-max").dispatch_event("change")
    assert _rows(page) == 2 and "2 matching" in page.inner_text("#page-info")
    page.click("#f-reset")
    assert _rows(page) == 9
    # the page's filter (viewer.js) and the server's (rows.Filter) agree on every outcome option
    index = JournalIndex(mixed_run / "rollouts.jsonl")
    index.advance()
    options = page.eval_on_selector_all("#f-outcome option", "os => os.map(o => o.value)")
    assert "failed:sandbox" in options
    for value in options:
        page.select_option("#f-outcome", value)
        assert _rows(page) == len(Filter(outcome=value).apply(index.rows)), value
    page.select_option("#f-outcome", "all")
    # a heatmap cell filters the list to its task
    page.locator('svg.heatmap rect.cell[data-task="delta"]').first.click()
    assert _rows(page) == 2 and page.input_value("#f-task") == "delta"

    # token view: chips coloured by logprob, loss mask, drift flag
    page.click("#f-reset")
    page.locator("#rows tbody tr.row").first.click()
    page.wait_for_selector("#detail .tok")
    assert page.locator("#detail .turn .tok").count() == 5
    assert page.locator("#detail .tokens b").count() == 0  # the "<b>!</b>" piece stays text
    page.locator("#detail details.sequence summary").click()
    assert page.locator("#detail details.sequence .tok.prompt").count() == 5  # mask 0: ids 1,2,3,20,21
    page.locator("#detail").evaluate("e => e.scrollTo(0, e.scrollHeight)")
    page.screenshot(path=str(artifacts / "report-tokens.png"))
    page.locator("#rows tbody tr.row", has_text="delta").nth(1).click()
    page.wait_for_selector("#detail .badge.drift")
    assert page.inner_text("#detail .badge.drift") == "drift at prompt token 2"

    # a deep link opens its rollout; nothing was fetched from anywhere but the file itself
    page.goto(url + "#rollout-3")
    expect(page.locator("#detail h3")).to_have_text(re.compile(r"^beta · repeat 1"))
    page.reload()
    page.wait_for_selector("#detail h3")
    assert page.locator("#detail h3").inner_text().startswith("beta · repeat 1")
    assert all(u.startswith("file://") for u in watched.urls), watched.urls
    assert watched.errors == []


def test_real_run_report(watched: Watched, real_run: Path, artifacts: Path) -> None:
    page = watched.page
    page.goto(write_report(real_run).as_uri())
    page.wait_for_selector("#rows tbody tr.row")
    assert page.locator("svg.chart").count() >= 10 and page.locator("svg.heatmap rect.cell").count() == 16
    page.screenshot(path=str(artifacts / "real-run-overview.png"), full_page=True)
    page.select_option("#f-outcome", "passed")
    page.locator("#rows tbody tr.row").first.click()
    page.wait_for_selector("#detail .msg.role-assistant")
    assert "mcqa" in page.inner_text("#detail") and page.locator("#detail .msg").count() >= 2
    assert watched.errors == []


def test_live_viewer_follows_the_run(watched: Watched, mixed_run: Path, tmp_path: Path, artifacts: Path) -> None:
    from palaestra.report.server import create_app

    run = tmp_path / "live"
    shutil.copytree(mixed_run, run)
    app = create_app(run, poll_s=0.1)
    try:
        with serve_app(app, lifespan="auto") as url:
            page = watched.page
            page.goto(f"{url}/")
            page.wait_for_selector("#rows tbody tr.row")
            assert _rows(page) == 9
            page.wait_for_selector("#overview svg.chart")
            page.locator("#rows tbody tr.row").first.click()
            page.wait_for_selector("#detail .msg")
            # the run appends: the open page picks the new rollout up by itself
            with (run / "rollouts.jsonl").open("ab") as fh:
                fh.write(orjson.dumps(rollout("epsilon", 0, reward=0.0)) + b"\n")
            expect(page.locator("#rows tbody tr.row")).to_have_count(10, timeout=10_000)
            expect(page.locator("#live-status")).to_contain_text("10 rollouts")
            page.select_option("#f-task", "epsilon")
            expect(page.locator("#rows tbody tr.row")).to_have_count(1)
            page.screenshot(path=str(artifacts / "live-viewer.png"))
            assert all(u.startswith(f"{url}/") for u in watched.urls), watched.urls
            assert watched.errors == []
    finally:
        app.state.viewer.close()
