"""On the GPU: a grading beside a foreign load (a PyTorch matmul loop in another process) is timed
again or reported as disturbed; it is never failed for hidden work or for its speed.

    pytest -m gpu -s tests/test_gpu_foreign.py
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from grader.pipeline import Options, grade
from grader.spec import find, solutions_dir

pytestmark = pytest.mark.gpu

LOAD = textwrap.dedent("""
    import sys, time, torch
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    (a @ b).sum().item()
    print("loaded", flush=True)
    end = time.time() + float(sys.argv[1])
    while time.time() < end:
        for _ in range(20):
            c = a @ b
        torch.cuda.synchronize()
""")


def _grade_01():
    folder = solutions_dir() / find("01").slug
    return grade("01", Options(submission=folder, profile=False))


def test_a_grading_beside_a_matmul_loop_is_never_failed():
    alone = _grade_01()
    assert alone.passed, [t.summary for t in alone.tasks]
    load = subprocess.Popen([sys.executable, "-c", LOAD, "300"], stdout=subprocess.PIPE, text=True)
    try:
        assert load.stdout.readline().strip() == "loaded"
        beside = _grade_01()
    finally:
        load.kill()
        load.wait()
    print(f"\n{'task':<12} {'alone':>9} {'beside the load':>16}  status beside the load")
    for a, b in zip(alone.tasks, beside.tasks):
        speed = f"{b.timing.speedup:.1f}x" if b.timing else "-"
        print(f"{a.name:<12} {a.timing.speedup:8.1f}x {speed:>16}  {b.status}: {b.summary}")
    print(f"notice: {beside.notice}")
    for t in beside.tasks:
        assert t.status != "failed", f"{t.name} failed beside a foreign load: {t.summary}"
        assert t.correct and t.points.correct == t.points.max_correct
        if t.status == "not run":
            assert "another process used the GPU" in t.summary and "(process " in t.summary
    assert any(t.status == "not run" for t in beside.tasks), \
        "a matmul loop running throughout went unnoticed: every task was timed beside it"
