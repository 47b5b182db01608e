"""What the hardware allows: the roofline ceilings a timing is drawn against, and the physical
limits no correct kernel can beat (a time below them means the timer missed the work).

Not to be confused with ``grader.protocol.Ceilings``, the copy bandwidth the worker measures: that
measurement is one of the inputs here.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Limits:
    """Roofline ceilings and physical limits of one GPU. The empty default draws no roofline
    and judges no time impossible (a sanitizer run, which times nothing)."""
    bandwidth_gbs: float | None = None          # the roofline's memory ceiling
    compute: dict[str, float | None] = field(default_factory=dict)   # TFLOP/s per compute unit
    source: str = ""                            # where the ceilings come from, said under the roofline
    physical_gbs: float | None = None           # memory traffic no kernel can beat
    physical_tflops: dict[str, float] = field(default_factory=dict)  # compute no kernel can beat


def limits_for(device_name: str, copy_gbs: float | None, trusted: bool = True) -> Limits:
    """Bandwidth and compute ceilings for the roofline: measured where we have them. A copy
    bandwidth measured beside another process's work (not ``trusted``) sets no physical limit."""
    bandwidth_gbs = copy_gbs
    compute: dict[str, float | None] = {}
    source = "copy bandwidth measured now"
    try:
        from hardware.specs import spec_for
        spec = spec_for(device_name)
    except Exception:  # the roofline is information; grading goes on without it
        spec = None
    measured = None
    try:
        from hardware.measure import cached
        from grader.build import cache_dir
        measured = cached(cache_dir() / "hardware", device_name)
    except Exception:
        measured = None
    # What no kernel can beat: the spec sheet's peaks (with 5% slack for clocks above boost),
    # or, for a GPU without a spec sheet, 1.3x the copy bandwidth measured now.
    physical_gbs = (spec.memory_bandwidth_gbs * 1.05 if spec is not None
                    else (copy_gbs or 0) * 1.3 if trusted else 0) or None
    physical_tflops: dict[str, float] = {}
    if spec is not None:
        physical_tflops = {k: v * 1.05 for k, v in {
            "fp32": spec.fp32_tflops, "bf16_tensor": spec.bf16_tensor_tflops, "fp16_tensor": spec.fp16_tensor_tflops,
            "int8_tensor": spec.int8_tensor_tops, "fp8_tensor": spec.fp8_tensor_tflops}.items() if v}
        compute = {"fp32": spec.fp32_tflops, "bf16_tensor": spec.bf16_tensor_tflops,
                   "fp16_tensor": spec.fp16_tensor_tflops, "int8_tensor": spec.int8_tensor_tops,
                   "fp8_tensor": spec.fp8_tensor_tflops}
        source += f"; compute peaks from the {spec.name} spec sheet"
        if not copy_gbs:
            bandwidth_gbs = spec.memory_bandwidth_gbs
    if measured is not None:
        compute["fp32"] = measured.fp32_tflops
        # The tensor cores' ceiling is the fastest instruction measured for them: wgmma where the
        # GPU has it (mma.sync reaches about two thirds of it on Hopper), else mma.sync.
        tensor = max(filter(None, (measured.bf16_mma_tflops,
                                   getattr(measured, "bf16_wgmma_tflops", None))), default=None)
        if tensor:
            compute["bf16_tensor"] = tensor
        source = "copy bandwidth measured now; compute peaks measured by `grade hardware`"
    return Limits(bandwidth_gbs=bandwidth_gbs, compute=compute, source=source,
                  physical_gbs=physical_gbs, physical_tflops=physical_tflops)
