"""The learner's path in real JupyterLab, driven by headless Chromium.

JupyterLab serves a copy of the exercises; the test edits vector_add.cu through JupyterLab's own
editor model and saves it, opens exercise 01's notebook, runs every cell and reads what the
grading cell shows. On a machine without a GPU (the kernel sees CUDA_VISIBLE_DEVICES="") that is
the compile report and the sentence that running needs an NVIDIA GPU, and no cell shows an error.

Needs Debian's chromium (/usr/bin/chromium), the Python packages playwright and jupyterlab, and
nvcc; the browser never reaches beyond 127.0.0.1.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from lab_server import jupyter_lab

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "exercises/01_foundations/01_foundations.ipynb"
LEARNER_FILE = "exercises/01_foundations/vector_add.cu"
LEARNER_KERNEL = ROOT / "tests" / "submissions" / "ex01_wrong_vector_add.cu"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = [
    pytest.mark.skipif(not CHROMIUM.is_file(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                      "(apt-get install -y chromium)"),
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: the report would have "
                                                             "no compile results to show"),
]
playwright_api = pytest.importorskip("playwright.sync_api", reason="needs the Python package playwright")
pytest.importorskip("jupyterlab", reason="needs JupyterLab: pip install -e '.[course]'")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab on 127.0.0.1 serving a copy of exercises/, stopped at the end."""
    home = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "exercises", home / "exercises",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    env = os.environ.copy()
    env.update(CUDA_VISIBLE_DEVICES="", S2S_ROOT=str(home), S2S_CACHE=str(home / ".cache"),
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p),
               JUPYTER_CONFIG_DIR=str(home / ".jupyter"), JUPYTER_DATA_DIR=str(home / ".local"),
               JUPYTER_RUNTIME_DIR=str(home / ".runtime"), IPYTHONDIR=str(home / ".ipython"))
    log = home / "jupyter.log"
    with jupyter_lab(home, env, log, f"--ServerApp.root_dir={home}", "--LabApp.expose_app_in_browser=True",
                     "--LabApp.news_url=None") as server:
        yield {"base": server.base, "token": server.token, "home": home, "log": log}


OPEN_AND_EDIT = """async ([path, text]) => {
  const app = window.jupyterapp;
  const widget = await app.commands.execute('docmanager:open', {path, factory: 'Editor'});
  await widget.context.ready;
  widget.context.model.sharedModel.setSource(text);
  await widget.context.save();
  await app.commands.execute('application:close', {});
  return widget.context.model.sharedModel.getSource().length;
}"""

RUN_ALL = """async (path) => {
  const app = window.jupyterapp;
  const panel = await app.commands.execute('docmanager:open', {path});
  await panel.context.ready;
  await panel.sessionContext.ready;
  await app.commands.execute('notebook:run-all-cells');
  return true;
}"""

CELLS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const busy = panel.sessionContext.session?.kernel?.status !== 'idle';
  const cells = [];
  const model = panel.content.model;
  for (let i = 0; i < model.cells.length; i++) {
    const cell = model.cells.get(i);
    if (cell.type !== 'code') continue;
    cells.push({tags: cell.getMetadata('tags') || [], count: cell.executionCount,
                outputs: cell.outputs.toJSON()});
  }
  return {busy, cells};
}"""


def _run_notebook(lab) -> tuple[list[dict], str, Path]:
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            # Nothing but this JupyterLab: a request elsewhere is refused, not sent.
            page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(lab["base"])
                       or route.request.url.startswith("data:") else route.abort())
            page.goto(f"{lab['base']}/lab?token={lab['token']}", wait_until="domcontentloaded")
            page.wait_for_function("() => window.jupyterapp && window.jupyterapp.started", timeout=120_000)
            page.evaluate("() => window.jupyterapp.started")
            page.evaluate(OPEN_AND_EDIT, [LEARNER_FILE, LEARNER_KERNEL.read_text()])
            page.evaluate(RUN_ALL, NOTEBOOK)
            deadline = time.monotonic() + 300
            state = page.evaluate(CELLS)
            while time.monotonic() < deadline:
                state = page.evaluate(CELLS)
                if not state["busy"] and state["cells"] and all(c["count"] for c in state["cells"]):
                    break
                time.sleep(1)
            else:
                pytest.fail(f"the notebook did not finish running: {json.dumps(state)[:3000]}")
            last = page.locator(".jp-Notebook .jp-CodeCell").last
            last.scroll_into_view_if_needed()
            shown = last.locator(".jp-OutputArea").inner_text(timeout=30_000)
            shot = lab["home"] / "grading-cell.png"
            last.screenshot(path=str(shot))
            return state["cells"], shown, shot
        finally:
            browser.close()


def test_learner_runs_exercise_01_in_jupyterlab(lab):
    cells, shown, _ = _run_notebook(lab)
    assert (lab["home"] / LEARNER_FILE).read_text() == LEARNER_KERNEL.read_text(), \
        "the edit made in JupyterLab's editor was not saved"
    for cell in cells:
        kinds = [(o["output_type"], o.get("name")) for o in cell["outputs"]]
        assert ("error", None) not in kinds, (cell["tags"], cell["outputs"])
        assert ("stream", "stderr") not in kinds, (cell["tags"], cell["outputs"])
    grading = next(c for c in cells if "grade" in c["tags"])
    assert grading is cells[-1]
    # What the learner reads under the grading cell: the compile report, then why nothing ran.
    assert "need an NVIDIA GPU" in shown, shown
    lines = {line.split()[0]: line for line in shown.splitlines() if line.strip()}
    assert "regs" in lines["vector_add"], shown            # the kernel written in the editor compiled
    assert "no kernel yet" in lines["reduce_sum"], shown   # the untouched stub launches none
