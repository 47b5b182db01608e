"""Another process on the GPU while a grading times: seen through NVML, timed again, and when it
persists reported as disturbed, with no verdict on the learner's kernel.

NVML is replaced by a fake here; tests/test_gpu_foreign.py puts a real PyTorch load beside a
grading on the GPU.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest
from rich.console import Console

import grader
from grader import device as devmod
from grader import runner
from grader.pipeline import Options, grade
from grader.protocol import CaseResult, Problem, SizeTiming, TaskOutcome
from grader.spec import find
from grader.report import render_html, render_rich
from grader.worker import timing
from grader.worker.foreign import Watch


class FakeNvml:
    """What NVML reports: processes holding a context, and utilisation samples since a time."""

    class NVMLError(Exception):
        pass

    def __init__(self, running=(), samples=(), names=None):
        self.running, self.samples, self.names = list(running), list(samples), names or {}

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [SimpleNamespace(pid=p, usedGpuMemory=1 << 20) for p in self.running]

    def nvmlDeviceGetProcessUtilization(self, handle, since):
        """Samples newer than ``since`` (microseconds of the host clock); a sample is (pid, smUtil)
        taken now, or (pid, smUtil, seconds ago)."""
        now = time.time() * 1e6
        found = [SimpleNamespace(pid=s[0], smUtil=s[1], memUtil=0, timeStamp=now - (s[2] if len(s) > 2 else 0) * 1e6)
                 for s in self.samples]
        found = [f for f in found if f.timeStamp > since]
        if not found:
            raise self.NVMLError("Not Found")
        return found

    def nvmlSystemGetProcessName(self, pid):
        if pid not in self.names:
            raise self.NVMLError("Not Found")
        return self.names[pid].encode()


def watch_with(nvml: FakeNvml) -> Watch:
    return Watch("handle", nvml)


def test_a_process_that_kept_the_sms_busy_is_named_and_this_one_is_not():
    nvml = FakeNvml(samples=[(os.getpid(), 97), (4242, 60)], names={4242: "/usr/bin/python3 train.py"})
    watch = watch_with(nvml)
    watch.begin()
    assert watch.others() == ["python3 (process 4242)"]


def test_an_idle_notebook_holding_a_context_is_not_a_disturbance():
    nvml = FakeNvml(running=[os.getpid(), 777], samples=[(os.getpid(), 99), (777, 0)])
    watch = watch_with(nvml)
    watch.begin()
    assert watch.others() == []


def test_no_sample_since_the_start_is_no_disturbance():
    watch = watch_with(FakeNvml(samples=[]))
    watch.begin()
    assert watch.others() == []


def test_in_a_container_this_process_is_the_one_that_appeared_with_its_context():
    """NVML gives the host's process ids; the container's own id is not among them."""
    nvml = FakeNvml(running=[500])                 # someone else's context, before ours
    watch = watch_with(nvml)
    watch.before_context()
    nvml.running = [500, 91234]                    # ours, under the host's id
    watch.after_context()
    nvml.samples = [(91234, 98), (500, 40)]
    watch.begin()
    assert watch.others() == ["a process (process 500)"]


def test_work_from_before_the_measurement_is_not_counted():
    watch = watch_with(FakeNvml(samples=[(4242, 90, 5.0)]))     # 5 s before begin()
    watch.begin()
    assert watch.others() == []


def test_when_this_process_cannot_be_told_apart_the_watch_turns_itself_off():
    """Neither this process's id nor exactly one new process: rather no watch than one that
    suspects the grading itself."""
    nvml = FakeNvml(running=[500])
    watch = watch_with(nvml)
    watch.before_context()
    nvml.running = [500, 91234, 91235]             # two processes started with ours
    watch.after_context()
    assert not watch.available and "cannot be told apart" in watch.reason
    nvml.samples = [(91234, 98)]
    watch.begin()
    assert watch.others() == []


def test_a_copy_bandwidth_measured_beside_another_process_sets_no_limit(monkeypatch):
    monkeypatch.setattr(timing, "measure_ceilings", lambda: {"copy_bytes_per_s": 1e12, "l2_bytes": 1, "device": "X"})
    watch = Scripted(*[["python (process 9)"]] * timing.DISTURBED_ATTEMPTS)
    assert timing.quiet_ceilings(watch, pause_s=0)["disturbed"] == "python (process 9)"
    assert "disturbed" not in timing.quiet_ceilings(Scripted(["python (process 9)"], []), pause_s=0)
    from grader.limits import limits_for
    assert limits_for("A GPU without a spec sheet", 1000.0).physical_gbs == pytest.approx(1300.0)
    assert limits_for("A GPU without a spec sheet", 1000.0, trusted=False).physical_gbs is None


def test_without_nvml_nothing_is_watched_and_nothing_breaks(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    watch = Watch.open("GPU-0000")
    assert not watch.available and "nvidia-ml-py" in watch.reason
    watch.before_context()
    watch.after_context()
    watch.begin()
    assert watch.others() == []
    assert not Watch.open("").available


class Scripted:
    """A watch that reports, at each measurement, the processes of the next entry."""

    def __init__(self, *reports: list[str]):
        self.reports, self.begun = list(reports), 0

    def begin(self):
        self.begun += 1

    def others(self):
        return self.reports.pop(0)


def size(learner_s=1e-3) -> SizeTiming:
    return SizeTiming(label="n=1", case={"n": 1}, reps=9, learner_s=learner_s, baseline_s=1e-2, learner_spread=0.0,
                      baseline_spread=0.0, learner_wall_s=learner_s, flops=0, bytes=0)


def test_a_size_timed_beside_another_process_is_timed_again():
    watch = Scripted(["python (process 9)"], [])
    times = iter([size(5e-3), size(1e-3)])
    result = timing.watched(watch, "n=1", lambda: next(times), pause_s=0)
    assert watch.begun == 2 and result.learner_s == 1e-3       # the quiet measurement is the one kept


def test_a_disturbance_that_persists_is_reported_and_judges_nothing():
    watch = Scripted(*[["python (process 9)"]] * timing.DISTURBED_ATTEMPTS)
    hidden = Problem("untimed work", "the device stayed busy 255 µs longer")
    result = timing.watched(watch, "n=2^26", lambda: hidden, pause_s=0)
    assert watch.begun == timing.DISTURBED_ATTEMPTS
    assert result.kind == "disturbed"
    assert result.message.startswith("another process used the GPU while n=2^26 was timed, in each of 3 attempts: "
                                     "python (process 9).")
    assert "grade again when the GPU is free" in result.message


def test_a_wrong_timed_output_stays_a_verdict_whoever_else_ran():
    watch = Scripted(["python (process 9)"])
    wrong = Problem("timed output wrong", timing.WRONG_TIMED_OUTPUT)
    assert timing.watched(watch, "n=1", lambda: wrong, pause_s=0) is wrong


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not on PATH: nothing compiles")
def test_a_disturbed_task_keeps_its_correctness_points_and_is_not_failed(monkeypatch, tmp_path):
    """What the learner sees: correct, not timed, why, and an exit status that says 'not graded
    here', not 'failed'."""
    fake = devmod.Gpu(0, "NVIDIA H200", (9, 0), 132, "GPU-test")
    monkeypatch.setattr(devmod, "probe", lambda: devmod.Probe((fake,)))
    monkeypatch.setenv("S2S_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("S2S_LOCK_DIR", str(tmp_path / "locks"))
    message = ("another process used the GPU while n=67108864 was timed, in each of 3 attempts: python3 "
               "(process 4242). A time measured beside it says nothing about your kernel; grade again when the "
               "GPU is free")

    def fake_worker(exercise, tasks, *args, **kwargs):
        outcome = runner.RunOutcome()
        for name in tasks:
            cases = [CaseResult(c.describe(), c.to_dict(), True, 0.001) for c in exercise.task(name).cases]
            outcome.results[name] = TaskOutcome(name, cases, correct=True, error=Problem("disturbed", message))
        return outcome
    monkeypatch.setattr(runner, "run_worker", fake_worker)
    result = grade("01", Options(profile=False, tasks=("vector_add",)))
    task = result.task("vector_add")
    assert task.status == "not run"
    total = len(find("01").task("vector_add").cases)
    assert task.summary == f"correct ({total}/{total}); not timed: {message}"
    assert task.points.correct == task.points.max_correct and task.points.speed == 0
    assert result.notice == ("another process used this GPU while vector_add was timed, so no speed was judged: "
                             "grade again when the GPU is free")
    assert int(result.exit_code) == 3
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(render_rich(result))
    text = console.export_text()
    assert "not timed: another process used the GPU" in text and "Traceback" not in text
    assert "not timed: another process used the GPU" in render_html(result)
    schema = json.loads((Path(grader.__file__).parent / "result.schema.json").read_text())
    jsonschema.validate(json.loads(result.to_json()), schema)      # --json says the same, in its schema
