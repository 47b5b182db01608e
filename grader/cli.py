"""The `grade` command.

    grade exercise 01                      grade the files in exercises/01_*/
    grade exercise 01 --submission DIR     grade the files in DIR instead
    grade exercise 01 --task transpose     one task only
    grade exercise 01 --json               the result as JSON on stdout
    grade exercise 01 --no-profile         skip Nsight Compute
    grade exercise 01 --sanitize           correctness under compute-sanitizer (memcheck, racecheck)
    grade exercise 01 --sass               each kernel's hot loop in SASS, its instructions counted
    grade exercise 01 --figures DIR        also the grading's figures as PNG files in DIR
    grade model                            the capstone: train and serve a model on your kernels
    grade model NAME                       ... one of its models by name (`grade model --list`)
    grade model --submission DIR           ... with the exercise folders in DIR
    grade list                             exercises, tasks and your last results
    grade hardware                         measure this GPU's real ceilings
    grade course learner-copy DIR          the course as learners get it: no solution, no answer
    grade course build DIR                 an nbgrader course directory from exercises/ and solutions/
    grade course autograde DIR 01_foundations   autograde every submission of an assignment

Exit status: 0 every task passed; 1 some task failed; 2 usage error;
3 could not grade here (no GPU, no nvcc, broken installation).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from grader.result import ExitCode
from grader.usage import Command

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Grade CUDA exercises: compile, check, time against the naive baseline, profile.")


def _register_course() -> None:
    from grader.course_cli import course_app
    app.add_typer(course_app, name="course", help="Build an nbgrader course from the exercises and autograde a class.")


_register_course()


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version
        try:
            installed = version("silicon-to-synapse")
        except PackageNotFoundError:
            installed = "not installed (running from a checkout)"
        typer.echo(f"grade (Silicon-to-Synapse) {installed}")
        raise typer.Exit()


@app.callback()
def main_options(
    show_version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                               help="print the version and exit")] = False,
) -> None:
    """Grade CUDA exercises: compile, check, time against the naive baseline, profile."""


@app.command("exercise", cls=Command)
def exercise_cmd(
    exercise: Annotated[str, typer.Argument(metavar="EXERCISE", help="exercise number or folder name, e.g. 01")],
    submission: Annotated[Optional[Path], typer.Option(
        metavar="DIR", help="folder with the .cu files to grade (default: the exercise's own folder)")] = None,
    task: Annotated[Optional[list[str]], typer.Option(metavar="TASK", help="grade only this task (repeatable)")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the result as JSON on stdout")] = False,
    profile: Annotated[bool, typer.Option("--profile/--no-profile", help="collect Nsight Compute counters")] = True,
    roofline: Annotated[Optional[Path], typer.Option(metavar="PNG", help="also draw the roofline of the timed "
                                                                       "kernels into this PNG file")] = None,
    sanitize: Annotated[bool, typer.Option("--sanitize", help="run the correctness cases under "
                                           "compute-sanitizer (memcheck, racecheck) instead of timing")] = False,
    sass: Annotated[bool, typer.Option("--sass", help="instead of grading, show each kernel's hot loop in SASS "
                                       "with its loads, stores, FMAs and tensor-core instructions marked and "
                                       "counted per iteration (no GPU needed)")] = False,
    figures: Annotated[Optional[Path], typer.Option(metavar="DIR", help="also draw the figures of the grading "
                                                    "(roofline, speed against size) as PNG files into DIR")] = None,
) -> None:
    """Grade an exercise. The capstone is graded by `grade model`."""
    if sass:
        _show_sass(exercise, submission, tuple(task or ()))
        return
    from grader.pipeline import GradingError, Options, grade
    from grader.report import render_rich, report_width

    err = Console(stderr=True)
    out = Console()
    options = Options(submission=submission, tasks=tuple(task or ()), profile=profile and not sanitize,
                      sanitize=sanitize)
    began = time.perf_counter()
    trace = bool(os.environ.get("S2S_TRACE"))

    def log(message: str) -> None:
        err.print(f"[{time.perf_counter() - began:6.2f} s] {message}" if trace else f"… {message}")
    try:
        if json_out or not err.is_terminal:
            result = grade(exercise, options, progress=log if (trace or not json_out) else None)
        else:
            with err.status("grading") as status:
                result = grade(exercise, options, progress=lambda m: status.update(m))
    except GradingError as exc:
        from grader.model import capstone_folder, is_capstone
        hint = (f" {capstone_folder().name} is the capstone: `grade model` trains and grades it."
                if is_capstone(exercise) else "")
        err.print(f"[red]error:[/red] {str(exc).rstrip('.') + '.' + hint if hint else exc}", soft_wrap=True)
        raise typer.Exit(int(ExitCode.USAGE))
    if json_out:
        sys.stdout.write(result.to_json() + "\n")
    else:
        if not out.is_terminal:     # a file or a pipe has no width: take what the table needs, cut nothing
            out = Console(width=report_width(result, out))
        out.print(render_rich(result))
    if roofline is not None:
        from grader.roofline_view import roofline_png
        png = roofline_png(result)
        if png:
            roofline.write_bytes(png)
            err.print(f"roofline written to {roofline}")
        else:
            err.print("no roofline: nothing was timed")
    if figures is not None:
        _write_figures(result, figures, err)
    raise typer.Exit(int(result.exit_code))


def _show_sass(exercise: str, submission: Optional[Path], tasks: tuple[str, ...]) -> None:
    from grader.sass import exercise_sass
    from grader.spec import SpecError
    err = Console(stderr=True)
    try:
        report = exercise_sass(exercise, submission, tasks)
    except SpecError as exc:
        err.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(int(ExitCode.USAGE))
    sys.stdout.write(report.render() + "\n")
    if (report.notice and not report.tasks) or any(t.error.startswith("cuobjdump") for t in report.tasks):
        raise typer.Exit(int(ExitCode.NOT_GRADED))
    if any(t.error for t in report.tasks):
        raise typer.Exit(int(ExitCode.FAILED))


def _write_figures(result, folder: Path, err: Console) -> None:
    from grader.figures import MISSING_MATPLOTLIB, grading_figures, have_matplotlib
    if not have_matplotlib():
        err.print(MISSING_MATPLOTLIB)
        return
    written = grading_figures(result, folder)
    if written:
        err.print("figures written: " + ", ".join(str(p) for p in written))
    else:
        err.print("no figures: nothing was timed")


@app.command("model", cls=Command)
def model_cmd(
    name: Annotated[Optional[str], typer.Argument(metavar="[MODEL]", help="which of the capstone's models "
                                                  "(`grade model --list` names them; the first by default)")] = None,
    submission: Annotated[Optional[Path], typer.Option(metavar="DIR", help="folder holding your exercise folders, "
                                                                         "as exercises/ does (the default)")] = None,
    out: Annotated[Path, typer.Option(metavar="DIR", help="folder for the report's plots (loss_curve.png) and "
                                                          "files (model.onnx)")] = Path("model-report"),
    json_out: Annotated[bool, typer.Option("--json", help="print the result as JSON on stdout")] = False,
    steps: Annotated[Optional[int], typer.Option(metavar="N", min=1, help="train for N steps instead of the "
                                                 "model's own number (models that take it)")] = None,
    size: Annotated[Optional[str], typer.Option(metavar="SIZE", help="a smaller size of the model, e.g. small "
                                                "(models that take it)")] = None,
    tensorrt: Annotated[bool, typer.Option("--tensorrt", help="also build TensorRT FP16 and INT8 engines "
                                                              "from the exported model, where TensorRT is "
                                                              "installed (models that take it)")] = False,
    list_models: Annotated[bool, typer.Option("--list", help="list the capstone's models and exit")] = False,
) -> None:
    """The capstone: train a model on your own kernels, serve it, compare it with PyTorch's."""
    from grader.model import ModelError, grade_model, load_capstone, model_names, render_rich

    err = Console(stderr=True)
    began = time.perf_counter()
    try:
        if list_models:
            for n in model_names():
                model = load_capstone(n)
                typer.echo(f"{n}: {model['model']}" + (f" (options: {', '.join('--' + o for o in model['options'])})"
                                                         if model["options"] else ""))
            raise typer.Exit(0)
        options = {k: v for k, v in (("steps", steps), ("size", size), ("tensorrt", tensorrt)) if v}
        result = grade_model(submission, out, model=name, options=options,
                             say=lambda m: err.print(f"[{time.perf_counter() - began:5.1f} s] {m}", soft_wrap=True))
    except ModelError as exc:
        err.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(int(ExitCode.USAGE))
    if json_out:
        sys.stdout.write(result.to_json() + "\n")
    else:
        from grader.report import fitted
        report = render_rich(result)
        fitted(Console(), report).print(report)
    raise typer.Exit(int(result.exit_code))


@app.command("list", cls=Command)
def list_cmd() -> None:
    """List the exercises, their tasks and your last result for each."""
    from rich.table import Table

    from grader import spec, state
    from grader.report import fitted

    table = Table(header_style="bold")
    for col in ("exercise", "task", "source", "needs", "last result"):
        table.add_column(col)
    for ex in spec.discover():
        last = state.load(ex.id, str(ex.folder))
        by_task = {t["name"]: t for t in (last or {}).get("tasks", [])}
        for i, t in enumerate(ex.tasks):
            table.add_row(f"{ex.id} {ex.title}" if i == 0 else "", t.name, t.source,
                          f"{t.min_speedup:g}x the baseline", _last_result(by_task.get(t.name)))
    fitted(Console(), table).print(table)


def _last_result(task: dict | None) -> str:
    """A task's last result in a cell: its status and points, and when it was graded."""
    if task is None:
        return "not graded yet"
    pts = task.get("points") or {}
    status = task.get("status", "?")
    if status == "passed" and not task.get("timing"):
        status = "correct, not timed"           # a correctness check (`grade model`) times nothing
    return f"{status} ({pts.get('total', 0):g}/{pts.get('max', 0):g}), {str(task.get('started', ''))[:16]}"


@app.command("hardware", cls=Command)
def hardware_cmd(
    refresh: Annotated[bool, typer.Option("--refresh", help="measure again even if cached")] = False,
) -> None:
    """Measure this GPU's ceilings (bandwidth, FLOP/s, latencies) and compare with its spec sheet."""
    from grader.hardware_cmd import run
    raise typer.Exit(run(refresh))


def main() -> None:
    # A path is bytes, and need not be UTF-8: write such a name back as the bytes it is, as ls
    # does, instead of failing on it where the locale makes the streams strict.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="surrogateescape")
        except (AttributeError, ValueError):
            pass
    app(prog_name="grade")


if __name__ == "__main__":
    main()
