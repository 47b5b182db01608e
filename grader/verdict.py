"""The verdict on one task's run: from the worker's raw outcome to a status, a one-line summary
and points; timings become measurements against the roofline, and a time faster than the hardware
allows is judged impossible."""
from __future__ import annotations

from grader.limits import Limits
from grader.protocol import Problem, SizeTiming, TaskOutcome
from grader.result import CaseResult, Measurement, Points, Roofline, TaskResult, Timing, geometric_mean
from grader.spec import Task


def apply_run(tr: TaskResult, task: Task, raw: TaskOutcome, limits: Limits) -> None:
    tr.cases = list(raw.cases)
    tr.correct = raw.correct
    error = raw.error
    if raw.timing:
        tr.timing = _timing(task, raw.timing, limits)
        if error is None:
            error = next(filter(None, (_impossible(task, m, limits) for m in tr.timing.sizes)), None)
            if error:
                tr.correct = False
    speed_ok = bool(tr.timing and tr.timing.passed and tr.correct)
    tr.points = Points(task.points.correct if tr.correct else 0.0, task.points.speed if speed_ok else 0.0,
                       task.points.correct, task.points.speed)
    failing = next((c for c in tr.cases if not c.passed), None)
    if error is not None and error.kind == "disturbed":     # not the learner's doing: no speed verdict
        tr.timing, tr.error, tr.status = None, error, "not run"
        tr.summary = f"correct ({tr.cases_passed}/{tr.cases_total}); not timed: {error.message}"
        return
    if error is None and failing is not None and failing.error:
        error = Problem(failing.error.kind, f"failed for {failing.label}: {failing.error.message}")
    if error:
        tr.error = error
        tr.status = "failed"
        tr.summary = error.message
    elif failing is not None:
        tr.status = "failed"
        tr.summary = f"wrong result for {failing.label}: " + describe_failure(failing)
    elif not tr.correct:
        tr.status, tr.summary = "failed", "not graded"
    elif tr.timing is None:
        tr.status, tr.summary = "passed", f"correct ({tr.cases_passed}/{tr.cases_total}); not timed"
    elif speed_ok:
        tr.status = "passed"
        tr.summary = (f"correct ({tr.cases_passed}/{tr.cases_total}) and {tr.timing.speedup:.1f}x the baseline"
                      f"{_over_sizes(tr.timing)} (needs {task.min_speedup:g}x){_clock_note(tr.timing)}")
    else:
        tr.status = "failed"
        tr.summary = (f"correct ({tr.cases_passed}/{tr.cases_total}), but only {tr.timing.speedup:.2f}x the "
                      f"naive baseline{_over_sizes(tr.timing)} where {task.min_speedup:g}x is required"
                      f"{_clock_note(tr.timing)}")


def _clock_note(timing: Timing) -> str:
    """Where the grader's own clock saw more of the learner's work than the learner's events did."""
    missed = any(m.events_missed_work for m in timing.sizes)
    return ", by the grader's own clock: your CUDA events missed part of the work" if missed else ""


def _over_sizes(timing: Timing) -> str:
    n = len(timing.sizes)
    return f" (geometric mean over {n} sizes)" if n > 1 else ""


def _timing(task: Task, sizes: list[SizeTiming], limits: Limits) -> Timing:
    measurements = []
    for s in sizes:
        m = Measurement(label=s.label, case=s.case, reps=s.reps, learner_s=s.learner_s, baseline_s=s.baseline_s,
                        speedup=s.baseline_s / s.learner_s, learner_spread=s.learner_spread,
                        baseline_spread=s.baseline_spread, flops=s.flops, bytes=s.bytes, vendor_s=s.vendor_s,
                        vendor_ratio=s.vendor_s / s.learner_s if s.vendor_s else None,
                        learner_wall_s=s.learner_wall_s, learner_events_s=s.learner_events_s, clock=s.clock)
        m.roofline = _roofline(task, m, limits)
        measurements.append(m)
    ratios = [m.vendor_ratio for m in measurements]
    return Timing(measurements, geometric_mean([m.speedup for m in measurements]), task.min_speedup,
                  geometric_mean(ratios) if all(ratios) else None)


def _impossible(task: Task, m: Measurement, limits: Limits) -> Problem | None:
    """A time below the physical floor means the timer did not see the work."""
    gbs = m.bytes / m.learner_s / 1e9
    tflops = m.flops / m.learner_s / 1e12
    limit_gbs = limits.physical_gbs
    limit_tflops = limits.physical_tflops.get(task.compute)
    if limit_gbs and gbs > limit_gbs:
        what = f"{gbs:.0f} GB/s of memory traffic where this GPU's memory moves at most {limit_gbs:.0f} GB/s"
    elif limit_tflops and tflops > limit_tflops:
        what = f"{tflops:.1f} TFLOP/s where this GPU peaks at {limit_tflops:.1f} TFLOP/s ({task.compute})"
    else:
        return None
    at = f" at {m.label}" if len(task.benchmarks) > 1 else ""
    return Problem("impossible time", (
        f"measured {m.learner_s * 1e6:.1f} µs for this work{at}, which would mean {what}: faster than the "
        "hardware allows, so part of the work happened outside the timed call (another stream, a host "
        "thread, or results reused from an earlier call), or in lower precision than the task asks"))


def describe_failure(case: CaseResult) -> str:
    if case.error:
        return case.error.message
    m = case.mismatch
    if m is None:
        return "failed"
    where = f"{m.output}[{']['.join(map(str, m.index))}]"
    if m.reason == "not written":
        return (f"{where} was never written (it still holds the poison value the grader puts in every output "
                f"before the call); {m.bad} of {m.total} elements are wrong")
    if m.reason == "not updated":
        return (f"{where} = {m.got:.7g} is what it held before the call; expected {m.expected:.7g}: the state "
                f"was not updated; {m.bad} of {m.total} elements are wrong")
    if m.reason == "not finite":
        return f"{where} = {m.got!r}, expected {m.expected:.7g}; {m.bad} of {m.total} elements are wrong"
    return (f"{where} = {m.got:.7g}, expected {m.expected:.7g} (error {abs(m.got - m.expected):.3g}, "
            f"tolerance {m.tolerance:.3g}); {m.bad} of {m.total} elements are wrong")


def _roofline(task: Task, timing: Measurement, limits: Limits) -> Roofline | None:
    bw = limits.bandwidth_gbs
    if not bw:
        return None
    peak = limits.compute.get(task.compute)
    t_mem = timing.bytes / (bw * 1e9)
    t_cmp = timing.flops / (peak * 1e12) if peak else 0.0
    floor = max(t_mem, t_cmp)
    return Roofline(bound="memory" if t_mem >= t_cmp else "compute",
                    achieved_gbs=timing.bytes / timing.learner_s / 1e9,
                    achieved_tflops=timing.flops / timing.learner_s / 1e12,
                    floor_s=floor, percent=100.0 * floor / timing.learner_s,
                    bandwidth_gbs=bw, compute_tflops=peak, source=limits.source)
