"""Performance requirements, measured on the GPU: ratios from one run.

Prints a table (use `pytest -m gpu -s` to see it) and checks the requirements:
exercise 01's vector_add and reduce_sum solutions reach 90% of the device-to-device
copy bandwidth measured in the same grading, transpose 80%; `grade exercise 01`
turns around in at most 15 s with counters and 5 s without, on a warm compile cache.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from grader.pipeline import Options, grade
from grader.spec import find, solutions_dir

pytestmark = pytest.mark.gpu

BANDWIDTH_REQUIREMENT = {"vector_add": 0.90, "reduce_sum": 0.90, "transpose": 0.80}


def test_ex01_solutions_against_copy_bandwidth() -> None:
    ex = find("01")
    solution = grade("01", Options(submission=solutions_dir() / ex.slug, profile=False))
    baseline = grade("01", Options(submission=ex.folder / "baselines", profile=False))
    copy = solution.device.copy_gbs
    rows = []
    for t in solution.tasks:
        b = baseline.task(t.name)
        mine, theirs = t.timing.sizes[0].roofline, b.timing.sizes[0].roofline
        ratio = mine.achieved_gbs / copy
        rows.append((t.name, mine.achieved_gbs, ratio, theirs.achieved_gbs, t.timing.speedup,
                     t.timing.min_speedup, b.timing.speedup))
    print(f"\ndevice copy bandwidth measured in this run: {copy:.0f} GB/s")
    print(f"{'task':<11} {'solution GB/s':>13} {'% of copy':>9} {'baseline GB/s':>13} {'speedup':>8} "
          f"{'needs':>6} {'baseline/baseline':>17}")
    for name, gbs, ratio, bgbs, speedup, need, bself in rows:
        print(f"{name:<11} {gbs:13.0f} {ratio:9.1%} {bgbs:13.0f} {speedup:8.2f} {need:6g} {bself:17.2f}")
    for name, gbs, ratio, *_ in rows:
        assert ratio >= BANDWIDTH_REQUIREMENT[name], \
            f"{name}: {ratio:.1%} of copy bandwidth, requirement {BANDWIDTH_REQUIREMENT[name]:.0%}"
    for name, *_, speedup, need, _b in rows:
        assert speedup >= 1.3 * need, f"{name}: the solution must clear min_speedup {need} by 30% (got {speedup:.2f})"


def _turnaround(*args: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "grader.cli", "exercise", "01", "--submission",
                           str(solutions_dir() / "01_foundations"), "--json", *args],
                          capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr[-2000:]
    return seconds


def test_ex01_turnaround_with_warm_cache(tmp_path) -> None:
    # Warm as on a learner's machine: compiled kernels cached, and Python's byte-compiled modules
    # cached too (an image that sets PYTHONDONTWRITEBYTECODE re-compiles PyTorch's sources at every
    # start, seconds that have nothing to do with grading).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(tmp_path / "pycache")
    _turnaround("--no-profile", env=env)              # warms both caches
    _turnaround(env=env)
    no_profile = min(_turnaround("--no-profile", env=env) for _ in range(2))
    with_profile = _turnaround(env=env)
    print(f"\n`grade exercise 01` turnaround, warm compile cache: {no_profile:.1f} s without counters, "
          f"{with_profile:.1f} s with counters")
    assert no_profile <= 5.0
    assert with_profile <= 15.0


def test_ex04_solutions_against_pytorch(tmp_path) -> None:
    """Solution, naive baseline and PyTorch (softmax, SDPA) at the benchmark sizes, both causal settings."""
    ex = find("04")
    causal = tmp_path / "04_causal"
    shutil.copytree(ex.folder, causal, ignore=shutil.ignore_patterns("*.ipynb", "*.cu"))
    shutil.copytree(ex.folder / "baselines", causal / "baselines", dirs_exist_ok=True)
    toml = (causal / "exercise.toml").read_text()
    (causal / "exercise.toml").write_text(re.sub(r"(benchmark = \{[^}]*causal = )0", r"\g<1>1", toml))
    rows = []
    for folder, label in ((ex.folder, "causal=0"), (causal, "causal=1")):
        result = grade(str(folder), Options(submission=solutions_dir() / ex.slug, profile=False,
                                            tasks=("attention", "attention_bf16") if label == "causal=1" else ()))
        for t in result.tasks:
            tm = t.timing.sizes[0]
            rows.append((t.name, label if "attention" in t.name else "", tm.learner_s, tm.baseline_s, tm.vendor_s,
                         tm.speedup, tm.vendor_ratio, tm.roofline.achieved_tflops, tm.roofline.achieved_gbs))
    print(f"\n{'task':<15}{'':<10}{'solution':>11}{'baseline':>11}{'PyTorch':>11}{'vs base':>9}{'vs torch':>9}"
          f"{'TFLOP/s':>9}{'GB/s':>7}")
    for name, label, ts, tb, tv, sp, vr, tf, gbs in rows:
        print(f"{name:<15}{label:<10}{ts * 1e3:9.3f}ms{tb * 1e3:9.1f}ms{(tv or 0) * 1e3:9.3f}ms{sp:9.1f}"
              f"{vr or 0:9.2f}{tf:9.1f}{gbs:7.0f}")
    for name, label, ts, tb, tv, sp, vr, *_ in rows:
        if name == "attention_bf16":
            assert vr >= 0.5, f"{name} {label}: {vr:.2f} of SDPA's throughput, requirement 0.5"
            assert sp >= 3
        if name == "attention":
            assert sp >= 5
        if name == "softmax":
            assert vr >= 1.5
