"""Every figure each notebook shows, run headless on a CPU: without a grading, the roofline and speed
against size come from the measurements recorded beside the exercise (recorded.json), and an
exercise without any says so instead of drawing."""
from __future__ import annotations

import json

import pytest
from derivation_helpers import no_gpu, read_notebook, run_notebook  # noqa: F401 (autouse)

from grader import figures, spec

pytest.importorskip("matplotlib")

SHOWN = {
    "01": ["roofline", "speed against size", "access pattern"],
    "02": ["roofline", "speed against size"],
    "03": ["roofline", "speed against size", "loss curves"],
    "04": [],
    "05": ["roofline", "speed against size"],
}


@pytest.mark.parametrize("exercise", sorted(SHOWN))
def test_each_notebook_shows_exactly_its_figures(exercise, monkeypatch, capsys):
    shown = []
    monkeypatch.setattr(figures, "_display", lambda fig: shown.append(fig.get_label()))
    ex = spec.find(exercise)
    run_notebook(read_notebook(ex.folder / ex.notebook))
    assert shown == SHOWN[exercise]
    out = capsys.readouterr().out
    if SHOWN[exercise]:
        assert "Drawn from the hidden solutions on an NVIDIA H200 (recorded.json)" in out
    else:
        assert "No figures yet: nothing timed on this machine, and no measurements recorded" in out


def test_recorded_points_are_the_recorded_times():
    """Exercise 01's vector_add: 184 µs at n = 2^26 (12 bytes an element), 31 times that for the
    naive kernel."""
    measured = figures.recorded("01")
    solution = next(p for p in measured.points if p.task == "vector_add" and p.kind == "learner")
    naive = next(p for p in measured.points if p.task == "vector_add" and p.kind == "baseline")
    assert solution.seconds == pytest.approx(184e-6) and naive.seconds == pytest.approx(31 * 184e-6)
    assert solution.gbs == pytest.approx(12 * 2 ** 26 / 184e-6 / 1e9)


def test_every_recorded_file_names_its_gpu_and_source():
    for ex in spec.discover():
        path = ex.folder / "recorded.json"
        if path.is_file():
            data = json.loads(path.read_text())
            assert data["gpu"].startswith("NVIDIA ") and data["source"] and data["copy_gbs"] > 0
            assert set(data["tasks"]) <= {t.name for t in ex.tasks}


def test_the_access_pattern_counts_lines_and_sectors():
    fig = figures.access_pattern(stride=32)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0].startswith("coalesced") and "1 line of 128 B, 4 sectors" in titles[0]
    assert "32 lines of 128 B, 32 sectors of 32 B moved for 128 B used" in titles[1]
