"""A real headless browser for the report tests: Debian's chromium driven by Playwright (PyPI),
pointed at the system's browser (Playwright's own builds are never downloaded). Skips where
either is missing, but fails under CI (``ALLSMI_REQUIRE_INTEGRATION``, set by .ci/run, which
installs chromium)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ..conftest import require_tool, unavailable

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

#: Elements wider than the page, unless a scrolling box within the page clips them (the
#: tables scroll sideways on a phone: that is not the page overflowing).
OVERFLOW = """() => {
  const vw = document.documentElement.clientWidth;
  const bad = [];
  if (document.documentElement.scrollWidth > vw)
    bad.push('page scrollWidth ' + document.documentElement.scrollWidth + ' > ' + vw);
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    if (r.left >= -0.5 && r.right <= vw + 0.5) continue;
    let a = el.parentElement, clipped = false;
    while (a && a !== document.body) {
      const ox = getComputedStyle(a).overflowX;
      if (ox === 'auto' || ox === 'scroll' || ox === 'hidden') {
        const ar = a.getBoundingClientRect();
        if (ar.left >= -0.5 && ar.right <= vw + 0.5) { clipped = true; break; }
      }
      a = a.parentElement;
    }
    if (!clipped) bad.push(el.tagName + ' ' + (el.id || el.getAttribute('class') || '') +
                           ' ' + r.left + '..' + r.right);
  }
  return bad.slice(0, 10);
}"""


def chromium() -> str:
    """The system's chromium, and Playwright importable (skip, or fail under CI)."""
    path = require_tool("chromium", "chromium")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        unavailable("playwright is not installed (pip install -e '.[test]')")
    return path


@dataclass
class Opened:
    """A page opened from a file, with what it said and asked for while loading."""

    page: Any
    console: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


def browser() -> Iterator[Any]:
    """One browser for a test module (a generator for a module-scoped fixture)."""
    executable = chromium()
    from playwright.sync_api import sync_playwright
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True,
                                              args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


def open_page(launched: Any, path: Path, width: int = 1280, height: int = 800,
              dark: bool = False) -> Opened:
    """``path`` opened in a new page of ``width`` x ``height`` CSS pixels."""
    page = launched.new_page(viewport={"width": width, "height": height},
                             color_scheme="dark" if dark else "light")
    opened = Opened(page)
    page.on("console", lambda m: opened.console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: opened.errors.append(str(e)))
    page.on("request", lambda r: opened.requests.append(r.url))
    page.goto(path.as_uri(), wait_until="load")
    return opened


def table(page: Any, table_id: str) -> list[list[str]]:
    """The rows of a table (body, then foot) as the cells' texts."""
    return page.evaluate("""(id) => Array.from(document.querySelectorAll(
        '#' + id + ' tbody tr, #' + id + ' tfoot tr')).map(
        tr => Array.from(tr.cells).map(td => td.textContent))""", table_id)


def header(page: Any, table_id: str) -> list[str]:
    return page.evaluate("""(id) => Array.from(document.querySelectorAll(
        '#' + id + ' thead th')).map(th => th.textContent)""", table_id)


def marks(page: Any, chart_id: str) -> int:
    """Bars and points drawn in a chart's SVG."""
    return page.evaluate("""(id) => document.querySelectorAll(
        '#chart-' + id + ' svg .plot .series .bar rect, #chart-' + id +
        ' svg .plot .series .dots circle').length""", chart_id)
