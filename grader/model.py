"""`grade model`: the capstone. A model trained and served on the learner's own kernels.

The capstone is the folder of ``exercises/`` that holds a ``capstone.toml``. That file names one or
more models (``[models.NAME]``), and for each: what it is in words, the kernels it needs, the script
that trains it and the module that judges and shows what the script measured. The kernels are
first graded for correctness, each with its own exercise's cases. Where every one of them is
correct, the script trains the model with them in a process of its own, beside its PyTorch twin;
the model's module then turns what the script reported into bars, tables and plots, in this
process. Where a kernel is missing or wrong, nothing stands in for it: the report names it, and
shows the twin alone.

Between this process and the script: a :class:`TrainJob` (JSON, in a file) and a
:class:`TrainResult` (JSON, in a file); the script prints ``progress: ...`` lines meanwhile.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from grader.capstone import (ModelError, bar_points, capstone_folder, capstone_toml, is_capstone, judge,
                             load_capstone, model_names, report_module)
from grader.model_report import headline, plot_png, render_html, render_rich
from grader.model_result import Bar, KernelCheck, ModelResult, Plot, Series, Table, TrainJob, TrainResult
from grader.result import ExitCode
from grader.spec import exercises_dir, find

__all__ = ["Bar", "ExitCode", "KernelCheck", "ModelError", "ModelResult", "Plot", "Say", "Series", "TRAINING_TIMEOUT_S",
           "Table", "TrainJob", "TrainResult", "bar_points", "capstone_folder", "capstone_toml", "check_kernels",
           "grade_model", "headline", "is_capstone", "judge", "load_capstone", "model_names", "plot_png",
           "render_html", "render_rich", "report_module", "train"]

Say = Callable[[str], None]
TRAINING_TIMEOUT_S = 900


def _optional(module: Any, name: str, values: dict[str, Any], capstone: dict[str, Any]) -> list[Any]:
    fn = getattr(module, name, None)
    return list(fn(values, capstone)) if fn else []


# ---------------------------------------------------------------------------- the kernels

def check_kernels(submission: Path, capstone: dict[str, Any], say: Say,
                  can_run: bool = True) -> tuple[list[KernelCheck], str]:
    """Each kernel graded for correctness (no timing, no counters) with its exercise's own cases;
    only compiled where nothing can run them (``can_run`` false: no GPU). Returns the checks and a
    notice when they could not run here (no GPU, no nvcc)."""
    from grader.build import Toolchain, ToolchainError
    from grader.pipeline import GradingError, Options, grade

    try:
        Toolchain.find()
        doing = "checking {} (exercise {}) with its correctness cases" if can_run else \
            "compiling {} (exercise {}); checking needs an NVIDIA GPU"
    except ToolchainError:
        doing = ""

    wanted: dict[str, list[dict[str, str]]] = {}
    for k in capstone["kernels"]:
        wanted.setdefault(k["exercise"], []).append(k)
    checks: dict[tuple[str, str], KernelCheck] = {}
    notice = ""
    for exercise_id, kernels in wanted.items():
        exercise = find(exercise_id)
        folder = submission / exercise.slug
        if not folder.is_dir():
            for k in kernels:
                checks[exercise_id, k["task"]] = KernelCheck(exercise_id, k["task"], k["role"], "missing",
                                                             f"{folder} does not exist")
            continue
        if doing:
            say(doing.format(", ".join(k["task"] for k in kernels), exercise_id))
        try:
            graded = grade(exercise_id, Options(submission=folder, tasks=tuple(k["task"] for k in kernels),
                                                profile=False, timing=False))
        except GradingError as exc:
            raise ModelError(str(exc)) from None
        notice = notice or graded.notice
        for k, t in zip(kernels, graded.tasks):
            if t.build is not None and t.build.ok and not t.build.kernels:
                status, summary = "missing", f"{t.source} has no kernel yet (the stub as handed out)"
            elif t.correct:
                status, summary = "ready", f"correct ({t.cases_passed}/{t.cases_total} cases)"
            elif t.status == "not run":
                status, summary = "not run", t.summary
            else:
                status, summary = "failed", t.summary
            checks[exercise_id, k["task"]] = KernelCheck(exercise_id, k["task"], k["role"], status, summary,
                                                         t.build.library if t.build and t.build.ok else None)
    return [checks[k["exercise"], k["task"]] for k in capstone["kernels"]], notice


# ---------------------------------------------------------------------------- the training

def train(kernels: list[KernelCheck], out: Path, say: Say, capstone: dict[str, Any],
          options: dict[str, Any] | None = None, gpu: bool = True) -> TrainResult:
    """The training process (the model's ``train`` script, run in the capstone's folder): the twin
    always, the learner's kernels when all of them are ready. It reads a :class:`TrainJob` and
    writes a :class:`TrainResult`; each line it prints as ``progress: ...`` is shown as progress."""
    from grader.runner import worker_env

    ready = all(k.status == "ready" for k in kernels)
    job = TrainJob(model=capstone["name"], out=str(out),
                   libraries={k.task: k.library for k in kernels if k.library} if ready else {},
                   exercises={k.task: k.exercise for k in kernels}, options=dict(options or {}), gpu=gpu)
    with tempfile.TemporaryDirectory(prefix="s2s-model-") as tmp:
        job_path, result_path = Path(tmp) / "job.json", Path(tmp) / "result.json"
        job.write(job_path)
        proc = subprocess.Popen([sys.executable, capstone["train"], str(job_path), str(result_path)],
                                cwd=str(capstone_folder()), env=worker_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        tail: list[str] = []
        began = time.monotonic()
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("progress: "):
                say(line[len("progress: "):].strip())
            else:
                tail = (tail + [line.rstrip()])[-40:]
            if time.monotonic() - began > TRAINING_TIMEOUT_S:
                proc.kill()
                break
        code = proc.wait()
        if result_path.is_file():
            try:
                return TrainResult.read(result_path)
            except (ValueError, TypeError) as exc:
                return TrainResult(fatal=f"the training process wrote a result that cannot be read ({exc})",
                                   output="\n".join(tail))
    reason = (f"stopped after {TRAINING_TIMEOUT_S} s" if time.monotonic() - began > TRAINING_TIMEOUT_S
              else _died(code))
    return TrainResult(fatal=f"the training process {reason}", output="\n".join(tail))


def _died(code: int) -> str:
    if code < 0:
        import signal
        return f"was killed by {signal.Signals(-code).name} (a crash in one of your kernels' host code?)"
    return f"exited with status {code} before writing its result"


def grade_model(submission: Path | str | None = None, out: Path | str = "model-report", say: Say | None = None,
                model: str | None = None, options: dict[str, Any] | None = None, twin_alone: bool = True,
                **flags: Any) -> ModelResult:
    """Check the kernels, train, serve, and hold the result to the model's bars. Its plots and
    whatever its script writes go to ``out``. ``options`` (and ``flags``, e.g. ``tensorrt=True``) are
    the model's own options, as capstone.toml's ``options`` lists them. Where the kernels cannot all
    be used (one missing or wrong, or no GPU), the PyTorch twin trains alone, to show what the model
    will reach; ``twin_alone=False`` skips that (the course's graded cells need only the bars)."""
    say = say or (lambda _m: None)
    began = time.perf_counter()
    capstone = load_capstone(model)
    options = {**(options or {}), **{k: v for k, v in flags.items() if v not in (None, False)}}
    unknown = sorted(set(options) - set(capstone["options"]))
    if unknown:
        takes = ", ".join(f"--{o}" for o in capstone["options"]) or "no option"
        raise ModelError(f"the model {capstone['name']!r} takes {takes}, not "
                         f"{', '.join('--' + o for o in unknown)}")
    root = Path(submission).resolve() if submission else exercises_dir()
    if root.is_file():
        folders = ", ".join(dict.fromkeys(find(k["exercise"]).folder.name for k in capstone["kernels"]))
        raise ModelError(f"{root} is a file; --submission takes the folder that holds the exercise folders "
                         f"({folders})")
    if not root.is_dir():
        raise ModelError(f"the submission folder {root} does not exist")
    out = _writable_folder(Path(out))
    module = report_module(capstone)
    from grader import device as devmod
    probe = devmod.probe()
    kernels, notice = check_kernels(root, capstone, say, can_run=probe.gpu is not None)
    result = ModelResult(str(root), kernels, notice=notice, out=str(out), model=capstone["model"],
                         name=capstone["name"])
    if any(k.status == "not run" for k in kernels):
        result.notice = ("Your kernels compiled; checking them and training on them needs an NVIDIA GPU "
                         f"({probe.reason}). The PyTorch twin alone is shown." if probe.gpu is None
                         else notice or "Some of your kernels could not be checked here.")
    if twin_alone or all(k.status == "ready" for k in kernels):
        result.run = _train_holding_the_gpu(probe.gpu, kernels, out, say, capstone, options)
    else:
        result.run = TrainResult(notice="Nothing was trained: the bars need every kernel ready and a GPU.")
    values = result.run.values
    result.bars = module.bars(values, capstone)
    result.tables = _optional(module, "tables", values, capstone)
    result.lines = [str(x) for x in _optional(module, "lines", values, capstone)]
    plots = _optional(module, "plots", values, capstone)
    for plot in plots:
        png = plot_png(plot)
        if png is None:
            result.lines.append(f"{plot.file} not drawn: matplotlib is not installed (pip install matplotlib)")
            break
        (out / plot.file).write_bytes(png)
        result.plots.append(plot.file)
    result.seconds = time.perf_counter() - began
    return result


def _writable_folder(out: Path) -> Path:
    """``out``, made if missing, once it is known that files can be written into it; a ModelError
    that says why not otherwise, before any work is done."""
    out = out.resolve()
    if out.exists() and not out.is_dir():
        raise ModelError(f"{out} is a file; --out takes a folder, for the report's plots and files")
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=out, prefix=".write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ModelError(f"cannot write the report into {out}: {exc.strerror or exc}; give --out a folder "
                         "you may write to") from None
    return out


def _train_holding_the_gpu(gpu: Any, kernels: list[KernelCheck], out: Path, say: Say,
                           capstone: dict[str, Any], options: dict[str, Any]) -> TrainResult:
    from grader import gpulock

    if gpu is None:
        return train(kernels, out, say, capstone, options, gpu=False)
    with gpulock.exclusive(gpu.uuid or f"gpu{gpu.index}", "training the capstone model", say):
        return train(kernels, out, say, capstone, options)
