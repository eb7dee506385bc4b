"""The HTML report in a real browser (headless Chromium through selenium and chromedriver).

Skipped, with the reason, when Chromium, chromedriver or selenium is missing (Debian:
``apt-get install chromium chromium-driver``; ``pip install selenium``). Checks what a reader
sees at 1,400 px: no console errors, every figure and timeline drawn, no table wider than the
page, units in their own case, and that a scripted drag and a mouse wheel zoom the timeline.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

selenium = pytest.importorskip("selenium", reason="selenium is not installed (pip install "
                                                   "selenium)")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.actions.wheel_input import ScrollOrigin  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="no Chromium/chromedriver (apt-get install chromium chromium-driver)")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from rdmascope.analysis.report import write_report

    out = tmp_path_factory.mktemp("report")
    return write_report([FIXTURES / "sim-p2-200", FIXTURES / "sim-p2-emulated100"], None, out)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = tmp_path_factory.mktemp("chromium-profile")
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update",
              "--disable-sync", f"--user-data-dir={profile}", "--window-size=1400,1000"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(DRIVER), options=opts)
    d.set_page_load_timeout(120)
    yield d
    d.quit()


def _range(d, div_id):
    return d.execute_script(
        "return document.getElementById(arguments[0])._fullLayout.xaxis.range.slice()", div_id)


def test_report_in_chromium(report, browser, tmp_path):
    d = browser
    d.get(report.as_uri())
    time.sleep(1.0)
    errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
    # every figure is an image that loaded and takes room on the page
    imgs = d.execute_script("return Array.from(document.images).map(i => "
                            "[i.alt, i.complete, i.naturalWidth, i.getBoundingClientRect().width])")
    assert len(imgs) >= 8
    for alt, complete, natural, shown in imgs:
        assert complete and natural > 0 and shown > 300, alt
    # every timeline was drawn by plotly (its SVG holds the trace)
    plots = d.execute_script("return Array.from(document.querySelectorAll('.js-plotly-plot'))"
                             ".map(p => [p.id, p.querySelectorAll('.scatterlayer .trace')"
                             ".length, p.getBoundingClientRect().height])")
    assert len(plots) == 2 and all(n >= 1 and h > 200 for _, n, h in plots), plots
    # no table wider than its place at 1,400 px (nothing behind a scrollbar), nor the page
    widths = d.execute_script("return Array.from(document.querySelectorAll('.tablewrap'))"
                              ".map(w => [w.scrollWidth, w.clientWidth])")
    assert widths and all(sw <= cw for sw, cw in widths), widths
    assert d.execute_script("return document.documentElement.scrollWidth <= "
                            "document.documentElement.clientWidth")
    # units keep their case: no CSS uppercase anywhere a card shows a label
    text = d.execute_script("return document.body.innerText")
    assert "Gb/s" in text and "GB/S" not in text
    assert d.execute_script("return Array.from(document.querySelectorAll('.card .label'))"
                            ".every(e => getComputedStyle(e).textTransform === 'none')")
    # the 1 ms note is said once; every 1 ms peak links to it
    assert text.count("A single 1 ms value carries about") == 1
    links = d.execute_script("return Array.from(document.querySelectorAll('a.onems'))"
                             ".map(a => a.getAttribute('href'))")
    assert len(links) >= 6 and set(links) == {"#one-ms-note"}
    d.save_screenshot(str(tmp_path / "top.png"))

    # zoom: a drag across the first timeline narrows its range, then the wheel narrows it more
    pid = plots[0][0]
    full = _range(d, pid)
    drag = d.find_element("css selector", f"#{pid} .nsewdrag")
    d.execute_script("arguments[0].scrollIntoView({block: 'center'})", drag)
    w = drag.size["width"]
    ActionChains(d).move_to_element_with_offset(drag, -w // 4, 0).click_and_hold() \
        .move_by_offset(w // 8, 0).release().perform()
    time.sleep(0.5)
    dragged = _range(d, pid)
    assert dragged[1] - dragged[0] < 0.25 * (full[1] - full[0]), (full, dragged)
    ActionChains(d).scroll_from_origin(ScrollOrigin.from_element(drag), 0, -600).perform()
    time.sleep(0.5)
    wheeled = _range(d, pid)
    assert wheeled[1] - wheeled[0] < dragged[1] - dragged[0], (dragged, wheeled)
    d.save_screenshot(str(tmp_path / "zoomed.png"))
    errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
