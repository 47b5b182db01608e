"""What a notebook stores when a learner runs the grading cell: the report, one progress line that
ended as "graded in ... s", and no wall of carriage-return half-lines."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not on PATH")
def test_the_grading_cell_stores_one_progress_line_and_the_report(tmp_path, monkeypatch):
    monkeypatch.setenv("S2S_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('from grader import grade\ngrade("01")')])
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
                            ).execute()
    outputs = nb.cells[0].outputs
    streams = [o for o in outputs if o.output_type == "stream"]
    assert not any("\r" in o.text for o in streams), streams
    progress = [o for o in outputs if o.output_type == "display_data" and "text/html" not in o.data]
    assert len(progress) == 1 and progress[0].data["text/plain"].startswith("graded in "), progress
    report = [o for o in outputs if o.output_type == "execute_result"]
    assert report and '<div class="s2s">' in report[0].data["text/html"]
    assert "compiled; running it needs an NVIDIA GPU" in report[0].data["text/html"]
