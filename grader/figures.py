"""Figures for the notebooks and for `grade exercise --figures DIR`.

- the roofline of an exercise's tasks (your kernels, the naive baselines, PyTorch) under the
  ceilings of the GPU;
- speed against size: the bandwidth or FLOP/s each task reached at each benchmark size;
- how a warp's 32 loads fall on 128-byte lines, coalesced against strided;
- loss curves, from any {name: [losses]}.

Drawn from a grading where there is one; otherwise from the measurements an exercise folder
records in ``recorded.json`` (the hidden solutions graded on a real GPU, with where each number
comes from). No figure is drawn from numbers that were not measured. Object-oriented matplotlib
(no pyplot): a figure is shown in a notebook as a PNG and written as one from the command line.
"""
from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MISSING_MATPLOTLIB = "No figures: matplotlib is not installed here; `pip install matplotlib` adds it."

UNITS = {"fp32": "fp32_tflops", "bf16_tensor": "bf16_tensor_tflops", "fp16_tensor": "fp16_tensor_tflops",
         "int8_tensor": "int8_tensor_tops", "fp8_tensor": "fp8_tensor_tflops"}


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def png(fig: "Figure") -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    buffer = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buffer)
    return buffer.getvalue()


def _display(fig: "Figure") -> None:
    """In a notebook, the figure as a PNG; elsewhere its title on one line."""
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
        if get_ipython() is not None:
            display(Image(png(fig)))
            return
    except ImportError:
        pass
    print(f"[figure: {fig.get_label()}]")


def show(fig: "Figure") -> "Figure":
    """Show a figure in the notebook (its label names it: tests list the figures each notebook shows)."""
    _display(fig)
    return fig


# ------------------------------------------------------------------ measurements


@dataclass(frozen=True)
class Point:
    task: str
    size: str               # the benchmark case, as the report labels it
    flops: float
    nbytes: float
    seconds: float
    kind: str               # "learner" (or the recorded solution), "baseline", "vendor"

    @property
    def tflops(self) -> float:
        return self.flops / self.seconds / 1e12

    @property
    def gbs(self) -> float:
        return self.nbytes / self.seconds / 1e9


@dataclass(frozen=True)
class Measured:
    points: tuple[Point, ...]
    source: str                         # one line: where the numbers come from
    bandwidth_gbs: float
    compute: dict[str, float]           # task -> its compute roof in TFLOP/s (or TOP/s)
    recorded: bool                      # True: from recorded.json, not from this machine


def _compute_roofs(exercise: Any, spec: Any) -> dict[str, float]:
    roofs = {}
    for task in exercise.tasks:
        value = getattr(spec, UNITS.get(task.compute, "fp32_tflops"), None) or spec.fp32_tflops
        roofs[task.name] = float(value)
    return roofs


def from_result(result: Any) -> Measured | None:
    """The timed sizes of a grading (grader.result.GradeResult), or None where nothing was timed."""
    from grader.spec import find
    exercise = find(result.exercise)
    points, bandwidth, roofs = [], None, {}
    for t in result.tasks:
        if not t.timing:
            continue
        for m in t.timing.sizes:
            for kind, seconds in (("learner", m.learner_s), ("baseline", m.baseline_s), ("vendor", m.vendor_s)):
                if seconds:
                    points.append(Point(t.name, m.label, m.flops, m.bytes, seconds, kind))
            if m.roofline:
                bandwidth = bandwidth or m.roofline.bandwidth_gbs
                if m.roofline.compute_tflops:
                    roofs[t.name] = m.roofline.compute_tflops
    if not points or bandwidth is None:
        return None
    device = result.device.name if result.device else "this GPU"
    for task in exercise.tasks:
        roofs.setdefault(task.name, 0.0)
    return Measured(tuple(points), f"your grading on {device}", bandwidth, roofs, recorded=False)


def recorded(exercise_id: str) -> Measured | None:
    """The measurements recorded beside the exercise (recorded.json), or None where there are none."""
    from grader.spec import find
    from hardware.specs import default_spec, spec_for
    exercise = find(exercise_id)
    path = exercise.folder / "recorded.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    points = []
    for name, rows in data["tasks"].items():
        task = exercise.task(name)
        for row in rows:
            case = task.benchmarks[row["benchmark"]]
            flops, nbytes = task.work(case)
            seconds = (row["solution_us"] * 1e-6 if "solution_us" in row
                       else flops / (row["solution_tflops"] * 1e12))
            label = case.label or f"size {row['benchmark'] + 1}"
            points.append(Point(name, label, flops, nbytes, seconds, "learner"))
            if "speedup" in row:
                points.append(Point(name, label, flops, nbytes, seconds * row["speedup"], "baseline"))
            if "vendor_ratio" in row:
                points.append(Point(name, label, flops, nbytes, seconds * row["vendor_ratio"], "vendor"))
    spec = spec_for(data["gpu"]) or default_spec()
    return Measured(tuple(points), f"the hidden solutions on an {data['gpu']} (recorded.json)",
                    float(data["copy_gbs"]), _compute_roofs(exercise, spec), recorded=True)


# ------------------------------------------------------------------ figures

KIND_NAMES = {"learner": "yours", "baseline": "naive", "vendor": "PyTorch"}


def roofline(measured: Measured, title: str, mine: str = "yours") -> "Figure":
    """Every point under the memory roof and each task's compute roof."""
    from hardware.roofline import Ceilings, KernelPoint, roofline_figure
    names = dict(KIND_NAMES, learner=mine)
    several = {p.task for p in measured.points if p.kind == "learner"}
    sizes = {t: len({p.size for p in measured.points if p.task == t}) for t in several}
    points = [KernelPoint(f"{p.task} ({names[p.kind]}{', ' + p.size if sizes.get(p.task, 1) > 1 else ''})",
                          p.flops / p.nbytes if p.nbytes else 0.0, p.tflops, p.kind, p.gbs)
              for p in measured.points]
    roofs = sorted({v for v in measured.compute.values() if v})
    ceilings = [Ceilings(measured.bandwidth_gbs, c, f"{c:,.0f} TFLOP/s, copy {measured.bandwidth_gbs:,.0f} GB/s")
                for c in roofs] or [Ceilings(measured.bandwidth_gbs, 1.0, "copy only")]
    fig = roofline_figure(points, ceilings, title=f"{title}\n{measured.source}")
    fig.set_label("roofline")
    return fig


def speed_against_size(measured: Measured, title: str, mine: str = "yours") -> "Figure":
    """Each task's speed at each benchmark size: GB/s where the task is memory-bound by its
    formulas (intensity under the ridge), TFLOP/s where it is compute-bound."""
    from matplotlib.figure import Figure
    tasks = sorted({p.task for p in measured.points}, key=lambda t: [p.task for p in measured.points].index(t))
    fig = Figure(figsize=(4 * min(len(tasks), 4), 3.6 * math.ceil(len(tasks) / 4)), dpi=110, layout="constrained")
    axes = fig.subplots(math.ceil(len(tasks) / 4), min(len(tasks), 4), squeeze=False).ravel()
    for ax, task in zip(axes, tasks):
        pts = [p for p in measured.points if p.task == task]
        roof = measured.compute.get(task) or 0.0
        memory_bound = all(p.flops / max(p.nbytes, 1) < roof * 1e3 / measured.bandwidth_gbs for p in pts) or not roof
        for kind in ("learner", "baseline", "vendor"):
            ks = sorted((p for p in pts if p.kind == kind), key=lambda p: p.nbytes if memory_bound else p.flops)
            if not ks:
                continue
            xs = [p.nbytes if memory_bound else p.flops for p in ks]
            ys = [p.gbs if memory_bound else p.tflops for p in ks]
            ax.plot(xs, ys, marker="o", label=mine if kind == "learner" else KIND_NAMES[kind])
        if memory_bound:
            ax.axhline(measured.bandwidth_gbs, color="k", lw=0.8, ls="--", label="copy")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(task, fontsize=10)
        ax.set_xlabel("bytes moved per call" if memory_bound else "FLOPs per call")
        ax.set_ylabel("GB/s" if memory_bound else "TFLOP/s")
        ax.legend(fontsize=7)
    for ax in axes[len(tasks):]:
        ax.set_visible(False)
    fig.suptitle(f"{title}: speed against size\n{measured.source}", fontsize=10)
    fig.set_label("speed against size")
    return fig


def access_pattern(stride: int = 32, element_bytes: int = 4, line_bytes: int = 128) -> "Figure":
    """Where a warp's 32 loads land: consecutive elements fill one 128-byte line; elements
    `stride` apart touch one line each, and each line moves 32 bytes (a sector) for 4 used."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle
    fig = Figure(figsize=(10, 3.8), dpi=110, layout="constrained")
    axes = fig.subplots(2, 1)
    for ax, step, name in ((axes[0], 1, "coalesced: lane i reads element i"),
                           (axes[1], stride, f"strided: lane i reads element {stride} i")):
        addresses = [lane * step * element_bytes for lane in range(32)]
        lines = sorted({a // line_bytes for a in addresses})
        sectors = len({a // 32 for a in addresses})
        span = (max(addresses) // line_bytes + 1) * line_bytes
        for line in range(span // line_bytes):
            used = line in lines
            ax.add_patch(Rectangle((line * line_bytes, 0), line_bytes, 1, fill=used, alpha=0.15 if used else 1,
                                   edgecolor="#555", facecolor="#1f77b4" if used else "none", lw=0.6))
        for lane, a in enumerate(addresses):
            ax.add_patch(Rectangle((a, 0.15), element_bytes, 0.7, color="#d62728"))
        ax.set_xlim(0, span)
        ax.set_ylim(0, 1)
        ax.set_yticks([])
        ax.set_xlabel("byte address")
        ax.set_title(f"{name}: {len(lines)} line{'s' if len(lines) > 1 else ''} of {line_bytes} B, "
                     f"{sectors} sectors of 32 B moved for {32 * element_bytes} B used", fontsize=9)
    fig.suptitle("One warp, one load instruction", fontsize=11)
    fig.set_label("access pattern")
    return fig


def loss_curves(curves: dict[str, list[float]], title: str = "Loss") -> "Figure":
    from matplotlib.figure import Figure
    fig = Figure(figsize=(6.5, 3.8), dpi=110, layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    for name, losses in curves.items():
        ax.plot(range(1, len(losses) + 1), losses, label=name)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.set_label("loss curves")
    return fig


# ------------------------------------------------------------------ what a notebook or the CLI draws

def exercise_figures(exercise_id: str, result: Any = None) -> list["Figure"]:
    """The roofline and speed against size of an exercise: from ``result`` (a grading) where it
    timed something, else from the measurements recorded beside the exercise, saying so."""
    from grader.spec import find
    if not have_matplotlib():
        print(MISSING_MATPLOTLIB)
        return []
    exercise = find(exercise_id)
    measured = from_result(result) if result is not None else None
    mine = "yours"
    if measured is None:
        measured = recorded(exercise.id)
        mine = "solution"
        if measured is None:
            print("No figures yet: nothing timed on this machine, and no measurements recorded for this "
                  "exercise. Grade it on a GPU and pass the result: exercise_figures(id, grade(id)).")
            return []
        print(f"Drawn from {measured.source}: grade on a GPU and pass the result to see yours.")
    title = f"Exercise {exercise.id}: {exercise.title.split(':')[0]}"
    return [show(roofline(measured, title, mine)), show(speed_against_size(measured, title, mine))]


def grading_figures(result: Any, folder: Path) -> list[Path]:
    """`grade exercise --figures DIR`: the grading's figures as PNG files."""
    from grader.spec import find
    measured = from_result(result)
    if measured is None:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    exercise = find(result.exercise)
    title = f"Exercise {exercise.id}: {exercise.title.split(':')[0]}"
    written = []
    for fig in (roofline(measured, title), speed_against_size(measured, title)):
        path = folder / f"{exercise.slug}-{fig.get_label().replace(' ', '_')}.png"
        path.write_bytes(png(fig))
        written.append(path)
    return written
