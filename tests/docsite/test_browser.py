"""The built site in a real browser: headless Chromium opens it from a local HTTP server,
follows the navigation, searches, and screenshots the home and CLI pages in English and
Chinese; each page's text and each PNG are checked."""

from __future__ import annotations

import functools
import http.server
import json
import struct
import threading
import urllib.parse
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docsite.devtools import Browser, find_browser

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def site_url(built_site: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(built_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    executable = find_browser()
    if executable is None:
        pytest.skip("no chromium on PATH (GCURUN_CHROMIUM names another browser)")
    chromium = Browser(executable, tmp_path_factory.mktemp("chromium-profile"), timeout=90)
    try:
        yield chromium
    finally:
        chromium.close()


def png_summary(path: Path) -> tuple[int, int, int]:
    """Width, height and the number of distinct byte values of the image's pixel data (a
    blank page has a handful; a page of text and colours has many)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack("!II", data[16:24])
    pixels, offset = b"", 8
    while offset < len(data):
        length, kind = struct.unpack("!I4s", data[offset:offset + 8])
        if kind == b"IDAT":
            pixels += data[offset + 8:offset + 8 + length]
        offset += 12 + length
    return width, height, len(set(zlib.decompress(pixels)))


PAGES = [
    ("", "home-en", ["gcurun starts a data-parallel training job", "Getting started",
                     "CLI reference"]),
    ("cli/", "cli-en", ["CLI reference", "--num-proc", "Number of ranks", "gcurun check"]),
    ("zh/", "home-zh", ["gcurun 在加速器主机集群上启动数据并行训练作业", "快速上手", "命令行参考"]),
    ("zh/cli/", "cli-zh", ["命令行参考", "--num-proc", "Number of ranks", "gcurun check"]),
]


@pytest.mark.parametrize(("path", "name", "expected"), PAGES, ids=[p[1] for p in PAGES])
def test_page_screenshot(browser: Browser, site_url: str, tmp_path: Path, path: str,
                         name: str, expected: list[str]) -> None:
    browser.open(f"{site_url}/{path}")
    text = browser.text()
    for words in expected:
        assert words in text, f"{name}: {words!r} not on the page"
    shot = tmp_path / f"{name}.png"
    browser.screenshot(shot)
    width, height, values = png_summary(shot)
    assert (width, height) == (1280, 900)
    assert shot.stat().st_size > 20_000 and values > 50, (shot.stat().st_size, values)


def test_navigation_leads_to_the_pages(browser: Browser, site_url: str) -> None:
    browser.open(f"{site_url}/")
    links = browser.evaluate(
        "[...document.querySelectorAll('nav.md-nav--primary a.md-nav__link[href]')]"
        ".map(a => a.href)")
    assert f"{site_url}/getting-started/" in links and f"{site_url}/cli/" in links
    browser.evaluate("document.querySelector("
                     "'nav.md-nav--primary a.md-nav__link[href$=\"getting-started/\"]').click()")
    browser.wait_for("location.pathname === '/getting-started/' && "
                     "document.readyState === 'complete'", "the Getting started page")
    heading = browser.evaluate("document.querySelector('h1').innerText")
    assert heading.removesuffix("¶").strip() == "Getting started"
    # The language switch leads to the same page in Chinese.
    switch = browser.evaluate(
        "[...document.querySelectorAll('a[hreflang=\"zh\"]')].map(a => a.href)")
    assert f"{site_url}/zh/getting-started/" in switch


@pytest.mark.parametrize(("lang", "query", "target"),
                         [("", "liveness", "/launching/"),
                          ("zh/", "检查主机", "/zh/getting-started/")])
def test_search_finds_pages(browser: Browser, site_url: str, lang: str, query: str,
                            target: str) -> None:
    browser.open(f"{site_url}/{lang}?q={urllib.parse.quote(query)}")
    count = browser.wait_for(
        "document.querySelectorAll('.md-search-result__item').length", f"results for {query}")
    assert count > 0
    hrefs = browser.evaluate(
        "[...document.querySelectorAll('.md-search-result__item a')].map(a => a.href)")
    assert any(target in href for href in hrefs), json.dumps(hrefs)
