"""Roofline plots: where a kernel sits between the memory roof and the compute roof.

A kernel doing F FLOPs while moving B bytes has arithmetic intensity I = F / B. It cannot beat
``min(bandwidth * I, peak compute)``: left of the ridge point it is starved for bytes, right of
it for arithmetic. Plotting achieved TFLOP/s against I on log-log axes shows at a glance which
roof a kernel is under and how far below it sits.

Kernels that do no arithmetic at all (a copy, a transpose) have I = 0, which a log axis cannot
show, and 0 TFLOP/s, which it cannot show either. Their honest measure is bytes per second, so
they get a narrow panel of their own to the left of the roofline: achieved GB/s against the same
bandwidth ceilings that form the memory roof. Nothing is clamped to a made-up intensity.

matplotlib is imported inside the functions (object-oriented API, Agg canvas, no pyplot), so
the ``hardware`` package imports without it and no global plotting state is touched.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Ceilings:
    bandwidth_gbs: float
    compute_tflops: float
    label: str  # e.g. "H200 measured: copy 4183 GB/s, FP32 61 TFLOP/s"

    @property
    def ridge(self) -> float:
        """Intensity (FLOP/byte) where the memory roof meets the compute roof."""
        return self.compute_tflops * 1e3 / self.bandwidth_gbs


@dataclass(frozen=True)
class KernelPoint:
    label: str
    intensity: float  # FLOP/byte; 0 for pure data movement
    tflops: float
    kind: str  # "learner", "baseline" or "vendor"
    # Achieved DRAM bandwidth. Only needed for zero-intensity kernels (their TFLOP/s is 0);
    # for the others it follows from tflops / intensity.
    gbs: float | None = None

    @property
    def achieved_gbs(self) -> float | None:
        if self.gbs is not None:
            return self.gbs
        if self.intensity > 0:
            return self.tflops * 1e3 / self.intensity
        return None


_KIND_STYLE = {
    "learner": dict(marker="*", s=260, color="#d62728", zorder=6),
    "baseline": dict(marker="o", s=80, color="#7f7f7f", zorder=5),
    "vendor": dict(marker="s", s=80, color="#1f77b4", zorder=5),
}
_KIND_NAME = {"learner": "your kernel", "baseline": "naive baseline", "vendor": "vendor library"}
_ROOF_COLORS = ["#2c3e50", "#e67e22", "#16a085", "#8e44ad"]


def _style(kind: str) -> dict:
    return _KIND_STYLE.get(kind, dict(marker="D", s=70, color="#9467bd", zorder=5))


def _limits(points: list[KernelPoint], ceilings: list[Ceilings]) -> tuple[float, ...]:
    ridges = [c.ridge for c in ceilings]
    xs = [p.intensity for p in points if p.intensity > 0]
    ys = [p.tflops for p in points if p.intensity > 0 and p.tflops > 0]
    tops = [c.compute_tflops for c in ceilings]
    x_lo = min(xs + [min(ridges) / 100]) / 2
    x_hi = max(xs + [max(ridges) * 10]) * 2
    y_hi = max(ys + tops) * 2.5
    # The lowest interesting value: the memory roof at the left edge, or the slowest kernel.
    y_lo = min(ys + [min(c.bandwidth_gbs * x_lo / 1e3 for c in ceilings)]) / 2
    return x_lo, x_hi, y_lo, y_hi


def _label_memory_roofs(ax: Axes, ceilings: list[Ceilings], x_lo: float) -> None:
    """Write each bandwidth along its memory roof, parallel to it and just above it.

    The angle of a slope-1 line on screen depends on the final axes size, so this runs after
    the layout is settled.
    """
    for i, c in enumerate(ceilings):
        x0 = x_lo * 1.6 * 6**i  # staggered, so close roofs do not print on top of each other
        if x0 * 3 > c.ridge:
            continue
        a = ax.transData.transform((x0, c.bandwidth_gbs * x0 / 1e3))
        b = ax.transData.transform((x0 * 10, c.bandwidth_gbs * x0 * 10 / 1e3))
        angle = math.atan2(b[1] - a[1], b[0] - a[0])
        offset = (-7 * math.sin(angle), 7 * math.cos(angle))
        ax.annotate(f"{c.bandwidth_gbs:,.0f} GB/s", xy=(x0, c.bandwidth_gbs * x0 / 1e3),
                    xytext=offset, textcoords="offset points", rotation=math.degrees(angle),
                    rotation_mode="anchor", va="center", fontsize=8,
                    color=_ROOF_COLORS[i % len(_ROOF_COLORS)])


def _draw_roofs(ax: Axes, ceilings: list[Ceilings], x_lo: float, x_hi: float) -> None:
    for i, c in enumerate(ceilings):
        color = _ROOF_COLORS[i % len(_ROOF_COLORS)]
        style = "-" if i == 0 else "--"
        ridge = c.ridge
        ax.plot([x_lo, ridge, x_hi],
                [c.bandwidth_gbs * x_lo / 1e3, c.compute_tflops, c.compute_tflops],
                linestyle=style, linewidth=2 if i == 0 else 1.5, color=color, label=c.label,
                zorder=3)
        ax.plot([ridge], [c.compute_tflops], marker="o", markersize=7, markerfacecolor="white",
                markeredgecolor=color, markeredgewidth=1.5, zorder=4)
        ax.vlines(ridge, ax.get_ylim()[0], c.compute_tflops, colors=color, linestyles=":",
                  linewidth=1, zorder=2)
        ax.annotate(f"ridge {ridge:.3g} FLOP/B", xy=(ridge, c.compute_tflops),
                    xytext=(6, -14 - 11 * i), textcoords="offset points", fontsize=8,
                    color=color)
        # Several roofs are often close together: stagger their labels along the line.
        ax.annotate(f"{c.compute_tflops:,.3g} TFLOP/s", xy=(ridge * 1.3 * 5**i, c.compute_tflops),
                    xytext=(0, 4), textcoords="offset points", fontsize=8, color=color)
    first = ceilings[0]
    y_floor = ax.get_ylim()[0]
    ax.fill_between([x_lo, first.ridge], y_floor, [first.bandwidth_gbs * x_lo / 1e3,
                    first.compute_tflops], color="#3498db", alpha=0.05, zorder=1)
    ax.fill_between([first.ridge, x_hi], y_floor, first.compute_tflops, color="#e74c3c",
                    alpha=0.05, zorder=1)
    ax.text(math.sqrt(x_lo * first.ridge), y_floor * 1.6, "memory-bound", ha="center",
            fontsize=9, color="#2471a3", alpha=0.8)
    ax.text(math.sqrt(first.ridge * x_hi), y_floor * 1.6, "compute-bound", ha="center",
            fontsize=9, color="#b03a2e", alpha=0.8)


def _draw_points(ax: Axes, points: list[KernelPoint], x_hi: float, y_lo: float) -> None:
    seen: set[str] = set()
    for p in points:
        style = dict(_style(p.kind))
        label = _KIND_NAME.get(p.kind, p.kind)
        y = p.tflops
        if y <= 0:  # intensity but no measured rate: pin to the floor, pointing down
            y, style["marker"] = y_lo * 1.2, "v"
        ax.scatter([p.intensity], [y], edgecolors="black", linewidths=0.6,
                   label=None if label in seen else label, **style)
        seen.add(label)
        # Labels go right of the marker, except near the right edge where they would be cut.
        near_edge = p.intensity > x_hi / 10
        ax.annotate(p.label, xy=(p.intensity, y), xytext=(-9 if near_edge else 7, 5),
                    textcoords="offset points", ha="right" if near_edge else "left",
                    fontsize=8, zorder=7,
                    bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.75))


def _draw_movement_panel(ax: Axes, points: list[KernelPoint], ceilings: list[Ceilings]) -> None:
    """Zero-intensity kernels: achieved GB/s against the bandwidth ceilings."""
    top = max([c.bandwidth_gbs for c in ceilings] + [p.gbs or 0 for p in points])
    ax.set_ylim(0, top * 1.15)
    ax.set_xlim(-0.6, len(points) - 0.4)
    for i, c in enumerate(ceilings):
        color = _ROOF_COLORS[i % len(_ROOF_COLORS)]
        ax.axhline(c.bandwidth_gbs, color=color, linestyle="-" if i == 0 else "--",
                   linewidth=2 if i == 0 else 1.5)
    for i, p in enumerate(points):
        style = _style(p.kind)
        if p.gbs is None:
            ax.text(i, top * 0.05, "GB/s\nnot given", ha="center", fontsize=7, color="gray")
            continue
        ax.bar([i], [p.gbs], width=0.6, color=style["color"], alpha=0.35, zorder=2)
        ax.scatter([i], [p.gbs], edgecolors="black", linewidths=0.6, **style)
        pct = f"\n{100 * p.gbs / ceilings[0].bandwidth_gbs:.0f} %"
        ax.annotate(f"{p.gbs:,.0f}{pct}", xy=(i, p.gbs), xytext=(0, -28),
                    textcoords="offset points", ha="center", fontsize=7, zorder=7)
    ax.set_xticks(range(len(points)))
    ax.set_xticklabels([p.label for p in points], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("achieved bandwidth (GB/s)")
    ax.set_title("no FLOPs\n(0 FLOP/B)", fontsize=9)
    ax.grid(axis="y", alpha=0.3)


def roofline_figure(points: list[KernelPoint], ceilings: list[Ceilings],
                    title: str = "") -> Figure:
    """The roofline as a matplotlib Figure (see plot_roofline); useful to inspect or restyle."""
    from matplotlib.figure import Figure

    if not ceilings:
        raise ValueError("a roofline needs at least one Ceilings (bandwidth and compute peak)")
    for c in ceilings:
        if c.bandwidth_gbs <= 0 or c.compute_tflops <= 0:
            raise ValueError(f"ceilings must be positive, got {c}")
    flops_points = [p for p in points if p.intensity > 0]
    movement = [p for p in points if p.intensity <= 0]

    fig = Figure(figsize=(10 if movement else 8.5, 5.6), dpi=150, layout="constrained")
    if movement:
        grid = fig.add_gridspec(1, 2, width_ratios=[1 + 0.35 * len(movement), 6])
        side, ax = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    else:
        side, ax = None, fig.add_subplot(1, 1, 1)

    x_lo, x_hi, y_lo, y_hi = _limits(flops_points, ceilings)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, y_hi)
    _draw_roofs(ax, ceilings, x_lo, x_hi)
    _draw_points(ax, flops_points, x_hi, y_lo)
    ax.set_xlabel("arithmetic intensity (FLOP / byte of DRAM traffic)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.grid(which="major", alpha=0.3)
    ax.grid(which="minor", alpha=0.08)
    # Below the plot, where it cannot hide a point or a roof.
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=8,
               frameon=False, scatterpoints=1, markerscale=0.7)
    if side is not None:
        _draw_movement_panel(side, movement, ceilings)
    if title:
        fig.suptitle(title, fontsize=12)
    fig.draw_without_rendering()  # settle the layout, then label the slanted roofs
    _label_memory_roofs(ax, ceilings, x_lo)
    return fig


def plot_roofline(points: list[KernelPoint], ceilings: list[Ceilings], path: Path | None = None,
                  title: str = "") -> bytes:
    """Render a roofline to PNG bytes (and to ``path`` if given).

    Each Ceilings draws one roof: a memory roof of slope 1 up to its ridge point (marked), then
    a flat compute roof; the first is solid (usually the measured one), the others dashed.
    Kernels are markers by kind (learner, baseline, vendor), each with its label. Points above
    a roof are drawn where they are: that usually means the FLOP or byte count is off, or the
    data came from cache instead of DRAM, and hiding it would hide the lesson. Kernels with zero
    intensity appear in a side panel as achieved GB/s (see the module docstring).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = roofline_figure(points, ceilings, title)
    buffer = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buffer)
    png = buffer.getvalue()
    if path is not None:
        Path(path).write_bytes(png)
    return png


__all__ = ["Ceilings", "KernelPoint", "plot_roofline", "roofline_figure"]
