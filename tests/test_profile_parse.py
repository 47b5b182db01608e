"""Reading Nsight Compute reports into the teaching summary, on a CPU.

The fixture is a real report recorded on an H200 while the grader profiled the
reference solutions of exercise 01; NVTX ranges named ``s2s/<task>`` tell which
task launched each kernel.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from grader import spec
from grader.profile import summarize
from grader.report import kernel_lines

pytest.importorskip("ncu_report", reason="reading Nsight Compute reports needs `pip install ncu-report`")

REPORT = Path(__file__).resolve().parent / "fixtures" / "h200_ex01_solutions.ncu-rep"
TASKS = ["vector_add", "reduce_sum", "transpose"]
KERNELS = {"vector_add": "vadd_vec4", "reduce_sum": "reduce_kernel", "transpose": "transpose_tiled"}
# H200: about 4.8 TB/s of HBM3e on the spec sheet; nothing can exceed that by much.
PHYSICAL_GBS = 5000.0


@pytest.fixture(scope="module")
def profiles():
    return summarize(REPORT, TASKS)


@pytest.fixture(scope="module")
def kernels(profiles):
    return {task: p.kernels[0] for task, p in profiles.items()}


def test_one_kernel_per_task_with_its_name(profiles):
    assert set(profiles) == set(TASKS)
    for task, profile in profiles.items():
        assert profile.available, profile.message
        assert [k.name for k in profile.kernels] == [KERNELS[task]]


@pytest.mark.parametrize("task", TASKS)
def test_duration_and_bandwidth_are_physical(kernels, task):
    k = kernels[task]
    assert 1.0 < k.duration_us < 10_000.0
    assert 0 < k.dram_gbs < PHYSICAL_GBS


@pytest.mark.parametrize("task", TASKS)
def test_dram_traffic_matches_the_minimal_bytes_of_the_task(kernels, task):
    """A solution at the benchmark size moves what the exercise's byte formula says, give or take
    what the 60 MB L2 keeps; and bytes = time x bandwidth."""
    k = kernels[task]
    t = spec.find("01").task(task)
    _, minimal = t.work(t.benchmarks[0])
    assert k.dram_bytes == pytest.approx(minimal, rel=0.1)
    assert k.dram_bytes == pytest.approx(k.duration_us * 1e-6 * k.dram_gbs * 1e9, rel=1e-3)
    assert k.tensor_pipe_pct is not None and k.tensor_pipe_pct < 1.0     # no tensor cores in fp32 adds


@pytest.mark.parametrize("task", TASKS)
def test_memory_bound_kernels_are_memory_bound(kernels, task):
    k = kernels[task]
    assert k.memory_pct > 60.0
    assert k.compute_pct < k.memory_pct


@pytest.mark.parametrize("task", TASKS)
def test_occupancy_is_a_percentage(kernels, task):
    k = kernels[task]
    assert 0 < k.theoretical_occupancy_pct <= 100.0
    # Achieved occupancy is sampled, so it may overshoot the theoretical value by a hair.
    assert 0 < k.achieved_occupancy_pct <= k.theoretical_occupancy_pct * 1.01


def test_achieved_occupancy_never_shown_above_100(kernels):
    """The sampled value for reduce_kernel is 100.01% in the raw report."""
    assert all(k.achieved_occupancy_pct <= 100.0 for k in kernels.values())


def test_launch_configuration_and_registers(kernels):
    vadd = kernels["vector_add"]
    assert (vadd.block, vadd.grid) == ("256", str(2 ** 26 // 4 // (256 * 4)))   # float4, 4 per thread
    tiled = kernels["transpose"]
    assert (tiled.block, tiled.grid) == ("256", str((8192 // 32) ** 2))
    for k in kernels.values():
        assert 1 <= k.registers <= 255


def test_coalescing_of_solutions_is_perfect(kernels):
    for k in kernels.values():
        assert k.global_load_efficiency_pct == pytest.approx(100.0)
    assert kernels["transpose"].global_store_efficiency_pct == pytest.approx(100.0)


def test_occupancy_limiter_named_only_below_full_occupancy(kernels):
    for k in kernels.values():
        if k.theoretical_occupancy_pct >= 99.5:
            assert k.occupancy_limiter is None
        else:
            assert k.occupancy_limiter in {"registers", "shared memory", "warps per SM", "blocks per SM", "barriers"}


def test_stalls_are_ranked_shares(kernels):
    for k in kernels.values():
        assert 1 <= len(k.top_stalls) <= 3
        shares = [share for _, share in k.top_stalls]
        assert shares == sorted(shares, reverse=True)
        assert all(0 <= s <= 100 for s in shares) and sum(shares) <= 100.0 + 1e-9
        # A memory-bound kernel waits on memory more than on anything else.
        assert "long scoreboard" in k.top_stalls[0][0]


def test_advice_is_plain_text(kernels):
    advice = [a for k in kernels.values() for a in k.advice]
    assert advice, "ncu gives advice for at least one of these kernels"
    for a in advice:
        assert "@section:" not in a and "@" not in a.split("https://")[0]
        assert a == " ".join(a.split())           # no line breaks or runs of spaces
        assert ": " in a                          # "Title: message"


def test_unknown_task_gets_no_kernel_message():
    profiles = summarize(REPORT, ["softmax"])
    assert list(profiles) == ["softmax"]
    assert profiles["softmax"].kernels == []
    assert "no kernel was launched" in profiles["softmax"].message


def test_subset_of_tasks_only_gets_its_own_kernels():
    profiles = summarize(REPORT, ["transpose"])
    assert [k.name for k in profiles["transpose"].kernels] == ["transpose_tiled"]


@pytest.mark.parametrize("task", TASKS)
def test_rendered_lines_show_time_and_bandwidth(kernels, task):
    k = kernels[task]
    lines = kernel_lines(k)
    first = lines[0]
    assert first.startswith(f"{k.name}<<<{k.grid}, {k.block}>>>: ")
    assert f"{k.duration_us:.1f} µs" in first
    assert f"DRAM {k.dram_gbs:.0f} GB/s" in first
    assert any(line.strip().startswith("occupancy ") for line in lines)
    assert any("warps mostly stall on" in line for line in lines)
