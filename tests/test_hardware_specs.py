"""The spec sheets: they load, names match the driver's, and the figures agree with each other."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from hardware.specs import (NUMERIC_FIELDS, SPECS_PATH, GpuSpec, SpecError, default_spec,
                            load_specs, spec_for)

SPECS = load_specs()
IDS = [s.key for s in SPECS]

# FP32 lanes per SM (CUDA C++ Programming Guide, arithmetic instruction throughput table).
FP32_LANES = {"sm_75": 64, "sm_80": 64, "sm_86": 128, "sm_89": 128, "sm_90": 128}
# Largest DENSE FP16 tensor rate (FP32 accumulate) in FLOP per clock per SM for each
# architecture. A datasheet's sparse figure is twice the dense one and fails the bound.
DENSE_FP16_PER_SM_CLOCK = {"sm_75": 1024, "sm_80": 2048, "sm_86": 1024, "sm_89": 1024,
                           "sm_90": 4096}
# (shared memory per SM in KB, max resident warps per SM) from the compute-capability table.
SM_LIMITS = {"sm_75": (64, 32), "sm_80": (164, 64), "sm_86": (100, 48), "sm_89": (100, 48),
             "sm_90": (228, 64)}


def test_the_required_gpus_are_all_there():
    required = {"h100-sxm", "h100-pcie", "h200-sxm", "a100-sxm-40gb", "a100-sxm-80gb", "l4",
                "t4", "rtx-3090", "rtx-4090"}
    assert required <= set(IDS)
    assert len(IDS) == len(set(IDS))


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_every_figure_is_positive_and_cited(spec: GpuSpec):
    for name in NUMERIC_FIELDS:
        value = getattr(spec, name)
        if value is None:
            assert name in ("bf16_tensor_tflops", "fp8_tensor_tflops")
            continue
        assert value > 0, name
        assert spec.sources.get(name, "").strip(), f"{spec.key}.{name} has no source"


@pytest.mark.parametrize(("driver_name", "key"), [
    ("NVIDIA H200", "h200-sxm"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("Tesla T4", "t4"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("NVIDIA GeForce RTX 3090", "rtx-3090"),
    ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
    ("NVIDIA A100-PCIE-40GB", "a100-sxm-40gb"),
    ("NVIDIA L4", "l4"),
    ("NVIDIA L40S", "l40s"),
    ("NVIDIA A10", "a10"),
    ("nvidia h100 pcie", "h100-pcie"),  # case does not matter
])
def test_driver_names_find_their_spec_sheet(driver_name: str, key: str):
    spec = spec_for(driver_name)
    assert spec is not None and spec.key == key


@pytest.mark.parametrize("driver_name", [
    "NVIDIA RTX A1000",  # contains "a100" but is another GPU: fragments match whole words
    "NVIDIA L40",        # not the L40S, nor the L4
    "AMD Instinct MI300X",
    "",
])
def test_unknown_gpus_get_no_spec_sheet(driver_name: str):
    assert spec_for(driver_name) is None


def test_default_is_the_h200():
    spec = default_spec()
    assert spec.key == "h200-sxm"
    assert spec.sms == 132 and spec.arch == "sm_90"


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_fp32_peak_is_two_flops_per_lane_per_clock(spec: GpuSpec):
    expected = 2 * spec.sms * FP32_LANES[spec.arch] * spec.boost_clock_mhz * 1e6 / 1e12
    assert spec.fp32_tflops == pytest.approx(expected, rel=0.05)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_tensor_figures_are_dense_and_ordered(spec: GpuSpec):
    dense_limit = (DENSE_FP16_PER_SM_CLOCK[spec.arch] * spec.sms * spec.boost_clock_mhz * 1e6
                   / 1e12 * 1.05)
    assert spec.fp16_tensor_tflops <= dense_limit, "looks like a sparse figure"
    # Even GeForce Ampere, the slowest here with FP32 accumulation, doubles the FP32 rate.
    assert spec.fp16_tensor_tflops >= 1.95 * spec.fp32_tflops
    assert spec.fp16_tensor_tflops <= spec.int8_tensor_tops <= 4 * dense_limit
    if spec.bf16_tensor_tflops is not None:
        assert spec.fp32_tflops <= spec.bf16_tensor_tflops <= spec.fp16_tensor_tflops
    if spec.fp8_tensor_tflops is not None:
        assert spec.bf16_tensor_tflops <= spec.fp8_tensor_tflops <= spec.int8_tensor_tops


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_number_formats_match_the_architecture(spec: GpuSpec):
    # BF16 tensor cores arrived with Ampere, FP8 with Ada and Hopper.
    assert (spec.bf16_tensor_tflops is None) == (spec.arch == "sm_75")
    assert (spec.fp8_tensor_tflops is not None) == (spec.arch in ("sm_89", "sm_90"))


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_per_sm_limits_match_the_compute_capability_table(spec: GpuSpec):
    assert (spec.smem_per_sm_kb, spec.max_warps_per_sm) == SM_LIMITS[spec.arch]
    assert spec.regs_per_sm == 65536
    assert spec.max_threads_per_block == 1024


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_ridge_point_is_plausible(spec: GpuSpec):
    # Every GPU here needs between a few and ~100 FP32 FLOPs per DRAM byte to leave the memory
    # roof; a typo in bandwidth or TFLOP/s by 10x lands outside.
    assert 5 < spec.ridge_fp32 < 150
    assert spec.ridge_fp32 == pytest.approx(spec.fp32_tflops * 1e3 / spec.memory_bandwidth_gbs)


def test_hopper_memory_is_what_the_datasheets_say():
    h200, h100 = spec_for("NVIDIA H200"), spec_for("NVIDIA H100 80GB HBM3")
    assert (h200.memory_gb, h200.memory_bandwidth_gbs) == (141.0, 4800.0)
    assert (h100.memory_gb, h100.memory_bandwidth_gbs) == (80.0, 3350.0)
    assert math.isclose(h200.fp32_tflops, h100.fp32_tflops)  # same GH100 compute


# ---------------------------------------------------------------- the loader refuses bad data

GOOD = """
[documents]
sheet = "Example datasheet"
guide = "Example guide"

[gpu.example]
name = "Example GPU"
match = ["example"]
arch = "sm_90"
sms = 10
boost_clock_mhz = 1000
fp32_tflops = 2.56
bf16_tensor_tflops = 40.0
fp16_tensor_tflops = 40.0
int8_tensor_tops = 80.0
memory_gb = 8.0
memory_bandwidth_gbs = 200.0
l2_mb = 4.0
smem_per_sm_kb = 228
regs_per_sm = 65536
max_warps_per_sm = 64
max_threads_per_block = 1024

[gpu.example.cited]
sheet = ["sms", "boost_clock_mhz", "fp32_tflops", "bf16_tensor_tflops", "fp16_tensor_tflops",
         "int8_tensor_tops", "memory_gb", "memory_bandwidth_gbs", "l2_mb"]
guide = ["smem_per_sm_kb", "regs_per_sm", "max_warps_per_sm", "max_threads_per_block"]
"""


def _load(tmp_path: Path, text: str) -> list[GpuSpec]:
    path = tmp_path / "specs.toml"
    path.write_text(text)
    return load_specs(path)


def test_a_well_formed_file_loads(tmp_path: Path):
    (spec,) = _load(tmp_path, GOOD)
    assert spec.key == "example" and spec.fp8_tensor_tflops is None
    assert spec.sources["sms"] == "Example datasheet"
    assert spec_for("Example GPU 8GB", [spec]) is spec


@pytest.mark.parametrize(("change", "message"), [
    (("sms = 10", "sms = -10"), "'example': field 'sms' must be a positive integer"),
    (("sms = 10", "sms = 10.5"), "'example': field 'sms' must be a positive integer"),
    (("l2_mb = 4.0", "l2_mb = 0"), "'example': field 'l2_mb' must be a positive number"),
    (("l2_mb = 4.0\n", ""), "'example': field 'l2_mb' is missing"),
    (("\"l2_mb\"]", "]"), "'example': field 'l2_mb' has no source"),
    (("sheet = [", "datasheet = ["), "'example': cites unknown document 'datasheet'"),
    (("l2_mb = 4.0", "l2_mb = 4.0\nl2_kb = 4096"), "unknown field(s) ['l2_kb']"),
    (("arch = \"sm_90\"", "arch = \"hopper\""), "field 'arch' must look like 'sm_90'"),
    (("match = [\"example\"]", "match = []"), "field 'match'"),
    (("\"l2_mb\"]", "\"l2_mb\", \"fp8_tensor_tflops\"]"),
     "field 'fp8_tensor_tflops' is cited but has no value"),
])
def test_bad_data_is_refused_naming_gpu_and_field(tmp_path: Path, change, message):
    old, new = change
    assert old in GOOD
    with pytest.raises(SpecError, match=re.escape(message)):
        _load(tmp_path, GOOD.replace(old, new, 1))


def test_invalid_toml_is_reported_as_such(tmp_path: Path):
    with pytest.raises(SpecError, match="not valid TOML"):
        _load(tmp_path, "[gpu.x\n")


def test_the_shipped_file_is_the_one_loaded():
    assert SPECS_PATH.name == "specs.toml" and SPECS_PATH.is_file()
