"""`grade model`: the capstone. A model trained and served on the learner's own kernels.

The capstone is the folder of ``exercises/`` that holds a ``capstone.toml``. That file names the
model, the kernels it needs, the script that trains it and the module that holds its bars. The
kernels are first graded for correctness, each with its own exercise's cases. Where every one of
them is correct, the script trains the model with them in a process of its own, beside its PyTorch
twin; the bars are then held, in this process, against what the script reported. Where a kernel is
missing or wrong, nothing stands in for it: the report names it, and shows the twin alone.
"""
from __future__ import annotations

import base64
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from grader.result import ExitCode
from grader.spec import exercises_dir, find

Say = Callable[[str], None]
TRAINING_TIMEOUT_S = 900


class ModelError(Exception):
    """A usage error: the submission folder does not exist, the capstone folder is missing."""


@dataclass
class KernelCheck:
    exercise: str
    task: str
    role: str
    status: str                 # "ready" | "missing" | "failed" | "not run"
    summary: str
    library: str | None = None


@dataclass
class Bar:
    what: str
    needed: str
    got: str
    passed: bool | None         # None: not measured


@dataclass
class ModelResult:
    submission: str
    kernels: list[KernelCheck]
    run: dict[str, Any] = field(default_factory=dict)      # what the training process reported
    bars: list[Bar] = field(default_factory=list)
    notice: str = ""
    out: str = ""                # the folder of the loss curve and the exported model
    seconds: float = 0.0
    model: str = ""              # what is trained, in words (capstone.toml's `model`)

    @property
    def learner(self) -> dict[str, Any]:
        return self.run.get("learner") or {}

    @property
    def exit_code(self) -> ExitCode:
        if any(k.status in ("missing", "failed") for k in self.kernels) or self.learner.get("error") \
                or self.run.get("fatal"):
            return ExitCode.FAILED
        if not self.bars or any(b.passed is None for b in self.bars):
            return ExitCode.NOT_GRADED
        return ExitCode.PASSED if all(b.passed for b in self.bars) else ExitCode.FAILED

    def to_json(self) -> str:
        d = asdict(self)
        d["exit_code"] = int(self.exit_code)
        return json.dumps(d, indent=1)

    def _repr_html_(self) -> str:
        return render_html(self)


def capstone_folder() -> Path:
    """The folder of exercises/ that holds a capstone.toml."""
    found = sorted(p.parent for p in exercises_dir().glob("*/capstone.toml"))
    if not found:
        raise ModelError(f"no folder of {exercises_dir()} holds a capstone.toml: the capstone is not part of "
                         "this checkout")
    if len(found) > 1:
        raise ModelError(f"several folders hold a capstone.toml ({', '.join(f.name for f in found)}); "
                         "`grade model` trains one")
    return found[0]


def is_capstone(ident: str) -> bool:
    """Whether ``ident`` (a number such as 06, a folder name) names the capstone's folder."""
    try:
        folder = capstone_folder()
    except ModelError:
        return False
    number = folder.name.split("_", 1)[0]
    return ident.strip("/") in (folder.name, number, str(folder)) or (
        ident.isdigit() and number.isdigit() and int(ident) == int(number))


def load_capstone() -> dict[str, Any]:
    path = capstone_folder() / "capstone.toml"
    try:
        with path.open("rb") as f:
            capstone = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ModelError(f"{path}: {exc}") from None
    missing = [key for key in ("model", "train", "bars", "kernels") if key not in capstone]
    if missing:
        raise ModelError(f"{path} is missing {', '.join(missing)}")
    return capstone


def judge(run: dict[str, Any], capstone: dict[str, Any]) -> list[Bar]:
    """The capstone's bars, measured or not: the ``bars(run, capstone)`` function of the module
    that capstone.toml's ``bars.module`` names, run here, in the grading process."""
    path = capstone_folder() / capstone["bars"]["module"]
    spec = importlib.util.spec_from_file_location("capstone_bars", path)
    if spec is None or spec.loader is None:
        raise ModelError(f"{path} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.bars(run, capstone)


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

def train(kernels: list[KernelCheck], out: Path, say: Say, tensorrt: bool = False,
          script: str | None = None) -> dict[str, Any]:
    """The training process (capstone.toml's ``train``, run in the capstone's folder): the twin
    always, the learner's kernels when all of them are ready. It reads a job (JSON) and writes its
    result (JSON); each line it prints as ``progress: ...`` is shown as progress."""
    from grader.runner import worker_env

    ready = all(k.status == "ready" for k in kernels)
    job = {"out": str(out), "tensorrt": tensorrt,
           "libraries": {k.task: k.library for k in kernels} if ready else {},
           "exercises": {k.task: k.exercise for k in kernels}}
    with tempfile.TemporaryDirectory(prefix="s2s-model-") as tmp:
        job_path, result_path = Path(tmp) / "job.json", Path(tmp) / "result.json"
        job_path.write_text(json.dumps(job))
        script = script or load_capstone()["train"]
        proc = subprocess.Popen([sys.executable, script, str(job_path), str(result_path)],
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
            return json.loads(result_path.read_text())
    reason = (f"stopped after {TRAINING_TIMEOUT_S} s" if time.monotonic() - began > TRAINING_TIMEOUT_S
              else _died(code))
    return {"fatal": f"the training process {reason}", "output": "\n".join(tail)}


def _died(code: int) -> str:
    if code < 0:
        import signal
        return f"was killed by {signal.Signals(-code).name} (a crash in one of your kernels' host code?)"
    return f"exited with status {code} before writing its result"


def grade_model(submission: Path | str | None = None, out: Path | str = "model-report", tensorrt: bool = False,
                say: Say | None = None) -> ModelResult:
    """Check the kernels, train, serve, and hold the result to the capstone's bars. The loss curve
    (``loss_curve.png``) and the exported model (``model.onnx``) go to ``out``."""
    say = say or (lambda _m: None)
    began = time.perf_counter()
    capstone = load_capstone()
    root = Path(submission).resolve() if submission else exercises_dir()
    if root.is_file():
        folders = ", ".join(dict.fromkeys(find(k["exercise"]).folder.name for k in capstone["kernels"]))
        raise ModelError(f"{root} is a file; --submission takes the folder that holds the exercise folders "
                         f"({folders})")
    if not root.is_dir():
        raise ModelError(f"the submission folder {root} does not exist")
    out = _writable_folder(Path(out))
    from grader import device as devmod
    probe = devmod.probe()
    kernels, notice = check_kernels(root, capstone, say, can_run=probe.gpu is not None)
    result = ModelResult(str(root), kernels, notice=notice, out=str(out), model=capstone["model"])
    if any(k.status == "not run" for k in kernels):
        result.notice = ("Your kernels compiled; checking them and training on them needs an NVIDIA GPU "
                         f"({probe.reason}). The PyTorch twin alone is shown." if probe.gpu is None
                         else notice or "Some of your kernels could not be checked here.")
    result.run = _train_holding_the_gpu(probe.gpu, kernels, out, say, tensorrt, capstone["train"])
    result.bars = judge(result.run, capstone)
    if result.run.get("twin"):
        (out / "loss_curve.png").write_bytes(loss_png(result.run))
    result.seconds = time.perf_counter() - began
    return result


def _writable_folder(out: Path) -> Path:
    """``out``, made if missing, once it is known that files can be written into it; a ModelError
    that says why not otherwise, before any work is done."""
    out = out.resolve()
    if out.exists() and not out.is_dir():
        raise ModelError(f"{out} is a file; --out takes a folder, for loss_curve.png and model.onnx")
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
                           tensorrt: bool, script: str) -> dict[str, Any]:
    from grader import gpulock

    if gpu is None:
        return train(kernels, out, say, tensorrt, script)
    with gpulock.exclusive(gpu.uuid or f"gpu{gpu.index}", "training the capstone model", say):
        return train(kernels, out, say, tensorrt, script)


# ---------------------------------------------------------------------------- the report

def loss_png(run: dict[str, Any]) -> bytes:
    """The loss of every step, yours beside the twin's, with each epoch's mean drawn over it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    curves = [("PyTorch twin", run.get("twin") or {}, "#888888")]
    if (run.get("learner") or {}).get("losses"):
        curves.append(("your kernels", run["learner"], "#d62728"))
    for label, part, color in curves:
        losses = part.get("losses") or []
        epochs = len(part.get("epoch_seconds") or []) or 1
        per = max(1, len(losses) // epochs)
        ax.plot(range(1, len(losses) + 1), losses, color=color, alpha=0.25, linewidth=0.8)
        means = [sum(losses[i:i + per]) / len(losses[i:i + per]) for i in range(0, len(losses), per)]
        ax.plot([per * (i + 1) for i in range(len(means))], means, color=color, linewidth=2,
                label=f"{label} (epoch mean)")
    ax.set_yscale("log")
    ax.set_xlabel("training step (batch of 64)")
    ax.set_ylabel("cross-entropy loss")
    ax.set_title("Training loss: your kernels and the PyTorch twin")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _per_epoch(part: dict[str, Any]) -> str:
    seconds = part.get("epoch_seconds") or []
    if not seconds:
        return "-"
    return f"{1e3 * sum(seconds[1:] or seconds) / len(seconds[1:] or seconds):.0f} ms"


def accuracy_rows(r: ModelResult) -> list[tuple[str, str, str, str]]:
    """(model, test accuracy, time per epoch, note): the table the capstone is about."""
    twin, learner = r.run.get("twin") or {}, r.learner
    rows = []
    if learner.get("test_accuracy") is not None:
        rows.append(("your kernels (fp32)", _pct(learner["test_accuracy"]), _per_epoch(learner),
                     "trained and evaluated on your kernels"))
    if twin:
        rows.append(("PyTorch twin (fp32)", _pct(twin.get("test_accuracy")), _per_epoch(twin), twin.get("about", "")))
    if learner.get("int8_accuracy") is not None:
        rows.append(("your kernels, INT8 W8A8", _pct(learner["int8_accuracy"]), "",
                     f"{' + '.join(learner.get('int8_kernels', []))}; PyTorch's W8A8 of your weights: "
                     f"{_pct(learner.get('int8_model_accuracy'))}"))
    onnx = learner.get("onnx") or {}
    if onnx.get("checked"):
        rows.append(("ONNX export, ONNX Runtime (CPU)", _pct(onnx.get("accuracy")), "",
                     f"opset {onnx.get('opset')}; predictions agree on {_pct(onnx.get('agree'))}, "
                     f"logits within {onnx.get('max_abs_diff', 0):.1e}"))
    for engine in (r.run.get("tensorrt") or {}).get("engines", []):
        rows.append((f"TensorRT {engine['precision']} engine", _pct(engine.get("accuracy")), "",
                     engine.get("error") or f"{engine.get('latency_us', 0):.0f} µs for the whole test set"))
    return rows


def op_rows(r: ModelResult) -> list[tuple[str, str, str, str]]:
    """(operation, calls per step, time per step, share of a step), over the whole training."""
    learner = r.learner
    seconds, calls = learner.get("op_seconds") or {}, learner.get("op_calls") or {}
    steps = len(learner.get("losses") or [])
    if not seconds or not steps:
        return []
    wall = sum(learner.get("epoch_seconds") or []) or 1.0
    rows = [(name, f"{calls.get(name, 0) / steps:g}", f"{1e6 * s / steps:.1f} µs", f"{100 * s / wall:.1f}%")
            for name, s in sorted(seconds.items(), key=lambda kv: -kv[1])]
    rest = wall - sum(seconds.values())
    rows.append(("launches, Python and data loading (the rest)", "", f"{1e6 * rest / steps:.1f} µs",
                 f"{100 * rest / wall:.1f}%"))
    return rows


def _status_mark(status: str) -> str:
    return {"ready": "ready", "missing": "MISSING", "failed": "FAILED", "not run": "not run"}[status]


def headline(r: ModelResult) -> str:
    missing = [k for k in r.kernels if k.status in ("missing", "failed")]
    if missing:
        return ("These kernels are missing or not yet correct, and nothing stands in for them: "
                + ", ".join(f"{k.task} ({k.exercise})" for k in missing)
                + ". Finish them in their exercises; the PyTorch twin below shows what the model will reach.")
    if r.run.get("fatal"):
        return f"The training did not finish: {r.run['fatal']}"
    if r.learner.get("error"):
        return f"Training on your kernels stopped: {r.learner['error']}"
    if r.exit_code == ExitCode.NOT_GRADED:
        return r.notice or "Your kernels were not run here."
    if r.exit_code == ExitCode.PASSED:
        return "Passed: a model trained and served on nothing but your kernels matches PyTorch."
    return "Not yet: the model trained on your kernels misses a bar (below)."


def render_rich(r: ModelResult):
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = [Text(f"Capstone: {r.model or 'a model'} trained on your kernels", style="bold")]
    if r.run.get("about"):
        parts.append(Text(f"{r.run['about']}; device: {r.run.get('device')}"))
    code = r.exit_code
    style = {ExitCode.PASSED: "bold green", ExitCode.FAILED: "bold red"}.get(code, "bold yellow")
    parts.append(Text(headline(r), style=style))

    kernels = Table(title="Your kernels", title_justify="left")
    for col in ("exercise", "kernel", "used for", "status"):
        kernels.add_column(col, overflow="fold")
    for k in r.kernels:
        kernels.add_row(k.exercise, k.task, k.role, f"{_status_mark(k.status)}: {k.summary}")
    parts.append(kernels)

    rows = accuracy_rows(r)
    if rows:
        acc = Table(title=f"Accuracy on {r.run.get('test_set') or 'the test set'}", title_justify="left")
        for col in ("model", "test accuracy", "time per epoch", ""):
            acc.add_column(col, overflow="fold")
        for row in rows:
            acc.add_row(*row)
        parts.append(acc)
    if r.bars and any(b.passed is not None for b in r.bars):
        table = Table(title="Bars", title_justify="left")
        for col in ("", "needed", "got", ""):
            table.add_column(col)
        for b in r.bars:
            table.add_row(b.what, b.needed, b.got, "-" if b.passed is None else ("passed" if b.passed else "MISSED"))
        parts.append(table)
    ops = op_rows(r)
    if ops:
        table = Table(title="Where a training step's time went (CUDA events around each call)", title_justify="left")
        for col in ("operation", "calls per step", "time per step", "share of the step"):
            table.add_column(col)
        for row in ops:
            table.add_row(*row)
        parts.append(table)
    for line in _footer(r):
        parts.append(Text(line))
    return Group(*parts)


def _footer(r: ModelResult) -> list[str]:
    lines = []
    out = Path(r.out) if r.out else None
    if out and (out / "loss_curve.png").is_file():
        lines.append(f"loss curve: {out / 'loss_curve.png'}")
    onnx = r.learner.get("onnx") or {}
    if onnx.get("checked"):
        lines.append(f"exported model: {onnx['path']}")
    elif onnx.get("note"):
        lines.append(f"ONNX export {onnx['note']}")
    trt = r.run.get("tensorrt") or {}
    if trt.get("note"):
        lines.append(f"TensorRT: {trt['note']}")
    if r.run.get("fatal") and r.run.get("output"):
        lines.append("its last output:\n" + r.run["output"])
    return lines


def render_html(r: ModelResult) -> str:
    """The notebook's view: the same tables, and the loss curve inline."""
    from rich.console import Console

    # force_jupyter=False: in a notebook, rich would otherwise show what it prints as well, and the
    # report would appear twice.
    console = Console(record=True, width=120, file=io.StringIO(), force_jupyter=False)
    console.print(render_rich(r))
    html = console.export_html(inline_styles=True, code_format="<pre style='font-size:12px'>{code}</pre>")
    png = Path(r.out) / "loss_curve.png" if r.out else None
    if png and png.is_file():
        html += f'<img src="data:image/png;base64,{base64.b64encode(png.read_bytes()).decode()}"/>'
    return html
