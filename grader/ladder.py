"""An optimisation ladder: one task written in steps, each step a folder that holds that task's
file, each graded and timed alone as `grade exercise NN --task T --submission FOLDER` does.

A notebook cell names the steps and the one idea each adds::

    from grader.ladder import ladder
    ladder("03", "adamw_multi", [("baselines", "one launch per tensor"), ("steps/2", "one launch")])

On a GPU every step whose folder holds the task's file is graded (correctness and timing, no
Nsight Compute) and the table shows its time, its bandwidth (or FLOP/s where the size is
compute-bound) and its speedup over the naive baseline timed beside it; the steps are then placed
on the roofline. Without a GPU the cell says what it would run, and fills the table only from
measurements recorded beside the exercise (``recorded.json``, key ``ladders``): no number is
shown that was not measured. Folders are relative to the exercise's folder. While nbgrader
autogrades or validates a notebook the steps are not timed: they earn no points.
"""
from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ladder", "Ladder", "Rung", "recorded_rungs"]


@dataclass
class Rung:
    """One step of the ladder and, where it was timed, its time at each benchmark size."""

    folder: str
    idea: str
    status: str = ""                                   # "" while nothing was measured
    seconds: list[float | None] = field(default_factory=list)   # per benchmark size
    speedup: float | None = None                       # geometric mean over the sizes
    measured_on: str = ""


@dataclass
class Ladder:
    exercise: str
    task: str
    sizes: list[str]                  # each benchmark size, described
    work: list[tuple[float, float]]   # (FLOPs, bytes) per size
    ridge: float                      # FLOP/byte where the memory roof meets the compute roof
    bandwidth_gbs: float
    compute_tflops: float
    rungs: list[Rung]
    note: str = ""

    def _cell(self, size: int, seconds: float | None) -> str:
        if not seconds:
            return ""
        flops, nbytes = self.work[size]
        if flops / max(nbytes, 1.0) < self.ridge:
            return f"{seconds * 1e6:,.1f} µs, {nbytes / seconds / 1e9:,.0f} GB/s"
        return f"{seconds * 1e6:,.1f} µs, {flops / seconds / 1e12:,.1f} TFLOP/s"

    def rows(self) -> list[list[str]]:
        header = ["step", "idea", *[f"size {i + 1}" for i in range(len(self.sizes))], "speedup", ""]
        body = []
        for i, r in enumerate(self.rungs):
            cells = [self._cell(s, r.seconds[s] if s < len(r.seconds) else None) for s in range(len(self.sizes))]
            body.append([f"{i + 1} ({r.folder})", r.idea, *cells,
                         f"{r.speedup:.1f}x" if r.speedup else "", r.status])
        return [header, *body]

    def legend(self) -> str:
        return "; ".join(f"size {i + 1}: {s}" for i, s in enumerate(self.sizes))

    def __str__(self) -> str:
        rows = self.rows()
        widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join([f"Ladder of {self.task} (exercise {self.exercise})", *lines, self.legend(),
                          *([self.note] if self.note else [])])

    def _repr_html_(self) -> str:
        rows = self.rows()
        head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows[1:])
        note = f"<p>{html.escape(self.note)}</p>" if self.note else ""
        return (f"<p><b>Ladder of {html.escape(self.task)}</b> (exercise {html.escape(self.exercise)})</p>"
                f"<table><tr>{head}</tr>{body}</table><p>{html.escape(self.legend())}</p>{note}")

    def figure(self):
        """The measured steps on the roofline, one point per step and size; None where none was measured."""
        from hardware.roofline import Ceilings, KernelPoint, roofline_figure
        points = []
        for i, r in enumerate(self.rungs):
            for s, seconds in enumerate(r.seconds):
                if seconds:
                    flops, nbytes = self.work[s]
                    label = f"{i + 1} {r.idea}" + (f" (size {s + 1})" if len(self.sizes) > 1 else "")
                    points.append(KernelPoint(label, flops / nbytes if nbytes else 0.0, flops / seconds / 1e12,
                                              "baseline" if i == 0 else "learner", nbytes / seconds / 1e9))
        if not points:
            return None
        ceilings = [Ceilings(self.bandwidth_gbs, self.compute_tflops,
                             f"{self.compute_tflops:,.0f} TFLOP/s, copy {self.bandwidth_gbs:,.0f} GB/s")]
        where = {r.measured_on for r in self.rungs if r.measured_on}
        fig = roofline_figure(points, ceilings, title=f"The ladder of {self.task}\n{', '.join(sorted(where))}")
        fig.set_label("ladder")
        return fig


def _spec_ceilings(exercise: Any, task: Any) -> tuple[float, float]:
    from grader.derivations.core import reference_gpu
    from grader.figures import UNITS
    spec = reference_gpu().spec
    compute = getattr(spec, UNITS.get(task.compute, "fp32_tflops"), None) or spec.fp32_tflops
    return float(spec.memory_bandwidth_gbs), float(compute)


def recorded_rungs(exercise: Any, task: str) -> tuple[dict[str, list[float | None]], str]:
    """The step times recorded beside the exercise: {folder: seconds per benchmark size}, and the GPU."""
    path = exercise.folder / "recorded.json"
    if not path.is_file():
        return {}, ""
    data = json.loads(path.read_text(encoding="utf-8"))
    steps = data.get("ladders", {}).get(task, {})
    n = len(exercise.task(task).benchmarks)
    out = {}
    for folder, rows in steps.items():
        seconds: list[float | None] = [None] * n
        for row in rows:
            seconds[row["benchmark"]] = row["us"] * 1e-6
        out[folder] = seconds
    return out, data.get("gpu", "")


def _grade_rung(exercise: Any, task: Any, rung: Rung) -> None:
    from grader.notebook import quiet
    from grader.pipeline import Options, grade
    with quiet():
        result = grade(exercise.id, Options(submission=exercise.folder / rung.folder, tasks=(task.name,),
                                            profile=False))
    t = result.task(task.name)
    if not t.correct:
        rung.status = f"not correct: {t.summary}" if t.summary else t.status
        return
    if t.timing is None:
        rung.status = t.summary or "correct, not timed"
        return
    rung.seconds = [m.learner_s for m in t.timing.sizes]
    rung.speedup = t.timing.speedup
    rung.status = "correct"
    rung.measured_on = f"measured on {result.device.name}" if result.device else "measured here"


def ladder(exercise_id: str, task_name: str, steps: list[tuple[str, str]], gpu: bool | None = None) -> Ladder:
    """Grade and time each step of a ladder (see the module's docstring) and show the table and,
    where anything was measured, the steps on the roofline. ``gpu`` overrides the detection."""
    from grader.derivations.core import detect_gpu_name
    from grader.figures import have_matplotlib, show
    from grader.notebook import _display
    from grader.spec import find
    exercise = find(exercise_id)
    task = exercise.task(task_name)
    bandwidth, compute = _spec_ceilings(exercise, task)
    work = [task.work(case) for case in task.benchmarks]
    result = Ladder(exercise.id, task.name, [case.describe() for case in task.benchmarks], work,
                    compute * 1e3 / bandwidth, bandwidth, compute, [Rung(folder, idea) for folder, idea in steps])
    on_gpu = detect_gpu_name() is not None if gpu is None else gpu
    if os.environ.get("NBGRADER_EXECUTION"):   # autograde and validate: the steps earn no points
        print("The ladder is timed when you run this cell yourself; grading the notebook skips it.")
        return result
    if on_gpu:
        for rung in result.rungs:
            if not (exercise.folder / rung.folder / task.source).is_file():
                rung.status = f"to write: {rung.folder}/{task.source}"
                continue
            _grade_rung(exercise, task, rung)
        result.note = "Each step graded alone, its naive baseline timed beside it in the same run."
    else:
        recorded, where = recorded_rungs(exercise, task.name)
        for rung in result.rungs:
            if rung.folder in recorded:
                rung.seconds, rung.status, rung.measured_on = recorded[rung.folder], "recorded", f"recorded on {where}"
        print(f"No GPU here. On a GPU this cell grades each step alone; from {exercise.folder.name}/ that is")
        for rung in result.rungs:
            print(f"    grade exercise {exercise.id} --task {task.name} --submission {rung.folder}")
        print("and the table gets each step's time and bandwidth. "
              + (f"The times below were recorded on an {where}." if recorded else
                 "No step of this ladder has been recorded on a GPU yet, so the table stays empty."))
    _display(result)
    if have_matplotlib():
        fig = result.figure()
        if fig is not None:
            show(fig)
    return result

