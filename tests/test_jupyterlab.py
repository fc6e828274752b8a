"""`make lab` works: JupyterLab serves the chapters, runs code in the venv's kernel, and renders
the chapter markup (callouts, anchors, hidden answers and solutions) as the book intends.

Starts the same server `make lab` starts, headless on a free loopback port, then goes through
the server the way the browser does: the REST API lists and opens the chapter notebooks, a
`python3` kernel starts, and a cell sent over the kernel's websocket imports autogradviz and
torch from this environment. The server's whole process group is stopped at the end.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
JUPYTER = Path(sys.executable).parent / "jupyter"
# Waits end as soon as their condition holds, so long limits cost nothing when the machine is
# quiet; `make test` runs these tests beside nbval and the site check on CI's two cores.
START_TIMEOUT_S = 90
CELL_TIMEOUT_S = 60
UI_TIMEOUT_MS = 120_000

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not JUPYTER.exists(), reason=f"{JUPYTER} not found; run `make setup`")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


class _Server:
    """Just enough of a REST client for the test, with the token in every request."""

    def __init__(self, port: int, token: str, env: dict[str, str]) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.token = token
        self.env = env  # the server's environment: its JUPYTER_DATA_DIR holds the trust signatures

    def shut_down_sessions(self) -> None:
        """Close every notebook session and kernel the browser started, so that the next test
        starts from an idle server (no kernels of earlier chapters competing for the CPU, and
        a "kernel is idle" wait that can only be met by the notebook under test)."""
        for session in self.call("GET", "/api/sessions"):
            self.call("DELETE", f"/api/sessions/{session['id']}")
        for kernel in self.call("GET", "/api/kernels"):
            self.call("DELETE", f"/api/kernels/{kernel['id']}")
        assert self.call("GET", "/api/kernels") == [], "a kernel survived its session's shutdown"

    def call(self, method: str, path: str, body: dict | None = None) -> dict | list | None:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"token {self.token}")
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None


def _execute_over_websocket(port: int, token: str, kernel_id: str, code: str) -> tuple[str, str]:
    """Send one execute_request on the kernel's channels websocket; return (status, stdout)."""
    import websocket  # websocket-client, a dependency of jupyter_server

    ws = websocket.create_connection(
        f"ws://127.0.0.1:{port}/api/kernels/{kernel_id}/channels?token={token}", timeout=CELL_TIMEOUT_S
    )
    try:
        msg_id = uuid.uuid4().hex
        ws.send(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "test",
                       "session": uuid.uuid4().hex, "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True},
        }))  # fmt: skip
        stdout, status, idle = [], None, False
        deadline = time.monotonic() + CELL_TIMEOUT_S
        while (status is None or not idle) and time.monotonic() < deadline:
            msg = json.loads(ws.recv())
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["header"]["msg_type"]
            if kind == "stream" and msg["content"]["name"] == "stdout":
                stdout.append(msg["content"]["text"])
            elif kind == "error":
                stdout.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")
            elif kind == "execute_reply":
                status = msg["content"]["status"]
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                idle = True
        return status or "no reply", "".join(stdout)
    finally:
        ws.close()


def _make_lab_lines() -> tuple[list[str], list[str]]:
    """`make lab`'s trust command and its `jupyter lab` arguments, read from the Makefile."""
    import glob
    import shlex

    text = (REPO / "Makefile").read_text()
    values = {}
    for key in ("LAB_TRUST", "LAB_ARGS"):
        m = re.search(rf"^{key}\s*:=\s*(.+)$", text, re.M)
        assert m, f"the Makefile has no {key} line for `make lab`"
        values[key] = shlex.split(m[1].replace("$(VENV)", str(REPO / ".venv")))
    trust = [a for arg in values["LAB_TRUST"] for a in (sorted(glob.glob(arg, root_dir=REPO)) if "*" in arg else [arg])]
    assert trust[1:2] == ["trust"] and len(trust) > 2, trust
    return trust, values["LAB_ARGS"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory):
    """The server `make lab` starts, headless on a free loopback port: (port, token, client).

    Stopped as a whole process group afterwards; the teardown checks that the port is closed
    and that no process of the group is left.
    """
    tmp_path = tmp_path_factory.mktemp("lab")
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces")}  # fmt: skip
    # Trust data of its own: `make lab`'s `jupyter trust` writes the signatures there.
    env["JUPYTER_DATA_DIR"] = str(tmp_path / "data")
    trust, lab_args = _make_lab_lines()
    subprocess.run(trust, cwd=REPO, env=env, check=True, capture_output=True)
    cmd = [
        str(JUPYTER), "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
        f"--ServerApp.token={token}", "--ServerApp.open_browser=False", "--ServerApp.port_retries=0",
        "--ServerApp.allow_root=True", *lab_args,
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        # No "would you like news?" pop-up over the page in the browser test.
        "--LabApp.news_url=None",
    ]  # fmt: skip
    log = (tmp_path / "lab.log").open("w")
    # Its own session, so the server and every kernel it starts can be stopped as one group.
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = _Server(port, token, env)
    server.trust = trust[:2]  # `make lab`'s `jupyter trust`, to sign one chapter again
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert proc.poll() is None, f"jupyter lab exited with {proc.returncode}:\n{(tmp_path / 'lab.log').read_text()}"
            try:
                server.call("GET", "/api/status")
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, f"jupyter lab did not answer in {START_TIMEOUT_S} s"
                time.sleep(0.3)
        yield port, token, server
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()
    assert not _port_open(port), f"port {port} still answers after the server was stopped"
    with pytest.raises(ProcessLookupError):  # no process of the group is left
        os.killpg(proc.pid, 0)


def test_jupyterlab_serves_chapters_and_runs_a_cell(lab) -> None:
    import torch

    port, token, server = lab
    # Without the token the server refuses: the check above really went through authentication.
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{server.base}/api/contents", timeout=10)
    assert refused.value.code == 403

    listing = server.call("GET", "/api/contents")
    listed = sorted(item["name"] for item in listing["content"] if item["type"] == "notebook")
    assert listed == sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    for name in listed:
        model = server.call("GET", f"/api/contents/{name}")
        assert model["type"] == "notebook" and model["content"]["nbformat"] == 4, name

    spec = server.call("GET", "/api/kernelspecs")["kernelspecs"]["python3"]["spec"]
    # A chapter opens unmodified only if its stored kernelspec is the registered one.
    for name in listed:
        stored = server.call("GET", f"/api/contents/{name}")["content"]["metadata"]["kernelspec"]
        assert stored["display_name"] == spec["display_name"], (name, stored, spec["display_name"])
    # Compare unresolved paths: a venv's python is a symlink to the base interpreter.
    assert Path(os.path.abspath(spec["argv"][0])).is_relative_to(os.path.abspath(sys.prefix)), (
        f"the python3 kernel runs {spec['argv'][0]}, not this environment ({sys.prefix}); run `make setup`"
    )
    kernel = server.call("POST", "/api/kernels", {"name": "python3"})
    code = (
        "import autogradviz, torch, pathlib\n"
        "print(torch.__version__)\n"
        "print(pathlib.Path(autogradviz.__file__).resolve().parent.parent)\n"
    )
    status, out = _execute_over_websocket(port, token, kernel["id"], code)
    assert status == "ok", out
    assert out.splitlines() == [torch.__version__, str(REPO)]
    status, out = _execute_over_websocket(port, token, kernel["id"], "raise ValueError('on purpose')")
    assert status == "error" and "ValueError: on purpose" in out
    server.call("DELETE", f"/api/kernels/{kernel['id']}")
    assert server.call("GET", "/api/kernels") == []


CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for every browser test of this file (a launch per test cost
    more than a second each); each test opens its own context and closes it."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium not installed (make setup-browser)")
@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")))
def test_chapter_markup_renders_in_jupyterlab(lab, browser, name: str) -> None:
    """What the chapter markup promises in JupyterLab, seen in a real browser.

    The callouts pick up JupyterLab's own alert colours, every `<a id="q<n>">` anchor
    survives its sanitiser (as the data-jupyter-id that its "#q<n>" links resolve to),
    quiz answers are closed <details>, and each solution cell's source is collapsed.
    """
    import nbformat

    port, token, server = lab
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    solutions = sum("solution" in c.metadata.get("tags", []) for c in nb.cells)
    questions = sorted({int(m) for c in nb.cells if c.cell_type == "markdown"
                        for m in re.findall(r'<a id="q(\d+)"></a>', c.source)})
    details = sum(c.source.count("<details>") for c in nb.cells if c.cell_type == "markdown")
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    try:
        page = context.new_page()
        # A workspace of its own, reset: otherwise JupyterLab reopens the chapters an
        # earlier test opened, and their cells would be counted too.
        workspace = "ch" + name.split("_")[0]
        page.goto(f"http://127.0.0.1:{port}/lab/workspaces/{workspace}/tree/{name}"
                  f"?reset&token={token}")
        page.wait_for_selector(".jp-MarkdownCell .jp-RenderedHTMLCommon", timeout=UI_TIMEOUT_MS)
        # JupyterLab renders cells lazily; wait until every markdown cell has rendered.
        page.wait_for_function(
            f"document.querySelectorAll('.jp-RenderedHTMLCommon details').length >= {details}",
            timeout=UI_TIMEOUT_MS)
        seen = page.evaluate("""() => {
          const bg = sel => Array.from(document.querySelectorAll(sel))
              .map(e => getComputedStyle(e).backgroundColor);
          return {
            tips: bg('.jp-RenderedHTMLCommon div.admonition.tip'),
            warnings: bg('.jp-RenderedHTMLCommon div.admonition.warning'),
            anchors: Array.from(document.querySelectorAll('.jp-RenderedHTMLCommon a[data-jupyter-id]'))
                .map(a => a.getAttribute('data-jupyter-id')),
            closed: Array.from(document.querySelectorAll('.jp-RenderedHTMLCommon details'))
                .filter(d => !d.open).length,
            hidden_inputs: document.querySelectorAll('.jp-InputPlaceholder').length,
          };
        }""")
    finally:
        context.close()
        server.shut_down_sessions()
    transparent = "rgba(0, 0, 0, 0)"
    assert len(seen["tips"]) >= len(questions) and transparent not in seen["tips"], seen["tips"]
    assert len(seen["warnings"]) >= len(questions) and transparent not in seen["warnings"], seen["warnings"]
    assert set(seen["tips"]).isdisjoint(seen["warnings"])  # the two kinds look different
    assert sorted(int(a[1:]) for a in seen["anchors"] if a[1:].isdigit()) == questions
    assert seen["closed"] == details
    assert seen["hidden_inputs"] == solutions


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium not installed (make setup-browser)")
def test_chapter_opens_clean_with_its_graphs_and_cross_chapter_links(lab, browser) -> None:
    """Chapter 1 as `make lab` opens it: stored SVG graphs shown as images (not as
    `SVG(... characters)` text), not marked unsaved once its kernel has started, no graph
    past the right edge with the file browser open, and a link to another chapter's
    question (Q13, chapter 3) opens that chapter scrolled to the question."""
    import nbformat
    from nbformat.sign import NotebookNotary

    port, token, server = lab
    name, target = "01_define_by_run.ipynb", "03_autograd_engine.ipynb"
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    svgs = sum("image/svg+xml" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert svgs > 0 and any("../book/questions.md#q13" in c.source for c in nb.cells)
    # A signature covers the file's content: any edit since the fixture ran `make lab`'s
    # `jupyter trust` (an author saving the chapter while the suite runs) leaves it untrusted,
    # and its SVGs would show as text. Sign it again with the same command, as restarting
    # `make lab` would, and check the signature before blaming the browser for it.
    subprocess.run([*server.trust, str(NOTEBOOKS / name)], cwd=REPO, env=server.env, check=True, capture_output=True)
    notary = NotebookNotary(data_dir=server.env["JUPYTER_DATA_DIR"])
    assert notary.check_signature(nbformat.read(NOTEBOOKS / name, as_version=4)), (
        f"{name} is not trusted after `make lab`'s `jupyter trust`")
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{port}/lab/workspaces/open/tree/{name}?reset&token={token}")
        page.wait_for_function(f"document.querySelectorAll('.jp-RenderedSVG img').length >= {svgs}",
                               timeout=UI_TIMEOUT_MS)
        deadline = time.monotonic() + UI_TIMEOUT_MS / 1000
        # This chapter's own kernel: the earlier tests shut theirs down.
        while not any(s["path"].endswith(name) and s["kernel"]["execution_state"] == "idle"
                      for s in server.call("GET", "/api/sessions")):
            assert time.monotonic() < deadline, "the chapter's kernel did not start"
            time.sleep(0.5)
        time.sleep(2)  # JupyterLab applies the kernel's info to the notebook after it starts
        seen = page.evaluate("""() => ({
          dirty: document.querySelectorAll('.jp-mod-dirty').length,
          files: document.querySelector('.jp-FileBrowser').getBoundingClientRect().width,
          as_text: Array.from(document.querySelectorAll('.jp-OutputArea-output'))
              .filter(e => /SVG\\(\\d+ characters\\)/.test(e.textContent)).length,
          past_edge: Array.from(document.querySelectorAll('.jp-RenderedSVG img')).filter(i => {
              const out = i.closest('.jp-OutputArea-output').getBoundingClientRect();
              return i.complete && i.naturalWidth > 0 && i.getBoundingClientRect().right > out.right + 1;
          }).length,
        })""")
        assert seen["files"] > 0, "the file browser is not open"
        assert seen["as_text"] == 0 and seen["past_edge"] == 0, seen
        assert seen["dirty"] == 0, "the chapter is marked unsaved after its kernel started"
        link = page.locator(f"a[href*='{target}'][href*='#cell-id=']").filter(has_text="Q13").first
        link.scroll_into_view_if_needed()
        link.click()
        page.wait_for_function(
            f"[...document.querySelectorAll('.lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel')]"
            f".some(t => t.textContent === '{target}')", timeout=UI_TIMEOUT_MS)
        page.wait_for_function("""() => {
          const a = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) [data-jupyter-id="q13"]');
          return a && a.getBoundingClientRect().top > 0 && a.getBoundingClientRect().top < innerHeight;
        }""", timeout=UI_TIMEOUT_MS)
    finally:
        context.close()
        server.shut_down_sessions()


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium not installed (make setup-browser)")
@pytest.mark.parametrize("how", ["shift-enter", "run-all"])
def test_a_wrong_answer_is_reported_wrong_in_jupyterlab(lab, browser, how: str) -> None:
    """The fixture chapter's exercise (docs/chapter-markup.md, "Exercises") with a wrong
    answer in the reader's cell, run in JupyterLab the two ways a reader runs it: cell after
    cell with Shift+Enter, and Run All. The hidden solution cell runs in between both ways;
    the check must still report the reader's answer wrong."""
    import nbformat
    from fixtures.contract_chapter import contract_chapter
    from nbformat.v4 import new_code_cell, new_notebook

    port, token, server = lab
    full = contract_chapter()
    stub, solution, check = (next(c for c in full.cells if tag in c.metadata.get("tags", []))
                             for tag in ("exercise", "solution", "check"))  # fmt: skip
    wrong = {"shift-enter": 5.0, "run-all": 3.0}[how]
    says = {"shift-enter": "= 5.0 is too high", "run-all": "= 3.0 is too low"}[how]
    assert stub.source == "my_prediction = None"
    reader = new_code_cell(f"my_prediction = {wrong}", metadata=stub.metadata)
    nb = new_notebook(cells=[new_code_cell("import autogradviz as agv"), reader,
                             new_code_cell(solution.source, metadata=solution.metadata),
                             new_code_cell(check.source, metadata=check.metadata)])
    nb.metadata = full.metadata
    # A scratch notebook under the served root (the server serves nothing else), in a folder
    # of its own: tests running beside this one read notebooks/*.ipynb as the chapter list.
    folder = f"zz_scratch_{how}_{secrets.token_hex(4)}"
    name = f"{folder}/exercise.ipynb"
    server.call("PUT", f"/api/contents/{folder}", {"type": "directory"})
    server.call("PUT", f"/api/contents/{name}", {"type": "notebook", "format": "json",
                                                  "content": json.loads(nbformat.writes(nb))})
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{port}/lab/workspaces/{how}/tree/{name}?reset&token={token}")
        page.wait_for_selector(".jp-Notebook .jp-CodeCell", timeout=UI_TIMEOUT_MS)
        deadline = time.monotonic() + UI_TIMEOUT_MS / 1000
        while not any(s["path"].endswith(name) and s["kernel"]["execution_state"] == "idle"
                      for s in server.call("GET", "/api/sessions")):
            assert time.monotonic() < deadline, "the notebook's kernel did not start"
            time.sleep(0.5)
        if how == "shift-enter":
            page.locator(".jp-Notebook .jp-Cell").first.click()
            page.keyboard.press("Escape")  # command mode: Shift+Enter runs and moves on
            for _ in range(4):
                page.keyboard.press("Shift+Enter")
                page.wait_for_timeout(300)
        else:
            page.locator(".lm-MenuBar-item", has_text="Run").first.click()
            page.locator(".lm-Menu-item", has_text="Run All Cells").first.click()
        out = page.locator(".jp-Notebook .jp-CodeCell").nth(3).locator(".jp-OutputArea-output")
        out.first.wait_for(timeout=UI_TIMEOUT_MS)
        page.wait_for_function("""() => {
          const cells = document.querySelectorAll('.jp-Notebook .jp-CodeCell');
          return cells.length >= 4 && /not yet|correct/.test(cells[3].querySelector('.jp-OutputArea')?.textContent || '');
        }""", timeout=UI_TIMEOUT_MS)
        shown = out.first.inner_text()
        assert shown.startswith("not yet: `my_prediction` " + says), shown
        assert "correct!" not in shown
        # The collapsed solution shows its comment line only.
        placeholder = page.locator(".jp-Notebook .jp-CodeCell").nth(2).locator(".jp-InputPlaceholder")
        assert placeholder.inner_text().strip().splitlines()[0] == "# Solution"
    finally:
        context.close()
        server.shut_down_sessions()
        server.call("DELETE", f"/api/contents/{name}")
        server.call("DELETE", f"/api/contents/{folder}")
