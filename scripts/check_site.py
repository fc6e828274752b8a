"""Check the built site in a real browser with the network cut.

    .venv/bin/python scripts/check_site.py _build/html                      (make browser)
    .venv/bin/python scripts/check_site.py _build/html --readme-images docs/images

Debian's Chromium, driven headless by Playwright, loads the site from a local HTTP server on
127.0.0.1. When run as root where `unshare` exists, the script re-runs itself in a new network
namespace (`unshare -n`) with only loopback up, so nothing can leave even by accident; in any
case every request to another host is blocked and reported. It checks:

- front page and every chapter page: MathJax typeset the math (no raw TeX left), no failed or
  off-site request, no script error; chapter pages show at least one figure (<img> or <svg>);
- the question index: it lists every question of book/questions.yml, and each link's anchor
  exists in the target page;
- search: a word from the front page finds it, a made-up word finds nothing.

Screenshots of the front page and chapter 1 go to _build/screenshots/. Exits non-zero with
the list of problems if anything fails.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

__all__ = ["SiteReport", "check_site", "main"]

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
# Playwright adds --headless itself and takes the profile folder as user_data_dir.
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
UNSHARED_ENV = "CHECK_SITE_IN_NETNS"
SEARCH_MISS = "qzxjvwkplorbtemu"  # a word no page contains: search must come back empty
MATHJAX_TIMEOUT_MS = 15_000


@dataclass
class SiteReport:
    """What the browser saw, page by page, and everything that went wrong."""

    pages: dict[str, str] = field(default_factory=dict)  # page -> one-line summary
    problems: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every URL the browser asked for
    network: str = "not cut"
    screenshots: list[Path] = field(default_factory=list)


def _network_cut_in_this_process() -> bool:
    """True when no route leaves the machine (what `unshare -n` gives us)."""
    try:
        with socket.create_connection(("192.0.2.1", 80), timeout=0.5):  # TEST-NET-1, never routed
            return False
    except OSError as exc:
        return "unreachable" in str(exc).lower()


def _reexec_unshared(argv: list[str]) -> int | None:
    """Run this script again inside a fresh network namespace; None if that is not possible here."""
    if os.environ.get(UNSHARED_ENV) or os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        return None
    inner = 'ip link set lo up && exec "$0" "$@"'
    cmd = ["unshare", "-n", "--", "sh", "-c", inner, sys.executable, str(Path(__file__).resolve()), *argv]
    probe = subprocess.run(["unshare", "-n", "--", "true"], capture_output=True)
    if probe.returncode != 0:  # e.g. inside a container without CAP_SYS_ADMIN
        return None
    return subprocess.call(cmd, env={**os.environ, UNSHARED_ENV: "1"})


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


def _serve(site: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


# Text of the page's article with code, rendered math and scripts removed: any TeX delimiter
# still there is math MathJax did not typeset.
_ARTICLE_TEXT_JS = """() => {
  const root = document.querySelector('article') || document.querySelector('main') || document.body;
  const copy = root.cloneNode(true);
  copy.querySelectorAll('pre, code, mjx-container, script, style, .cell_output').forEach(e => e.remove());
  return copy.innerText;
}"""
_RAW_TEX = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$\$|\\begin\{")


def _wait_for_mathjax(page) -> bool:
    """Wait until MathJax has loaded and finished its first typeset pass."""
    try:
        # Sphinx loads MathJax with `defer`, so by the load event it has run, or failed to load.
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=2_000)
        page.wait_for_function("() => MathJax.startup.promise.then(() => true)", timeout=MATHJAX_TIMEOUT_MS)
        # MathJax's CHTML fonts load after typesetting; a screenshot before then shows boxes.
        page.evaluate("() => document.fonts.ready.then(() => true)")
        return True
    except Exception:  # noqa: BLE001 - Playwright's timeout type varies by version; the report says what failed
        return False


def _check_content_page(page, url: str, name: str, report: SiteReport, needs_figure: bool) -> None:
    page.goto(url, wait_until="load")
    typeset = _wait_for_mathjax(page)
    n_math = page.locator("mjx-container").count()
    raw = _RAW_TEX.findall(page.evaluate(_ARTICLE_TEXT_JS))
    figures = page.evaluate(
        """() => {
          const imgs = [...document.querySelectorAll('article img, article .cell_output svg')];
          const broken = imgs.filter(e => e.tagName === 'IMG' && !(e.complete && e.naturalWidth > 0));
          return {count: imgs.length, broken: broken.map(e => e.getAttribute('src'))};
        }"""
    )
    if not typeset:
        report.problems.append(f"{name}: MathJax did not load or did not finish")
    if n_math == 0:
        report.problems.append(f"{name}: no typeset math (no mjx-container)")
    if raw:
        report.problems.append(f"{name}: raw TeX left in the text: {sorted(set(raw))}")
    if needs_figure and figures["count"] == 0:
        report.problems.append(f"{name}: no figure (<img> or output <svg>)")
    if figures["broken"]:
        report.problems.append(f"{name}: images that did not load: {figures['broken']}")
    report.pages[name] = f"{n_math} math, {figures['count']} figures"
    page.wait_for_load_state("networkidle")


def _page_ids(page, url: str) -> set[str]:
    page.goto(url, wait_until="domcontentloaded")
    return set(page.evaluate("() => [...document.querySelectorAll('[id]')].map(e => e.id)"))


def _check_question_index(page, base: str, report: SiteReport) -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    from build_site import QUESTIONS_YML, load_questions

    questions = load_questions(REPO / QUESTIONS_YML)
    url = urljoin(base, "book/questions.html")
    page.goto(url, wait_until="load")
    items = page.evaluate(
        """() => [...document.querySelectorAll('article ol > li')].map(li => {
             const a = li.querySelector('a');
             return {text: li.innerText, href: a ? a.href : null};
           })"""
    )
    if len(items) != len(questions):
        report.problems.append(f"questions: {len(items)} listed, book/questions.yml has {len(questions)}")
    ids_cache: dict[str, set[str]] = {}
    linked = coming = 0
    for q, item in zip(questions, items):
        if q.text[:40] not in item["text"]:
            report.problems.append(f"questions: item {q.number} reads {item['text'][:60]!r}, expected Q{q.number}")
        if item["href"] is None:
            if "coming" not in item["text"]:
                report.problems.append(f"questions: Q{q.number} has neither a link nor 'coming'")
            coming += 1
            continue
        target, anchor = urldefrag(item["href"])
        if not anchor:
            report.problems.append(f"questions: Q{q.number} links to {target} without a section anchor")
            continue
        if target not in ids_cache:
            ids_cache[target] = _page_ids(page, target)
        if anchor not in ids_cache[target]:
            report.problems.append(f"questions: Q{q.number} links to #{anchor}, which {target} does not have")
        linked += 1
    report.pages["book/questions.html"] = f"{len(items)} questions, {linked} linked, {coming} coming"


def _search_hits(page, base: str, word: str) -> list[str]:
    page.goto(urljoin(base, f"search.html?q={word}"), wait_until="load")
    # Sphinx's searchtools writes a summary paragraph once the search is done.
    page.wait_for_selector("#search-results .search-summary, #search-results p", timeout=15_000)
    return page.evaluate("() => [...document.querySelectorAll('#search-results ul.search li a')].map(a => a.href)")


def _check_search(page, base: str, report: SiteReport) -> None:
    word = "Jacobian"  # on the front page (book/intro.md)
    hits = _search_hits(page, base, word)
    if not any("intro.html" in h for h in hits):
        report.problems.append(f"search: '{word}' did not find the front page (hits: {hits})")
    misses = _search_hits(page, base, SEARCH_MISS)
    if misses:
        report.problems.append(f"search: a made-up word found {misses}: the search is not filtering")
    report.pages["search.html"] = f"'{word}': {len(hits)} hits; made-up word: {len(misses)} hits"


def check_site(site: Path, shots: Path) -> SiteReport:
    """Drive Chromium over the built site and collect a report (does not raise on findings)."""
    from playwright.sync_api import sync_playwright

    if not (site / "index.html").is_file():
        raise ValueError(f"{site} has no index.html; build the site first (make site)")
    report = SiteReport(network="cut (unshare -n, loopback only)" if _network_cut_in_this_process() else "not cut")
    server, base = _serve(site)
    origin = urlparse(base).netloc
    chapters = sorted(p.relative_to(site).as_posix() for p in (site / "notebooks").glob("*.html"))
    if not chapters:
        report.problems.append("no chapter pages under notebooks/")
    shots.mkdir(parents=True, exist_ok=True)

    def on_route(route) -> None:
        if urlparse(route.request.url).netloc == origin:
            route.continue_()
        else:
            report.problems.append(f"request to another host blocked: {route.request.url}")
            route.abort()

    try:
        with tempfile.TemporaryDirectory(prefix="check-site-profile-") as profile, sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
                viewport={"width": 1200, "height": 800}, service_workers="block",
            )  # fmt: skip
            context.route("**/*", on_route)
            context.on("request", lambda r: report.requests.append(r.url))
            def on_failed(request) -> None:
                if urlparse(request.url).netloc != origin:
                    return  # blocked by on_route, already reported
                served = site / urlparse(request.url).path.lstrip("/")
                if request.failure == "net::ERR_ABORTED" and served.is_file():
                    return  # a late font or image cancelled by the next navigation; the file is there
                report.problems.append(f"request failed: {request.url} ({request.failure})")

            context.on("requestfailed", on_failed)
            context.on(
                "response",
                lambda r: report.problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None,
            )
            page = context.pages[0] if context.pages else context.new_page()
            page.on("pageerror", lambda e: report.problems.append(f"script error on {page.url}: {e}"))

            # The site's index.html redirects to the front page; follow it as a reader would.
            page.goto(base, wait_until="load")
            page.wait_for_url(re.compile(r".*/intro\.html$"), timeout=10_000)
            front = page.url
            _check_content_page(page, front, "front page", report, needs_figure=False)
            report.screenshots.append(shots / "front.png")
            page.screenshot(path=str(shots / "front.png"))
            for rel in chapters:
                _check_content_page(page, urljoin(base, rel), rel, report, needs_figure=True)
                if rel == chapters[0]:
                    report.screenshots.append(shots / "ch01.png")
                    page.screenshot(path=str(shots / "ch01.png"))
                    # Centre the first real figure (not an icon) for a picture of the chapter at work.
                    found = page.evaluate(
                        """() => {
                          const fig = [...document.querySelectorAll('article .cell_output img, article .cell_output svg')]
                            .find(e => e.getBoundingClientRect().height > 120);
                          if (fig) fig.scrollIntoView({block: 'center'});
                          return Boolean(fig);
                        }"""
                    )
                    if found:
                        report.screenshots.append(shots / "ch01-figure.png")
                        page.screenshot(path=str(shots / "ch01-figure.png"))
            _check_question_index(page, base, report)
            _check_search(page, base, report)
            context.close()
    finally:
        server.shutdown()
        server.server_close()
    return report


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built site, e.g. _build/html")
    parser.add_argument("--screenshots", type=Path, default=None, help="where to save PNGs (default: <site>/../screenshots)")
    parser.add_argument("--readme-images", type=Path, default=None, help="also copy the PNGs here (e.g. docs/images)")
    parser.add_argument("--no-unshare", action="store_true", help="do not re-run inside `unshare -n`")
    args = parser.parse_args(argv)

    if not args.no_unshare:
        rc = _reexec_unshared(argv)
        if rc is not None:
            return rc
    start = time.perf_counter()
    site = args.site.resolve()
    shots = (args.screenshots or site.parent / "screenshots").resolve()
    try:
        report = check_site(site, shots)
    except ValueError as exc:
        print(f"check_site: {exc}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - start

    print(f"check_site: {site}  (network {report.network})")
    for name, summary in report.pages.items():
        print(f"  {name:40s} {summary}")
    local = sum(1 for u in report.requests if urlparse(u).hostname == "127.0.0.1")
    print(f"  requests: {len(report.requests)} ({local} to 127.0.0.1, {len(report.requests) - local} elsewhere)")
    for shot in report.screenshots:
        print(f"  screenshot: {shot} ({shot.stat().st_size // 1024} KB)")
        if args.readme_images:
            args.readme_images.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, args.readme_images / f"site-{shot.name}")
    print(f"  browser check: {seconds:.1f} s")
    if report.problems:
        print(f"check_site: {len(report.problems)} problem(s):", file=sys.stderr)
        for p in report.problems:
            print(f"  - {p}", file=sys.stderr)
        return 1
    print("check_site: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
