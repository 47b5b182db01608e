"""The bf16 tensor-core ceiling: `grade hardware` measures mma.sync and, on Hopper, wgmma; the
roofline draws the faster of the two."""
from __future__ import annotations

import importlib

import pytest

from grader.limits import limits_for

# The module, not the function of the same name that the hardware package exports.
measure = importlib.import_module("hardware.measure")

BASE = {"device": "NVIDIA H100 80GB HBM3", "sm_count": 132, "clock_mhz": 1980, "copy_gbs": 3000.0,
        "fp32_tflops": 60.0, "smem_gbs": 30000.0, "l2_gbs": 10000.0, "latency_l1_ns": 16.0,
        "latency_l2_ns": 140.0, "latency_hbm_ns": 330.0, "latency_l1_cycles": 30.0,
        "latency_l2_cycles": 270.0, "latency_hbm_cycles": 650.0, "bf16_mma_tflops": 600.0}


def test_a_result_from_before_the_wgmma_benchmark_still_loads():
    assert measure.Measured.from_json(BASE).bf16_wgmma_tflops is None


def test_a_wgmma_result_loads_and_may_be_null():
    assert measure.Measured.from_json(dict(BASE, bf16_wgmma_tflops=900.0)).bf16_wgmma_tflops == 900.0
    assert measure.Measured.from_json(dict(BASE, bf16_wgmma_tflops=None)).bf16_wgmma_tflops is None


def test_a_wgmma_result_that_is_not_a_number_is_refused():
    with pytest.raises(measure.MeasureError, match="bf16_wgmma_tflops"):
        measure.Measured.from_json(dict(BASE, bf16_wgmma_tflops="fast"))


@pytest.mark.parametrize("wgmma, ceiling", [(900.0, 900.0), (None, 600.0)])
def test_the_tensor_ceiling_is_the_fastest_instruction_measured(monkeypatch, wgmma, ceiling):
    measured = measure.Measured.from_json(dict(BASE, bf16_wgmma_tflops=wgmma))
    monkeypatch.setattr(measure, "cached", lambda *_: measured)
    limits = limits_for("NVIDIA H100 80GB HBM3", 3000.0)
    assert limits.compute["bf16_tensor"] == ceiling
    assert "measured by `grade hardware`" in limits.source


def test_the_hardware_table_shows_both_tensor_rows():
    from hardware.specs import spec_for
    measured = measure.Measured.from_json(dict(BASE, bf16_wgmma_tflops=900.0))
    rows = {row[0]: row for row in measure.comparison_rows(measured, spec_for("NVIDIA H100 80GB HBM3"))}
    assert rows["BF16 tensor, wgmma (TFLOP/s)"][1] == "900.0"
    assert rows["BF16 tensor, mma.sync (TFLOP/s)"][1] == "600.0"
    assert rows["BF16 tensor, wgmma (TFLOP/s)"][3] == "91 %"


def test_hopper_builds_the_microbenchmarks_for_its_arch_specific_variant():
    assert measure.ARCH_SPECIFIC["sm_90"] == "sm_90a"
