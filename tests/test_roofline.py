"""The roofline plot: a valid PNG, every kernel visible, zero-intensity kernels handled."""

from __future__ import annotations

from pathlib import Path

import pytest

from hardware.roofline import Ceilings, KernelPoint, plot_roofline, roofline_figure

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

MEASURED = Ceilings(4183.0, 61.0, "H200 measured: copy 4183 GB/s, FP32 61 TFLOP/s")
SPEC = Ceilings(4800.0, 67.0, "H200 spec sheet: 4800 GB/s, FP32 67 TFLOP/s")
POINTS = [
    KernelPoint("your tiled GEMM", 60.0, 28.0, "learner"),
    KernelPoint("naive GEMM", 1365.0, 1.9, "baseline"),
    KernelPoint("cuBLAS SGEMM", 1365.0, 50.9, "vendor"),
    KernelPoint("your softmax", 1.25, 2.4, "learner"),
]


def _plotted(fig, axes_index: int = -1) -> set[tuple[float, float]]:
    """(x, y) of every scatter marker on one axes of the figure."""
    from matplotlib.collections import PathCollection  # what scatter() creates

    ax = fig.axes[axes_index]
    return {(float(x), float(y)) for c in ax.collections if isinstance(c, PathCollection)
            for x, y in c.get_offsets()}


def _texts(fig) -> str:
    return "\n".join(t.get_text() for ax in fig.axes for t in ax.texts + ax.get_xticklabels())


def test_png_is_produced_and_written(tmp_path: Path):
    path = tmp_path / "roofline.png"
    png = plot_roofline(POINTS, [MEASURED, SPEC], path, title="GEMM on NVIDIA H200")
    assert png.startswith(PNG_MAGIC)
    assert len(png) > 30_000  # a real 1200+ px wide plot, not an empty canvas
    assert path.read_bytes() == png


def test_every_kernel_is_a_labelled_marker():
    fig = roofline_figure(POINTS, [MEASURED])
    assert {(p.intensity, p.tflops) for p in POINTS} <= _plotted(fig)
    for p in POINTS:
        assert p.label in _texts(fig)


def test_ridge_point_is_marked():
    fig = roofline_figure(POINTS, [MEASURED])
    assert f"ridge {MEASURED.ridge:.3g} FLOP/B" in _texts(fig)
    assert MEASURED.ridge == pytest.approx(61.0e3 / 4183.0)


def test_points_above_the_roof_are_still_plotted_inside_the_axes():
    # 30 TFLOP/s at 2 FLOP/B is far above the 8.4 TFLOP/s memory roof there.
    above = KernelPoint("suspiciously fast", 2.0, 30.0, "learner")
    far_right = KernelPoint("huge GEMM", 50_000.0, 500.0, "vendor")  # beyond both roofs
    fig = roofline_figure(POINTS + [above, far_right], [MEASURED])
    ax = fig.axes[-1]
    for p in (above, far_right):
        assert (p.intensity, p.tflops) in _plotted(fig)
        assert ax.get_xlim()[0] < p.intensity < ax.get_xlim()[1]
        assert ax.get_ylim()[0] < p.tflops < ax.get_ylim()[1]


def test_zero_intensity_kernels_get_a_bandwidth_panel():
    moves = [KernelPoint("your transpose", 0.0, 0.0, "learner", gbs=3100.0),
             KernelPoint("naive transpose", 0.0, 0.0, "baseline", gbs=900.0)]
    fig = roofline_figure(POINTS + moves, [MEASURED, SPEC])
    assert len(fig.axes) == 2
    panel = fig.axes[0]
    assert {(0.0, 3100.0), (1.0, 900.0)} <= _plotted(fig, 0)
    assert "your transpose" in [t.get_text() for t in panel.get_xticklabels()]
    assert "74 %" in _texts(fig)  # 3100 of the first ceiling's 4183 GB/s
    assert plot_roofline(POINTS + moves, [MEASURED]).startswith(PNG_MAGIC)


def test_zero_intensity_without_bandwidth_and_zero_rate_do_not_crash():
    odd = [KernelPoint("no bandwidth given", 0.0, 0.0, "learner"),
           KernelPoint("nothing measured", 3.0, 0.0, "baseline")]
    png = plot_roofline(odd, [MEASURED])
    assert png.startswith(PNG_MAGIC)
    fig = roofline_figure(odd, [MEASURED])
    assert "GB/s\nnot given" in _texts(fig)
    (x, y), = _plotted(fig)  # the zero-rate kernel sits on the floor of the plot
    assert x == 3.0 and y == pytest.approx(fig.axes[-1].get_ylim()[0] * 1.2)


def test_only_ceilings_still_make_a_plot():
    assert plot_roofline([], [MEASURED]).startswith(PNG_MAGIC)


def test_achieved_bandwidth_follows_from_intensity():
    assert KernelPoint("k", 2.0, 8.0, "learner").achieved_gbs == pytest.approx(4000.0)
    assert KernelPoint("t", 0.0, 0.0, "learner").achieved_gbs is None


@pytest.mark.parametrize("ceilings", [[], [Ceilings(0.0, 61.0, "broken")]])
def test_missing_or_broken_ceilings_are_refused(ceilings):
    with pytest.raises(ValueError, match="(?i)ceilings"):
        roofline_figure(POINTS, ceilings)
