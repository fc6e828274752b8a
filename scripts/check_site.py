"""Check the built site in a real browser with the network cut.

    .venv/bin/python scripts/check_site.py _build/html                      (make browser)
    .venv/bin/python scripts/check_site.py _build/html --readme-images docs/images

Debian's Chromium, driven headless by Playwright, loads the site from a local HTTP server on
127.0.0.1. When run as root where `unshare` exists, the script re-runs itself in a new network
namespace (`unshare -n`) with only loopback up, so nothing can leave even by accident; in any
case every request to another host is blocked and reported. It checks:

- every link of every page reaches a page and anchor that exist (build_site.broken_links);
- front page, every chapter page and every question page: MathJax typeset the math (no raw TeX
  left), no failed or off-site request, no script error;
- every question page ("notebooks/q<n>.html"), at a 1400 px window: its title is "Q<n>. ...";
  no figure shown at less than 60% of its natural width; every image has alt text that is not
  a file name or TeX; the question holds at least two callouts; code lines that scroll
  sideways are counted (reported, not failed);
- every chapter page: hidden answers are there and closed (recall-quiz <details>, solution
  cells collapsed, check cells' outputs collapsed); it lists its questions, each linked;
- at a 390 px (phone) window, the navigation button opens the sidebar, no code or output
  block scrolls sideways (they wrap), and the page itself is no wider than the screen; no
  figure shows below 65% of its natural width (tests/test_notebook_hygiene.py holds the
  stored figures to the same width, so an author hears of it before a build);
- the question index: it lists every question of book/questions.yml, each linked to that
  question's own page, and questions still to come are greyed out;
- the revision sheet lists every question whose chapter is written, has no raw `$` or TeX
  command left in its text, and is no wider than a 390 px screen;
- the drill page, offline: a card shows, "reveal" shows its short answer, "next follow-up" its
  first follow-up, a mark is stored in local storage and is still there after a reload;
- the page "What changed between torch versions" has a section per version fact of
  autogradviz.versions, and every link on it that stays on the site reaches a page and anchor
  that exist (links to other hosts are counted; the network is cut);
- search: a word from the front page finds it, a made-up word finds nothing, a word found
  only in the body of a chapter's Q3 (or its last question) finds that question's page first,
  and on the full book every term of SEARCH_TERMS finds the page of the question that
  explains it first.

Screenshots at 1400 px (desktop) and 390 px (phone) of the front page, chapter 1, a question
page, the drill and the revision sheet go to _build/screenshots/. Exits non-zero with the list of problems if anything
fails.
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
from urllib.parse import quote, urldefrag, urljoin, urlparse

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
DESKTOP = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}
MIN_FIGURE_SCALE = 0.6  # a figure shown smaller than this share of its natural width is unreadable
PHONE_FIGURE_SCALE = 0.65  # on a phone: below this, 9 pt text in a figure is under 9 px
PHONE_FIGURE_PX = 350  # the width a 390 px phone gives a figure (autogradviz.style)
MAX_FIGURE_PX = int(PHONE_FIGURE_PX / PHONE_FIGURE_SCALE)  # 538: the widest figure that passes
# Terms from the questions' own vocabulary and the question that explains each: searching
# for the term must give that question's page first (checked on the full book only).
SEARCH_TERMS = {
    "zero_grad": 2, "eval": 3, "inference_mode": 4, "stride": 5, "contiguous": 5, "broadcasting": 6,
    "AccumulateGrad": 2, "dispatcher": 8, "make_fx": 9, "leaf": 11, "retain_graph": 12, "version counter": 13,
    "forward mode": 14, "set_detect_anomaly": 16, "autograd.Function": 17, "straight-through": 18,
    "register_hook": 19, "create_graph": 20, "vmap": 21, "log-sum-exp": 22, "deterministic": 23,
    "Kaiming": 24, "RMSNorm": 25, "clip_grad_norm_": 26, "label smoothing": 27,
    "BCEWithLogitsLoss": 28, "focal loss": 29, "distillation": 30, "InfoNCE": 31,
    "checkpointing": 34, "GradScaler": 35, "bf16": 35, "AdamW": 36, "memory_reserved": 37,
    "torch.compile": 38, "memory-bound": 39, "FlashAttention": 40, "DataLoader": 41,
    "DataParallel": 42, "ring all-reduce": 43, "fully_shard": 46, "tensor parallel": 47,
    "pipeline bubble": 48, "NCCL_DEBUG": 50, "define-by-run": 1, "gradient accumulation": 44,
    "ZeRO stages": 45, "FP8": 35, "hooks": 19, "torch.func": 21,
}
MIN_CALLOUTS = 2  # per question: the short answer and the common wrong answer


@dataclass
class SiteReport:
    """What the browser saw, page by page, and everything that went wrong."""

    pages: dict[str, str] = field(default_factory=dict)  # page -> one-line summary
    problems: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every URL the browser asked for
    network: str = "not cut"
    screenshots: list[Path] = field(default_factory=list)
    small_phone_figures: list[tuple[str, str, float]] = field(default_factory=list)  # page, image, scale at 390 px
    search_terms: dict[str, str] = field(default_factory=dict)  # term -> the first result's page


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


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        # The browser moving on to the next page cancels a font or image still in flight:
        # the broken pipe that leaves is not a problem of the site (on_failed judges those).
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


def _serve(site: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = _QuietServer(("127.0.0.1", 0), handler)
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


def _check_content_page(page, url: str, name: str, report: SiteReport, needs_figure: bool, needs_math: bool = True) -> None:
    page.goto(url, wait_until="load")
    # Sphinx links MathJax only on pages with math; a page without any has nothing to wait for.
    has_mathjax = page.evaluate("() => !!document.querySelector('script[src*=mathjax]')")
    typeset = _wait_for_mathjax(page) if (has_mathjax or needs_math) else True
    n_math = page.locator("mjx-container").count()
    raw = _RAW_TEX.findall(page.evaluate(_ARTICLE_TEXT_JS))
    figures = page.evaluate(
        """() => {
          // Output SVGs, not the copy-button icons sphinx-copybutton puts on printed output.
          const imgs = [...document.querySelectorAll('article img, article .cell_output svg')]
            .filter(e => !e.closest('button, .copybtn'));
          const broken = imgs.filter(e => e.tagName === 'IMG' && !(e.complete && e.naturalWidth > 0));
          return {count: imgs.length, broken: broken.map(e => e.getAttribute('src'))};
        }"""
    )
    if not typeset:
        report.problems.append(f"{name}: MathJax did not load or did not finish")
    if n_math == 0 and needs_math:
        report.problems.append(f"{name}: no typeset math (no mjx-container)")
    if raw:
        report.problems.append(f"{name}: raw TeX left in the text: {sorted(set(raw))}")
    if needs_figure and figures["count"] == 0:
        report.problems.append(f"{name}: no figure (<img> or output <svg>)")
    if figures["broken"]:
        report.problems.append(f"{name}: images that did not load: {figures['broken']}")
    report.pages[name] = f"{n_math} math, {figures['count']} figures"
    # No wait for the network to go quiet: the context's route sees every request when it is
    # made, so a late request to another host is caught on whichever page is open by then.


_QUESTION_JS = r"""(minScale) => {
  const art = document.querySelector('article');
  const imgs = [...art.querySelectorAll('.cell_output img')].filter(i => i.naturalWidth > 0);
  const small = imgs.map(i => ({src: i.getAttribute('src'), shown: Math.round(i.getBoundingClientRect().width),
                                natural: i.naturalWidth}))
                    .filter(f => f.shown < minScale * f.natural);
  const badAlt = [...art.querySelectorAll('img')].map(i => i.getAttribute('alt') || '')
                    .filter(a => !a.trim() || /_images\/|\.(png|svg|jpe?g)$|[0-9a-f]{32}|\\[a-zA-Z]+|\$/i.test(a));
  const h1 = art.querySelector('h1');
  const questions = [...art.querySelectorAll('section')]
    .map(sec => ({sec, h: sec.querySelector(':scope > h1, :scope > h2')}))
    .filter(x => x.h && /^\s*Q\d+\./.test(x.h.textContent))
    .map(x => ({q: x.h.textContent.match(/Q(\d+)\./)[1], callouts: x.sec.querySelectorAll('div.admonition').length}));
  const pres = [...art.querySelectorAll('.cell_input pre, div.highlight pre')];
  const wide = pres.filter(p => p.scrollWidth > p.clientWidth + 1).length;
  return {small, badAlt, questions, title: document.title, h1: h1 ? h1.textContent.trim() : '',
          figures: imgs.length, wideCode: wide, codeBlocks: pres.length};
}"""

_CHAPTER_JS = r"""() => {
  const art = document.querySelector('article');
  const quiz = [...art.querySelectorAll('details')].filter(d => !d.closest('.cell'));
  const solutions = [...art.querySelectorAll('.cell.tag_solution')];
  const collapsed = solutions.filter(c => { const d = c.querySelector('details'); return d && !d.open
                                            && d.contains(c.querySelector('.cell_input')); });
  const checks = [...art.querySelectorAll('.cell.tag_check')].filter(c => c.querySelector('.cell_output'));
  const checksHidden = checks.filter(c => { const o = c.querySelector('.cell_output'); const d = o.closest('details');
                                            return d && !d.open; });
  const listed = [...art.querySelectorAll('a[href]')].map(a => (a.getAttribute('href').match(/(?:^|\/)q(\d+)\.html$/) || [])[1])
    .filter(Boolean).map(Number);
  return {quiz: quiz.length, quizOpen: quiz.filter(d => d.open).length, solutions: solutions.length,
          collapsed: collapsed.length, checks: checks.length, checksHidden: checksHidden.length, listed};
}"""


def _check_question_layout(page, name: str, number: int, report: SiteReport) -> str:
    """A question page at desktop width: its title, figures, alt text and callouts."""
    page.wait_for_function(
        "() => [...document.querySelectorAll('article .cell_output img')].every(i => i.complete)", timeout=10_000
    )
    r = page.evaluate(_QUESTION_JS, MIN_FIGURE_SCALE)
    if not (r["h1"].startswith(f"Q{number}.") and r["title"].startswith(f"Q{number}.")):
        report.problems.append(f"{name}: the page title is {r['title'][:60]!r}; it should start 'Q{number}.'")
    for f in r["small"]:
        report.problems.append(
            f"{name}: figure {f['src']} shown at {f['shown']} px of its {f['natural']} px "
            f"(< {MIN_FIGURE_SCALE:.0%}) at a {DESKTOP['width']} px window"
        )
    if r["badAlt"]:
        report.problems.append(
            f"{name}: {len(r['badAlt'])} image(s) without meaningful alt text (e.g. {r['badAlt'][0]!r}); "
            "put a '*Figure: ...*' line in the markdown cell after the figure"
        )
    if not r["questions"]:
        report.problems.append(f"{name}: no 'Q<n>.' question section")
    for q in r["questions"]:
        if q["callouts"] < MIN_CALLOUTS:
            report.problems.append(
                f"{name}: Q{q['q']} has {q['callouts']} callout(s); expected the short answer and the "
                "common wrong answer (docs/chapter-markup.md)"
            )
    return f"{r['figures']} figures, {r['wideCode']}/{r['codeBlocks']} code blocks scroll sideways"


def _check_chapter_layout(page, name: str, questions: list[int], report: SiteReport) -> str:
    """A chapter page: its question list, hidden quiz answers, solutions and check outputs."""
    r = page.evaluate(_CHAPTER_JS)
    missing = [n for n in questions if n not in r["listed"]]
    if missing:
        report.problems.append(f"{name}: does not link its questions {['Q%d' % n for n in missing]}")
    if r["quiz"] == 0:
        report.problems.append(f"{name}: no hidden recall-quiz answers (<details>)")
    if r["quizOpen"]:
        report.problems.append(f"{name}: {r['quizOpen']} quiz answer(s) open by default")
    if r["solutions"] == 0:
        report.problems.append(f"{name}: no solution cell (tagged 'solution')")
    elif r["collapsed"] != r["solutions"]:
        report.problems.append(
            f"{name}: {r['solutions'] - r['collapsed']} of {r['solutions']} solution cells are not collapsed "
            "(tag them 'hide-input')"
        )
    if r["checksHidden"] != r["checks"]:
        report.problems.append(
            f"{name}: {r['checks'] - r['checksHidden']} of {r['checks']} check cells show their output "
            "(the build collapses a 'check' cell's output)"
        )
    return (
        f"{len(questions) - len(missing)}/{len(questions)} questions listed, {r['quiz']} quiz answers, {r['collapsed']}/{r['solutions']} "
        f"solutions hidden, {r['checksHidden']}/{r['checks']} check outputs collapsed"
    )


def _check_phone_navigation(page, url: str, name: str, report: SiteReport, loaded: bool = False) -> bool:
    """At phone width the primary sidebar is off-screen until the menu button opens it
    (``loaded``: the page is already open at phone width, as _check_phone_layout leaves it)."""
    if not loaded:
        page.set_viewport_size(PHONE)
        page.goto(url, wait_until="load")
    visible = """() => [...document.querySelectorAll('.bd-sidebar-primary')].some(e => {
        const r = e.getBoundingClientRect();
        return e.checkVisibility() && r.width > 100 && r.left >= 0 && r.left < window.innerWidth; })"""
    opened = False
    try:
        if page.evaluate(visible):
            report.problems.append(f"{name}: at {PHONE['width']} px the sidebar shows before the menu is opened")
        page.locator("button.primary-toggle:visible").first.click(timeout=3_000)
        page.wait_for_function(visible, timeout=3_000)
        opened = True
    except Exception:  # noqa: BLE001 - Playwright's timeout type varies by version; the report says what failed
        report.problems.append(f"{name}: at {PHONE['width']} px the navigation button does not open the sidebar")
    page.keyboard.press("Escape")
    page.set_viewport_size(DESKTOP)
    return opened


_PHONE_JS = r"""(minScale) => {
  const art = document.querySelector('article');
  const pres = [...art.querySelectorAll('pre')];
  const imgs = [...art.querySelectorAll('.cell_output img')].filter(i => i.naturalWidth > 0);
  const scales = imgs.map(i => i.getBoundingClientRect().width / i.naturalWidth);
  const small = imgs.map((i, k) => ({src: i.getAttribute('src'), scale: scales[k]})).filter(f => f.scale < minScale);
  // A table wider than its scroll box hides its last columns on a phone, with no sign
  // that it scrolls (phones draw no scrollbar until touched).
  const tables = [...art.querySelectorAll('table')].filter(t => t.scrollWidth > t.parentElement.clientWidth + 1)
    .map(t => (t.rows[0] ? t.rows[0].textContent : '').replace(/\s+/g, ' ').trim().slice(0, 50));
  // book.js splits each code/output block into span.line (a hanging indent where a line wraps).
  const unsplit = pres.filter(p => (p.closest('div.highlight') || p.closest('div.cell_output'))
    && p.textContent.trim() && !p.querySelector(':scope > span.line')).length;
  const lines = [...art.querySelectorAll('pre > span.line')];
  const inline = lines.filter(l => getComputedStyle(l).display !== 'block').length;
  return {pres: pres.length, wide: pres.filter(p => p.scrollWidth > p.clientWidth + 1).length, tables,
          unsplit, inline,
          minScale: scales.length ? Math.min(...scales) : 1, small, figures: imgs.length,
          pageWidth: document.documentElement.scrollWidth, viewport: window.innerWidth};
}"""


def _check_phone_layout(page, url: str, name: str, report: SiteReport, stay: bool = False) -> str:
    """At phone width code and printed output wrap instead of scrolling sideways (book.css),
    and every figure shows at 65% of its natural width or more (its 9 pt text stays >= 9 px).
    The page is loaded at phone width (book.js sizes figures for the width it loads at);
    ``stay`` leaves it open there for the next check."""
    page.set_viewport_size(PHONE)
    try:
        page.goto(url, wait_until="load")
        r = page.evaluate(_PHONE_JS, PHONE_FIGURE_SCALE)
    finally:
        if not stay:
            page.set_viewport_size(DESKTOP)
    if r["wide"]:
        report.problems.append(
            f"{name}: at {PHONE['width']} px {r['wide']} of {r['pres']} code/output blocks scroll sideways; "
            "they should wrap (book.css, max-width 576px)"
        )
    if r["unsplit"] or r["inline"]:
        report.problems.append(
            f"{name}: at {PHONE['width']} px {r['unsplit']} code/output blocks are not split into lines "
            f"and {r['inline']} lines are not blocks: a wrapped line would start at column 0 and lose "
            "its indentation (book.js hangingIndents, book.css span.line)")
    if r["pageWidth"] > r["viewport"] + 1:
        report.problems.append(
            f"{name}: at {PHONE['width']} px the page is {r['pageWidth']} px wide and scrolls "
            "sideways (a long unbreakable line in the text?)"
        )
    for head in r["tables"]:
        report.problems.append(
            f"{name}: at {PHONE['width']} px a table is wider than the screen and hides its last "
            f"column(s); fewer columns or shorter cells (first row: {head!r})")
    for f in r["small"]:
        report.small_phone_figures.append((name, f["src"], f["scale"]))
        report.problems.append(
            f"{name}: at {PHONE['width']} px a figure shows at {f['scale']:.0%} of its natural width "
            f"(below {PHONE_FIGURE_SCALE:.0%}; make it at most {MAX_FIGURE_PX} px wide): {f['src']}")
    return f"phone: {r['wide']}/{r['pres']} blocks scroll, smallest figure at {r['minScale']:.0%} of natural"


def _page_ids(page, url: str) -> set[str]:
    page.goto(url, wait_until="domcontentloaded")
    return set(page.evaluate("() => [...document.querySelectorAll('[id]')].map(e => e.id)"))


def _check_question_index(page, base: str, report: SiteReport) -> set[int]:
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
    written: set[int] = set()
    greyed = page.evaluate(
        """() => {
          const li = [...document.querySelectorAll('article ol > li')];
          const soon = li.find(l => !l.querySelector('a[href]'));
          const done = li.find(l => l.querySelector('a[href]'));
          if (!soon || !done) return null;
          const colour = e => getComputedStyle(e.querySelector('p') || e).color;
          return colour(soon) !== colour(done);
        }"""
    )
    if greyed is False:
        report.problems.append("questions: questions still to come are not greyed out (book/_static/book.css)")
    for q, item in zip(questions, items):
        if q.text[:40] not in item["text"]:
            report.problems.append(f"questions: item {q.number} reads {item['text'][:60]!r}, expected Q{q.number}")
        if item["href"] is None:
            if "coming" not in item["text"]:
                report.problems.append(f"questions: Q{q.number} has neither a link nor 'coming'")
            coming += 1
            continue
        target, anchor = urldefrag(item["href"])
        if not urlparse(target).path.endswith(f"/notebooks/q{q.number}.html"):
            report.problems.append(f"questions: Q{q.number} links to {target}, not to its own page notebooks/q{q.number}.html")
            continue
        if target not in ids_cache:
            ids_cache[target] = _page_ids(page, target)
        if anchor and anchor not in ids_cache[target]:
            report.problems.append(f"questions: Q{q.number} links to #{anchor}, which {target} does not have")
        linked += 1
        written.add(q.number)
    # "questions.html#q<n>", the short address, reaches the item that links to the page, and
    # book.js goes on to the page itself.
    ids = _page_ids(page, url)
    lost = [q.number for q in questions if f"q{q.number}" not in ids]
    if lost:
        report.problems.append(f"questions: no #q<n> anchor for {['Q%d' % n for n in lost]}")
    if written:
        first = min(written)
        page.goto(urljoin(base, "search.html"), wait_until="load")  # from another page, as a bookmark would
        page.goto(f"{url}#q{first}", wait_until="load")
        try:
            page.wait_for_url(re.compile(rf".*/notebooks/q{first}\.html$"), timeout=5_000)
        except Exception:  # noqa: BLE001 - Playwright's timeout type varies by version; the report says what failed
            report.problems.append(f"questions: questions.html#q{first} stays on the index instead of opening Q{first}'s page")
    report.pages["book/questions.html"] = f"{len(items)} questions, {linked} linked, {coming} coming"
    return written


_REVISION_TEXT_JS = r"""() => {
  const copy = document.querySelector('article').cloneNode(true);
  copy.querySelectorAll('pre, code, mjx-container, script, style').forEach(e => e.remove());
  return copy.innerText;
}"""
_RAW_MATH = re.compile(r"\$|\\[A-Za-z]+")


def _check_revision_sheet(page, base: str, written: set[int], report: SiteReport) -> None:
    url = urljoin(base, "book/revision.html")
    page.goto(url, wait_until="load")
    _wait_for_mathjax(page)
    listed = page.evaluate(
        """() => [...document.querySelectorAll('article h3')]
                 .map(h => (h.textContent.match(/^\\s*Q(\\d+)\\./) || [])[1]).filter(Boolean).map(Number)"""
    )
    missing = sorted(written - set(listed))
    if missing:
        report.problems.append(f"revision sheet: written questions missing: {['Q%d' % n for n in missing]}")
    raw = sorted(set(_RAW_MATH.findall(page.evaluate(_REVISION_TEXT_JS))))
    if raw:
        report.problems.append(f"revision sheet: raw TeX left in the text: {raw[:10]}")
    page.set_viewport_size(PHONE)
    try:
        page.goto(url, wait_until="load")
        _wait_for_mathjax(page)
        width = page.evaluate("() => document.documentElement.scrollWidth")
    finally:
        page.set_viewport_size(DESKTOP)
    if width > PHONE["width"]:
        report.problems.append(f"revision sheet: at {PHONE['width']} px the page is {width} px wide and scrolls sideways")
    report.pages["book/revision.html"] = f"{len(listed)} questions of {len(written)} written; {width} px wide at {PHONE['width']} px"


_DRILL_STATE_JS = r"""() => {
  const card = document.querySelector('div.drill-card.drill-current');
  const visible = e => !!e && e.getBoundingClientRect().height > 0;
  return {cards: document.querySelectorAll('div.drill-card').length,
          shown: [...document.querySelectorAll('div.drill-card')].filter(visible).length,
          q: card ? Number(card.className.match(/drill-q(\d+)/)[1]) : null,
          answer: visible(card && card.querySelector('.drill-answer')),
          followups: card ? [...card.querySelectorAll('.drill-followup')].filter(visible).length : 0,
          marks: JSON.parse(localStorage.getItem('autogradviz-drill-marks') || '{}'),
          tally: (document.getElementById('drill-tally') || {}).textContent || ''};
}"""


def _check_drill(page, base: str, written: set[int], report: SiteReport) -> None:
    """The drill works offline: one card, reveal, follow-up, a mark kept across a reload."""
    name = "book/drill.html"
    url = urljoin(base, name)
    page.goto(url, wait_until="load")
    page.evaluate("() => localStorage.removeItem('autogradviz-drill-marks')")
    page.reload(wait_until="load")
    before = page.evaluate(_DRILL_STATE_JS)
    problems = []
    if before["cards"] != len(written):
        problems.append(f"{before['cards']} cards for {len(written)} written questions")
    if before["shown"] != 1 or before["answer"]:
        problems.append(f"{before['shown']} cards visible at the start (answer shown: {before['answer']}); expected one, answer hidden")
    try:
        page.click("#drill-reveal", timeout=3_000)
        revealed = page.evaluate(_DRILL_STATE_JS)
        if not revealed["answer"]:
            problems.append("'Reveal the short answer' did not show it")
        if not page.is_disabled("#drill-followup"):
            page.click("#drill-followup", timeout=3_000)
            if page.evaluate(_DRILL_STATE_JS)["followups"] != 1:
                problems.append("'Next follow-up' did not show exactly one follow-up")
        first = revealed["q"]
        page.click("#drill-marks button[data-mark=shaky]", timeout=3_000)
        after = page.evaluate(_DRILL_STATE_JS)
        if after["q"] == first:
            problems.append("marking a card did not move on to the next question")
        page.reload(wait_until="load")
        kept = page.evaluate(_DRILL_STATE_JS)
        if kept["marks"].get(str(first)) != "shaky" or "1 shaky" not in kept["tally"]:
            problems.append(f"the mark 'shaky' on Q{first} was not kept after a reload (stored: {kept['marks']})")
        page.select_option("#drill-order", "weak")
        if page.evaluate(_DRILL_STATE_JS)["q"] != first:
            problems.append(f"'shaky/missed first' does not start with Q{first}, marked shaky")
    except Exception as exc:  # noqa: BLE001 - Playwright's timeout type varies by version; the report says what failed
        problems.append(f"the controls did not respond ({type(exc).__name__})")
    report.problems += [f"{name}: {p}" for p in problems]
    report.pages[name] = f"{before['cards']} cards; reveal, follow-up, mark, reload: {'ok' if not problems else 'FAILED'}"


def _check_version_page(page, base: str, report: SiteReport) -> None:
    from autogradviz.versions import VERSION_FACTS

    name = "book/torch-versions.html"
    response = page.goto(urljoin(base, name), wait_until="load")
    if response is None or not response.ok:
        report.problems.append(f"{name}: the page is missing (is book/torch-versions in book/_toc.yml?)")
        return
    found = page.evaluate(
        """() => ({heads: [...document.querySelectorAll('article h2')].map(h => h.textContent),
                   links: [...document.querySelectorAll('article a[href]')].map(a => a.href)})"""
    )
    heads = " | ".join(found["heads"]).replace("\u2019", "'")  # Sphinx's smart quotes
    for fact in VERSION_FACTS.values():
        if fact.title.replace("`", "") not in heads:
            report.problems.append(f"{name}: no section for the version fact {fact.name!r} ({fact.title!r})")
    origin = urlparse(base).netloc
    internal = [h for h in found["links"] if urlparse(h).netloc == origin]
    ids_cache: dict[str, set[str]] = {}
    for href in internal:
        target, anchor = urldefrag(href)
        if target not in ids_cache:
            ids_cache[target] = _page_ids(page, target)
        if anchor and anchor not in ids_cache[target]:
            report.problems.append(f"{name}: a link goes to #{anchor}, which {target} does not have")
    report.pages[name] = (
        f"{len(found['heads'])} facts, {len(internal)} links on the site followed, "
        f"{len(found['links']) - len(internal)} to other hosts"
    )


# The search page's result links, best first (book.js writes them under #search-results).
_RESULT_LINKS_JS = "() => [...document.querySelectorAll('#search-results ul.search li a')].map(a => a.href)"


def _search_hits(page, base: str, word: str) -> list[str]:
    page.goto(urljoin(base, f"search.html?q={word}"), wait_until="load")
    # Sphinx's searchtools writes a summary paragraph once the search is done.
    page.wait_for_selector("#search-results .search-summary, #search-results p", timeout=15_000)
    return page.evaluate(_RESULT_LINKS_JS)


def _search_again(page, term: str) -> list[str]:
    """Type a new search into the search page's own box, as a reader does: the page answers
    without a reload (book.js) and the address takes the new ?q=."""
    box = page.locator(".bd-search-container input[name=q]").first
    box.fill(term)
    box.press("Enter")
    page.wait_for_function(
        "(q) => new URLSearchParams(location.search).get('q') === q"
        " && document.querySelector('#search-results .search-summary')",
        arg=term, timeout=15_000)
    return page.evaluate(_RESULT_LINKS_JS)


def _first_hits(page, base: str, term: str) -> list[str]:
    if urlparse(page.url).path.endswith("/search.html"):
        hits = _search_again(page, term)
    else:
        hits = _search_hits(page, base, quote(term))
    return [urlparse(h).path.lstrip("/") for h in hits]


def _check_search(page, base: str, site: Path, report: SiteReport) -> None:
    word = "Jacobian"  # on the front page (book/intro.md)
    hits = _search_hits(page, base, word)
    if not any("intro.html" in h for h in hits):
        report.problems.append(f"search: '{word}' did not find the front page (hits: {hits})")
    misses = _search_hits(page, base, SEARCH_MISS)
    if misses:
        report.problems.append(f"search: a made-up word found {misses}: the search is not filtering")
    summary = f"'{word}': {len(hits)} hits; made-up word: {len(misses)} hits"
    # The test site's chapter has a word only in Q3's "Why" text (tests/fixtures).
    q3 = site / "notebooks" / "q3.html"
    if q3.is_file() and "quokkalike" in q3.read_text(encoding="utf-8"):
        first = _first_hits(page, base, "quokkalike")
        if not first or first[0] != "notebooks/q3.html":
            report.problems.append(f"search: 'quokkalike' (only in Q3) finds {first[:3]} first, not notebooks/q3.html")
        summary += f"; 'quokkalike' (Q3) -> {first[0] if first else 'nothing'}"
    # The full book: each term finds the question that explains it first.
    if all((site / "notebooks" / f"q{n}.html").is_file() for n in SEARCH_TERMS.values()):
        wrong = []
        for term, n in SEARCH_TERMS.items():
            first = _first_hits(page, base, term)
            report.search_terms[term] = first[0] if first else "nothing"
            if not first or first[0] != f"notebooks/q{n}.html":
                wrong.append(f"{term!r} -> {first[:2]} (want Q{n})")
        if wrong:
            report.problems.append(f"search: {len(wrong)} of {len(SEARCH_TERMS)} terms do not find their question first: {wrong}")
        summary += f"; {len(SEARCH_TERMS) - len(wrong)}/{len(SEARCH_TERMS)} terms land first on their question"
        # Back goes to the previous search's results, as it did when every search reloaded.
        terms = list(SEARCH_TERMS)
        page.go_back(wait_until="commit")
        page.wait_for_function(
            "(q) => new URLSearchParams(location.search).get('q') === q"
            " && document.querySelector('.bd-search-container input[name=q]').value === q",
            arg=terms[-2], timeout=15_000)
        back = [urlparse(h).path.lstrip("/") for h in page.evaluate(
            _RESULT_LINKS_JS)]
        if not back or back[0] != f"notebooks/q{SEARCH_TERMS[terms[-2]]}.html":
            report.problems.append(f"search: Back after {terms[-1]!r} shows {back[:2]}, not the results for {terms[-2]!r}")
    report.pages["search.html"] = summary


def check_site(site: Path, shots: Path) -> SiteReport:
    """Drive Chromium over the built site and collect a report (does not raise on findings)."""
    from playwright.sync_api import sync_playwright

    if not (site / "index.html").is_file():
        raise ValueError(f"{site} has no index.html; build the site first (make site)")
    report = SiteReport(network="cut (unshare -n, loopback only)" if _network_cut_in_this_process() else "not cut")
    server, base = _serve(site)
    origin = urlparse(base).netloc
    chapters = sorted(p.relative_to(site).as_posix() for p in (site / "notebooks").glob("[0-9][0-9]_*.html"))
    question_pages = {
        int(m.group(1)): f"notebooks/{p.name}"
        for p in (site / "notebooks").glob("q*.html")
        if (m := re.fullmatch(r"q(\d+)\.html", p.name))
    }
    if not chapters:
        report.problems.append("no chapter pages under notebooks/")
    sys.path.insert(0, str(REPO / "scripts"))
    from build_site import QUESTIONS_YML, broken_links, load_questions

    by_chapter: dict[int, list[int]] = {}
    for q in load_questions(REPO / QUESTIONS_YML):
        if q.number in question_pages:
            by_chapter.setdefault(q.chapter, []).append(q.number)
    for problem in broken_links(site):
        report.problems.append(f"broken link: {problem}")
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
                viewport=DESKTOP, service_workers="block",
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

            def shoot(label: str) -> None:
                """Desktop and phone pictures of the current page, each loaded at its own size
                (resized in place, the theme's sidebars are caught mid-transition)."""
                for size, tag in ((DESKTOP, "desktop"), (PHONE, "phone")):
                    page.set_viewport_size(size)
                    if tag == "phone":
                        page.reload(wait_until="load")
                        _wait_for_mathjax(page)
                    path = shots / f"{label}-{tag}.png"
                    page.screenshot(path=str(path))
                    report.screenshots.append(path)
                page.set_viewport_size(DESKTOP)
                page.reload(wait_until="load")

            # The site's index.html redirects to the front page; follow it as a reader would.
            page.goto(base, wait_until="load")
            page.wait_for_url(re.compile(r".*/intro\.html$"), timeout=10_000)
            front = page.url
            _check_content_page(page, front, "front page", report, needs_figure=False)
            shoot("front")
            for rel in chapters:
                url = urljoin(base, rel)
                _check_content_page(page, url, rel, report, needs_figure=False, needs_math=False)
                report.pages[rel] += "; " + _check_chapter_layout(page, rel, by_chapter.get(int(rel[10:12]), []), report)
                report.pages[rel] += "; " + _check_phone_layout(page, url, rel, report, stay=True)
                opened = _check_phone_navigation(page, url, rel, report, loaded=True)
                if rel == chapters[0]:
                    shoot("ch01")
                    if opened:
                        page.set_viewport_size(PHONE)
                        page.goto(url, wait_until="load")
                        page.locator("button.primary-toggle:visible").first.click(timeout=3_000)
                        page.wait_for_timeout(300)  # the dialog's slide-in
                        report.screenshots.append(shots / "ch01-phone-menu.png")
                        page.screenshot(path=str(shots / "ch01-phone-menu.png"))
                        page.set_viewport_size(DESKTOP)
            for number, rel in sorted(question_pages.items()):
                url = urljoin(base, rel)
                _check_content_page(page, url, rel, report, needs_figure=False, needs_math=False)
                report.pages[rel] += "; " + _check_question_layout(page, rel, number, report)
                if number == min(question_pages):
                    shoot(f"q{number}")
                    # Centre the first real figure (not an icon) for a picture of a question at work.
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
                report.pages[rel] += "; " + _check_phone_layout(page, url, rel, report)
            written = _check_question_index(page, base, report)
            _check_revision_sheet(page, base, written, report)
            page.goto(urljoin(base, "book/revision.html"), wait_until="load")
            _wait_for_mathjax(page)
            shoot("revision")
            _check_drill(page, base, written, report)
            for size, tag in ((DESKTOP, "desktop"), (PHONE, "phone")):
                # A card with its short answer and first follow-up shown (if the drill works).
                page.set_viewport_size(size)
                page.goto(urljoin(base, "book/drill.html"), wait_until="load")
                try:
                    page.click("#drill-reveal", timeout=3_000)
                    if not page.is_disabled("#drill-followup"):
                        page.click("#drill-followup", timeout=3_000)
                except Exception:  # noqa: BLE001 - _check_drill has reported it; the picture shows it
                    pass
                _wait_for_mathjax(page)
                report.screenshots.append(shots / f"drill-{tag}.png")
                page.screenshot(path=str(shots / f"drill-{tag}.png"))
            page.set_viewport_size(DESKTOP)
            _check_version_page(page, base, report)
            _check_search(page, base, site, report)
            page.wait_for_load_state("networkidle", timeout=90_000)  # the last page's late requests
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
    if report.small_phone_figures:
        print(f"  figures below {PHONE_FIGURE_SCALE:.0%} of their natural width at {PHONE['width']} px:")
        for name, src, scale in report.small_phone_figures:
            print(f"    {name:34s} {scale:4.0%}  {src}")
    for term, first in report.search_terms.items():
        print(f"  search {term!r:24s} -> {first}")
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
