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


#: Line breaks a card must never have: inside a number, or between a number and its unit.
_WRAPS_JS = r"""
const units = /^(%|s|ms|µs|us|ns|Gb\/s|GB\/s|MB\/s|Gb|GB|MB|kB|B)(?![\w\/])/;
const bad = [];
for (const card of document.querySelectorAll('.card')) {
  const chars = [];
  const walk = document.createTreeWalker(card, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    for (let i = 0; i < n.data.length; i++) {
      const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + 1);
      const rect = r.getClientRects()[0];
      chars.push([n.data[i], rect ? rect.top : null]);
    }
  }
  const text = chars.map(c => c[0]).join('');
  let prevTop = null, prevIdx = -1;
  chars.forEach(([ch, top], i) => {
    if (top === null || /\s/.test(ch)) return;
    if (prevTop !== null && top > prevTop + 2) {
      const before = text.slice(0, i).trimEnd(), after = text.slice(i);
      const b = before.slice(-1);
      if ((/[\d.,±+−–-]/.test(b) && /^[\d%]/.test(after))
          || (/\d/.test(b) && units.test(after)))
        bad.push(before.slice(-20) + ' | ' + after.slice(0, 20));
    }
    prevTop = top; prevIdx = i;
  });
}
return bad;
"""

#: Elements whose content runs past their own box (scrolling boxes and the figures' SVG aside).
_OVERFLOW_JS = r"""
const out = [];
for (const e of document.querySelectorAll('main *, header *, nav *')) {
  if (e.closest('.tablewrap, .js-plotly-plot, svg')) continue;
  const cs = getComputedStyle(e);
  if (cs.display === 'inline' || cs.display === 'none') continue;
  if (['auto', 'scroll', 'hidden'].includes(cs.overflowX)) continue;
  if (e.scrollWidth > e.clientWidth + 1)
    out.push([e.tagName + '.' + e.className, e.scrollWidth, e.clientWidth,
              e.textContent.trim().slice(0, 60)]);
}
return out;
"""

#: Pairs of text labels of a drawn timeline whose boxes overlap.
_LABELS_JS = r"""
const out = [];
for (const p of document.querySelectorAll('.js-plotly-plot')) {
  const els = Array.from(p.querySelectorAll(
      '.annotation-text, .legendtext, .gtitle, .g-xtitle text, .g-ytitle text, '
      + '.xtick text, .ytick text')).filter(e => e.textContent.trim());
  const boxes = els.map(e => [e.textContent.trim(), e.getBoundingClientRect(),
                              !!e.closest('.xtick, .ytick')]);
  for (let i = 0; i < boxes.length; i++)
    for (let j = i + 1; j < boxes.length; j++) {
      const [ta, a, ka] = boxes[i], [tb, b, kb] = boxes[j];
      if (ka && kb) continue;  // the two axes' "0" meet at the origin, by plotly's design
      const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
      const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
      if (w > 1 && h > 1) out.push([p.id, ta, tb]);
    }
}
return out;
"""


@pytest.mark.parametrize("width", [1400, 900])
def test_report_layout_at_1400_and_900_px(report, browser, tmp_path, width):
    """What a reader sees at 1,400 px and at 900 px: no card wraps inside a number or between
    a number and its unit ("+14.2" | "%" did), nothing runs past its box (the 1 ms link ran 9 px
    past its card), a table wider than the page scrolls inside its own box (never the page; at
    1,400 px none needs to), no two labels of a timeline overlap, and the comparison's setup is
    short points, not one 1,400-character paragraph."""
    d = browser
    d.set_window_size(width, 1000)
    try:
        d.get(report.as_uri())
        time.sleep(1.0)
        assert d.execute_script(_WRAPS_JS) == []
        assert d.execute_script(_OVERFLOW_JS) == []
        assert d.execute_script("return document.documentElement.scrollWidth <= "
                                "document.documentElement.clientWidth")
        wraps = d.execute_script(
            "return Array.from(document.querySelectorAll('.tablewrap')).map(w => "
            "[w.scrollWidth, w.clientWidth, getComputedStyle(w).overflowX])")
        assert wraps and all(ox == "auto" for _, _, ox in wraps)
        if width >= 1400:
            assert all(sw <= cw for sw, cw, _ in wraps), wraps
        assert d.execute_script(_LABELS_JS) == []
        notes = d.execute_script("return Array.from(document.querySelectorAll('p.note, "
                                 "figcaption')).map(p => p.textContent.length)")
        assert max(notes) < 700, max(notes)
        points = d.execute_script("return Array.from(document.querySelectorAll('ul.items li'))"
                                  ".map(li => li.textContent)")
        assert any(p.startswith("Setup:") for p in points) and len(points) >= 5, points
        d.save_screenshot(str(tmp_path / f"layout-{width}.png"))
    finally:
        d.set_window_size(1400, 1000)
