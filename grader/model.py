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
from types import ModuleType
from typing import Any, Callable

from grader.protocol import from_dict
from grader.result import ExitCode
from grader.spec import exercises_dir, find

Say = Callable[[str], None]
TRAINING_TIMEOUT_S = 900


class ModelError(Exception):
    """A usage error: the submission folder does not exist, the capstone or the model is unknown."""


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


# ---------------------------------------------------------------------------- the typed protocol

@dataclass
class TrainJob:
    """What the training script is asked to do."""

    model: str                                          # the name of the model in capstone.toml
    out: str                                            # a folder for the files it writes
    libraries: dict[str, str] = field(default_factory=dict)    # kernel -> compiled library; empty: twin only
    exercises: dict[str, str] = field(default_factory=dict)    # kernel -> its exercise's id
    options: dict[str, Any] = field(default_factory=dict)      # the model's own options (`--steps`, ...)
    gpu: bool = True                                    # False: no GPU here; the twin trains on the CPU

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def read(cls, path: Path | str) -> "TrainJob":
        return from_dict(cls, json.loads(Path(path).read_text()))


@dataclass
class TrainResult:
    """What the training script reports: its measurements (``values``, which the model's module
    judges and shows), or why it could not finish."""

    about: str = ""                     # the data and the recipe, in a line
    device: str = ""
    notice: str = ""                    # a sentence the report shows under its headline
    values: dict[str, Any] = field(default_factory=dict)
    error: str = ""                     # training on the learner's kernels stopped, and why
    fatal: str = ""                     # the script itself failed, and why
    output: str = ""                    # its last lines of output, when fatal

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def read(cls, path: Path | str) -> "TrainResult":
        return from_dict(cls, json.loads(Path(path).read_text()))


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]


@dataclass
class Series:
    label: str
    y: list[float]
    x: list[float] | None = None        # 1, 2, 3, ... when None
    color: str = "#888888"
    width: float = 1.5
    alpha: float = 1.0


@dataclass
class Plot:
    file: str                           # its file name in the report's folder, e.g. loss_curve.png
    title: str
    xlabel: str
    ylabel: str
    series: list[Series]
    log_y: bool = False


@dataclass
class ModelResult:
    submission: str
    kernels: list[KernelCheck]
    run: TrainResult = field(default_factory=TrainResult)
    bars: list[Bar] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)      # below the tables: files written, a sample, ...
    notice: str = ""
    out: str = ""                # the folder of the plots and of what the script wrote
    seconds: float = 0.0
    model: str = ""              # what is trained, in words (the model's `model` in capstone.toml)
    name: str = ""               # its name in capstone.toml
    plots: list[str] = field(default_factory=list)      # the PNG files drawn into out

    @property
    def values(self) -> dict[str, Any]:
        return self.run.values

    @property
    def exit_code(self) -> ExitCode:
        if any(k.status in ("missing", "failed") for k in self.kernels) or self.run.error or self.run.fatal:
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


# ---------------------------------------------------------------------------- the capstone's files

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


def capstone_toml() -> dict[str, Any]:
    path = capstone_folder() / "capstone.toml"
    try:
        with path.open("rb") as f:
            capstone = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ModelError(f"{path}: {exc}") from None
    if not capstone.get("models"):
        raise ModelError(f"{path} names no model: it needs a [models.NAME] table")
    return capstone


def model_names() -> list[str]:
    """The models of the capstone, the default one first."""
    capstone = capstone_toml()
    default = capstone.get("default")
    return sorted(capstone["models"], key=lambda n: (n != default, n))


def load_capstone(name: str | None = None) -> dict[str, Any]:
    """One model of capstone.toml (the default one unless named), with its ``name``."""
    capstone = capstone_toml()
    path = capstone_folder() / "capstone.toml"
    name = name or capstone.get("default") or next(iter(capstone["models"]))
    if name not in capstone["models"]:
        raise ModelError(f"the capstone has no model {name!r}; its models: {', '.join(model_names())}")
    model = dict(capstone["models"][name], name=name)
    missing = [key for key in ("model", "train", "report", "kernels") if key not in model]
    if missing:
        raise ModelError(f"{path}: [models.{name}] is missing {', '.join(missing)}")
    model.setdefault("options", [])
    model.setdefault("bars", {})
    return model


def report_module(capstone: dict[str, Any]) -> ModuleType:
    """The model's module (its ``report`` in capstone.toml): ``bars(values, capstone)``,
    ``tables(values, capstone)``, ``plots(values, capstone)`` and ``lines(values, capstone)``."""
    path = capstone_folder() / capstone["report"]
    spec = importlib.util.spec_from_file_location(f"capstone_report_{capstone['name']}", path)
    if spec is None or spec.loader is None:
        raise ModelError(f"{path} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def judge(run: TrainResult | dict[str, Any], capstone: dict[str, Any]) -> list[Bar]:
    """The model's bars, measured or not, from what its script reported: run here, in the grading
    process, never in the one that ran the learner's kernels."""
    values = run.values if isinstance(run, TrainResult) else run
    return report_module(capstone).bars(values, capstone)


def _optional(module: ModuleType, name: str, values: dict[str, Any], capstone: dict[str, Any]) -> list[Any]:
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
                model: str | None = None, options: dict[str, Any] | None = None, **flags: Any) -> ModelResult:
    """Check the kernels, train, serve, and hold the result to the model's bars. Its plots and
    whatever its script writes go to ``out``. ``options`` (and ``flags``, e.g. ``tensorrt=True``) are
    the model's own options, as capstone.toml's ``options`` lists them."""
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
    result.run = _train_holding_the_gpu(probe.gpu, kernels, out, say, capstone, options)
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


# ---------------------------------------------------------------------------- the report

def plot_png(plot: Plot) -> bytes | None:
    """The plot as a PNG, or None where matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for s in plot.series:
        x = s.x if s.x is not None else list(range(1, len(s.y) + 1))
        ax.plot(x, s.y, color=s.color, alpha=s.alpha, linewidth=s.width, label=s.label or None)
    if plot.log_y:
        ax.set_yscale("log")
    ax.set_xlabel(plot.xlabel)
    ax.set_ylabel(plot.ylabel)
    ax.set_title(plot.title)
    ax.grid(True, which="both", alpha=0.3)
    if any(s.label for s in plot.series):
        ax.legend()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def _status_mark(status: str) -> str:
    return {"ready": "ready", "missing": "MISSING", "failed": "FAILED", "not run": "not run"}[status]


def headline(r: ModelResult) -> str:
    missing = [k for k in r.kernels if k.status in ("missing", "failed")]
    if missing:
        return ("These kernels are missing or not yet correct, and nothing stands in for them: "
                + ", ".join(f"{k.task} ({k.exercise})" for k in missing)
                + ". Finish them in their exercises; the PyTorch twin below shows what the model will reach.")
    if r.run.fatal:
        return f"The training did not finish: {r.run.fatal}"
    if r.run.error:
        return f"Training on your kernels stopped: {r.run.error}"
    if r.exit_code == ExitCode.NOT_GRADED:
        return r.notice or r.run.notice or "Your kernels were not run here."
    if r.exit_code == ExitCode.PASSED:
        return "Passed: a model trained and served on nothing but your kernels matches PyTorch."
    return "Not yet: the model trained on your kernels misses a bar (below)."


def render_rich(r: ModelResult):
    from rich.console import Group
    from rich.table import Table as RichTable
    from rich.text import Text

    parts: list[Any] = [Text(f"Capstone: {r.model or 'a model'} trained on your kernels", style="bold")]
    if r.run.about:
        parts.append(Text(f"{r.run.about}; device: {r.run.device}"))
    code = r.exit_code
    style = {ExitCode.PASSED: "bold green", ExitCode.FAILED: "bold red"}.get(code, "bold yellow")
    parts.append(Text(headline(r), style=style))
    if r.run.notice and r.run.notice != headline(r):
        parts.append(Text(r.run.notice))

    kernels = RichTable(title="Your kernels", title_justify="left")
    for col in ("exercise", "kernel", "used for", "status"):
        kernels.add_column(col, overflow="fold")
    for k in r.kernels:
        kernels.add_row(k.exercise, k.task, k.role, f"{_status_mark(k.status)}: {k.summary}")
    parts.append(kernels)

    if r.bars and any(b.passed is not None for b in r.bars):
        table = RichTable(title="Bars", title_justify="left")
        for col in ("", "needed", "got", ""):
            table.add_column(col)
        for b in r.bars:
            table.add_row(b.what, b.needed, b.got, "-" if b.passed is None else ("passed" if b.passed else "MISSED"))
        parts.append(table)
    for t in r.tables:
        if not t.rows:
            continue
        table = RichTable(title=t.title, title_justify="left")
        for col in t.columns:
            table.add_column(col, overflow="fold")
        for row in t.rows:
            table.add_row(*row)
        parts.append(table)
    for line in _footer(r):
        parts.append(Text(line))
    return Group(*parts)


def _footer(r: ModelResult) -> list[str]:
    out = Path(r.out) if r.out else None
    lines = [f"{Path(p).stem.replace('_', ' ')}: {out / p}" for p in r.plots if out and (out / p).is_file()]
    lines += r.lines
    if r.run.fatal and r.run.output:
        lines.append("its last output:\n" + r.run.output)
    return lines


def render_html(r: ModelResult) -> str:
    """The notebook's view: the same tables, and the plots inline."""
    from rich.console import Console

    # force_jupyter=False: in a notebook, rich would otherwise show what it prints as well, and the
    # report would appear twice.
    console = Console(record=True, width=120, file=io.StringIO(), force_jupyter=False)
    console.print(render_rich(r))
    html = console.export_html(inline_styles=True, code_format="<pre style='font-size:12px'>{code}</pre>")
    for name in r.plots:
        png = Path(r.out) / name
        if png.is_file():
            html += f'<img src="data:image/png;base64,{base64.b64encode(png.read_bytes()).decode()}"/>'
    return html
