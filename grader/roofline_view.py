"""The roofline picture of a grading: each task's kernel, its naive baseline (and the
vendor library where the spec names one) under the ceilings the grading used.

Intensity comes from the task's FLOP and byte formulas (the work the task needs);
where Nsight Compute counted FP32 instructions and DRAM bytes, a second point shows
the intensity the kernel really had, so extra traffic shows up as a shift to the left.
"""
from __future__ import annotations

from hardware.roofline import Ceilings, KernelPoint, plot_roofline

from grader.result import GradeResult

UNIT_NAMES = {"fp32": "FP32", "bf16_tensor": "BF16 tensor", "fp16_tensor": "FP16 tensor",
              "int8_tensor": "INT8 tensor", "fp8_tensor": "FP8 tensor"}


def points_and_ceilings(result: GradeResult, compute_units: dict[str, str]) -> tuple[list[KernelPoint], list[Ceilings]]:
    points: list[KernelPoint] = []
    ceilings: dict[float, Ceilings] = {}
    for t in result.tasks:
        if not t.timing or not t.timing.sizes[0].roofline:
            continue
        several = len(t.timing.sizes) > 1
        for tm in t.timing.sizes:
            intensity = tm.flops / tm.bytes if tm.bytes else 0.0
            at = f", {tm.label}" if several else ""
            for kind, seconds, label in (("learner", tm.learner_s, f"{t.name} (yours{at})"),
                                         ("baseline", tm.baseline_s, f"{t.name} (naive{at})"),
                                         ("vendor", tm.vendor_s, f"{t.name} (PyTorch{at})")):
                if seconds:
                    points.append(KernelPoint(label, intensity, tm.flops / seconds / 1e12, kind,
                                              tm.bytes / seconds / 1e9))
        rf = t.timing.sizes[0].roofline
        profile = t.profile
        if profile and profile.kernels and all(k.dram_bytes for k in profile.kernels):
            flops = sum(k.fp32_flops or 0.0 for k in profile.kernels)
            nbytes = sum(k.dram_bytes for k in profile.kernels)
            seconds = sum(k.duration_us for k in profile.kernels) * 1e-6
            if flops > 0 and compute_units.get(t.name) == "fp32":
                points.append(KernelPoint(f"{t.name} (yours, ncu counters)", flops / nbytes,
                                          flops / seconds / 1e12, "learner", nbytes / seconds / 1e9))
        if rf.compute_tflops:
            unit = UNIT_NAMES.get(compute_units.get(t.name, "fp32"), "compute")
            ceilings.setdefault(rf.compute_tflops, Ceilings(
                rf.bandwidth_gbs, rf.compute_tflops,
                f"{unit}: {rf.compute_tflops:.0f} TFLOP/s, copy {rf.bandwidth_gbs:.0f} GB/s"))
    return points, sorted(ceilings.values(), key=lambda c: c.compute_tflops)


def roofline_png(result: GradeResult) -> bytes | None:
    """PNG bytes, or None when nothing was timed (no GPU, nothing correct)."""
    from grader.spec import find
    try:
        exercise = find(result.exercise)
        units = {t.name: t.compute for t in exercise.tasks}
    except Exception:
        units = {}
    points, ceilings = points_and_ceilings(result, units)
    if not points or not ceilings:
        return None
    return plot_roofline(points, ceilings, title=f"Exercise {result.exercise}: {result.title}")
