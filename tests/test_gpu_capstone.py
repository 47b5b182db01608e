"""On the GPU: `grade model` trains and serves the capstone's model on the hidden solutions and
passes all four bars; with the untouched stubs it names the six missing kernels and trains only the
twin. The accuracy table, time per epoch and per-operation shares are printed (`pytest -m gpu -s`).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.result import ExitCode
from grader.spec import repo_root, solutions_dir

pytestmark = pytest.mark.gpu

pytest.importorskip("sklearn", reason="scikit-learn is not installed: pip install -e '.[capstone]'")


def _grade_model(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(repo_root()), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "grader.cli", "model", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=900)


def test_the_solutions_train_a_model_that_passes_every_bar(tmp_path) -> None:
    from rich.console import Console

    from grader.model import grade_model, render_rich
    result = grade_model(solutions_dir(), tmp_path / "report", say=print)
    Console(width=150).print(render_rich(result))
    learner, twin = result.values["learner"], result.values["twin"]
    print(f"first losses, yours: {[round(x, 5) for x in learner.get('losses', [])[:5]]}\n"
          f"first losses, twin:  {[round(x, 5) for x in twin['losses'][:5]]}\n"
          f"last epoch's mean loss: yours {sum(learner.get('losses', [0])[-23:]) / 23:.5f}, "
          f"twin {sum(twin['losses'][-23:]) / 23:.5f}")
    assert result.exit_code == ExitCode.PASSED, (result.kernels, result.run.fatal, result.run.error)
    assert [b.passed for b in result.bars] == [True, True, True, True], result.bars
    assert learner["losses"][:20] == pytest.approx(twin["losses"][:20], rel=1e-3)
    assert (tmp_path / "report" / "loss_curve.png").stat().st_size > 10_000


def test_the_stubs_name_every_missing_kernel_and_train_only_the_twin(tmp_path) -> None:
    proc = _grade_model("--out", str(tmp_path / "report"), cwd=tmp_path)
    assert proc.returncode == ExitCode.FAILED, proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stdout.count("MISSING: ") == 6
    assert "PyTorch twin (fp32)" in proc.stdout and "your kernels (fp32)" not in proc.stdout


def test_tensorrt_engines_beside_the_learners_int8(tmp_path) -> None:
    pytest.importorskip("tensorrt", reason="TensorRT is not installed here (pip install tensorrt-cu13 fetches its "
                                           "libraries from NVIDIA's index at install time)")
    proc = _grade_model("--submission", str(solutions_dir()), "--tensorrt", "--json", cwd=tmp_path)
    result = json.loads(proc.stdout)
    engines = result["run"]["values"]["tensorrt"]["engines"]
    print(json.dumps(engines, indent=1))
    assert [e["precision"] for e in engines] == ["FP16", "INT8"]
    assert all(e.get("accuracy", 0) >= 0.96 for e in engines), engines
