"""What `grade model` passes around: the job the training script is given (:class:`TrainJob`), what
it reports (:class:`TrainResult`), the report modules' pieces (bars, tables, plots) and the result
of grading a model (:class:`ModelResult`). JSON in files between the processes."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from grader.protocol import from_dict
from grader.result import ExitCode


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
    id: str = ""                # its name in capstone.toml's [models.NAME.points]


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
        from grader.model_report import render_html
        return render_html(self)
