"""One grading at a time on a GPU: the lock across processes, what a waiting learner is told, the
limit of the wait, and the grading that gives up without a verdict against anyone."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grader import device as devmod
from grader import gpulock, runner
from grader.pipeline import Options, grade

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def locks(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "locks"
    monkeypatch.setenv("S2S_LOCK_DIR", str(folder))
    return folder


def hold_in_another_process(locks: Path, seconds: float) -> subprocess.Popen:
    """A process that holds the GPU "GPU-test" for a while, as another grading would."""
    code = textwrap.dedent(f"""
        import sys, time
        from grader import gpulock
        with gpulock.exclusive("GPU-test", "a grading of exercise 04"):
            print("holding", flush=True)
            time.sleep({seconds})
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, S2S_LOCK_DIR=str(locks), PYTHONPATH=str(ROOT)))
    assert proc.stdout.readline().strip() == "holding"
    return proc


def test_the_holder_is_written_down_while_it_holds_the_gpu(locks):
    with gpulock.exclusive("GPU-1234", "a grading of exercise 01"):
        info = json.loads((locks / "GPU-1234.json").read_text())
        assert info["pid"] == os.getpid() and info["what"] == "a grading of exercise 01"
    assert not (locks / "GPU-1234.json").exists()
    assert stat.S_IMODE(locks.stat().st_mode) == 0o1777          # every user may take the lock


def test_a_second_grading_waits_says_who_holds_the_gpu_then_runs(locks):
    holder = hold_in_another_process(locks, 2.5)
    said: list[str] = []
    began = time.monotonic()
    with gpulock.exclusive("GPU-test", "a grading of exercise 01", said.append, timeout_s=30):
        waited = time.monotonic() - began
    holder.wait(timeout=30)
    assert waited >= 1.5
    assert said and said[0].startswith(f"waiting for the GPU: a grading of exercise 04 (process {holder.pid} of ")
    assert "started" in said[0] and "s ago" in said[0]


def test_a_wait_past_its_limit_is_a_sentence_not_a_verdict(locks):
    holder = hold_in_another_process(locks, 10)
    try:
        with pytest.raises(gpulock.GpuBusy, match=r"the GPU stayed busy with other gradings for \d+ s \(a grading of "
                                                  r"exercise 04 .*S2S_LOCK_TIMEOUT"):
            with gpulock.exclusive("GPU-test", "mine", timeout_s=1.5):
                pass
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not on PATH: nothing compiles")
def test_a_grading_holds_the_gpu_while_its_worker_runs_and_gives_up_cleanly_when_it_is_busy(locks, monkeypatch, tmp_path):
    """With a GPU (pretended here), the worker runs inside the lock; with the lock held elsewhere
    past the limit, every task is 'not run' and the notice says why: no task fails."""
    fake = devmod.Gpu(0, "NVIDIA H200", (9, 0), 132, "GPU-test")
    monkeypatch.setattr(devmod, "probe", lambda: devmod.Probe((fake,)))
    monkeypatch.setenv("S2S_CACHE", str(tmp_path / "cache"))
    seen = []

    def fake_worker(*args, **kwargs):
        seen.append((locks / "GPU-test.json").exists())
        return runner.RunOutcome(fatal="pretend")
    monkeypatch.setattr(runner, "run_worker", fake_worker)
    grade("01", Options(profile=False, tasks=("vector_add",)))
    assert seen == [True]

    holder = hold_in_another_process(locks, 10)
    monkeypatch.setenv("S2S_LOCK_TIMEOUT", "1")
    try:
        result = grade("01", Options(profile=False, tasks=("vector_add",)))
    finally:
        holder.kill()
        holder.wait()
    assert seen == [True]                                         # the worker never started
    task = result.task("vector_add")
    assert task.status == "not run" and "the GPU was busy" in task.summary and task.points.total == 0
    assert "the GPU stayed busy with other gradings" in result.notice and int(result.exit_code) == 3
