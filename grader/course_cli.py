"""`grade course`: release and autograde the exercises with nbgrader.

    grade course learner-copy DIR                the course as a learner gets it: no solution, no answer
    grade course learner-copy DIR --gpu H100     ... its prompts set up for this GPU (default: this machine's)
    grade course build DIR                       nbgrader course folder from exercises/ and solutions/
    grade course build DIR --exercise 01         only this exercise (repeatable)
    grade course build DIR --gpu H100            autograde checks the derivations with the H100's figures
    grade course autograde DIR ASSIGNMENT        autograde every submission, show a summary, export
    grade course autograde DIR A --workers 4     four gradings at a time (default: one per GPU)
    grade course autograde DIR A --scheduler tcp://HOST:8786     on a Dask cluster of several hosts
    grade course autograde DIR A --derivations-only   without a GPU: the kernels wait for a run on one
    grade course example DIR                     one exercise released and handed in by three students

Between the two, the stock nbgrader commands run in DIR: `nbgrader generate_assignment`,
`nbgrader generate_feedback`, `nbgrader export`, and the formgrader in JupyterLab.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from grader.result import ExitCode
from grader.usage import Command

course_app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                         help="Release and autograde the exercises with nbgrader.")

INSTALL_HINT = 'The course commands need nbgrader: pip install -e ".[course]"'


def _load():
    try:
        from grader import course
        return course
    except ImportError as exc:        # nbformat / nbgrader are an optional extra
        Console(stderr=True).print(f"[red]error:[/red] {exc}. {INSTALL_HINT}")
        raise typer.Exit(int(ExitCode.NOT_GRADED))


@course_app.command("learner-copy", cls=Command)
def learner_copy_cmd(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="where to write the copy: a new or empty "
                                                                  "folder, or an earlier copy (rewritten)")],
    gpu: Annotated[str | None, typer.Option(metavar="GPU", help="the GPU whose figures the prompts ask for: a key of "
                                                 "hardware/specs.toml or a name such as H100 [default: this "
                                                 "machine's, else the H200]", show_default=False)] = None,
) -> None:
    """Write the course as a learner gets it: exercises, grader, hardware, tests, a README; no solution
    and no answer (the derivation prompts check against salted digests)."""
    _load()
    from grader import learner_copy
    from grader.course import CourseError
    from grader.spec import SpecError

    err, out = Console(stderr=True), Console()
    try:
        made = learner_copy.write_learner_copy(directory, gpu)
    except (CourseError, SpecError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(int(ExitCode.USAGE))
    out.print(f"A learner's copy of the course in {made.root}: {len(made.exercises)} exercises, {made.prompts} "
              f"derivation prompts checked against digests made for the {made.gpu.name} ({made.why_gpu}), "
              f"{len(made.tests)} test files; no solution, no answer.", soft_wrap=True)
    out.print(f"Learners: cd {made.root} && ./setup.sh && source .venv/bin/activate, then jupyter lab "
              "(its README.md says the rest).", soft_wrap=True)


@course_app.command("build", cls=Command)
def build_cmd(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="the course folder (created if missing)")],
    exercise: Annotated[list[str] | None, typer.Option("--exercise", "-e", metavar="EXERCISE",
                                                          help="only this exercise (repeatable); default: all")] = None,
    gpu: Annotated[str | None, typer.Option(metavar="GPU", help="the GPU whose figures autograde checks the derivations with (set "
                                                 "it to the GPU of the learners' copies) [default: the grading "
                                                 "machine's]", show_default=False)] = None,
    force: Annotated[bool, typer.Option(help="replace an nbgrader_config.py not written by this command")] = False,
) -> None:
    """Write DIR/nbgrader_config.py and DIR/source/<exercise>/ for nbgrader."""
    course = _load()
    from grader.spec import SpecError

    err, out = Console(stderr=True), Console()
    try:
        built = course.build_course(directory, tuple(exercise or ()), force=force, gpu=gpu)
    except (course.CourseError, SpecError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(int(ExitCode.USAGE))
    table = Table(header_style="bold", title=f"nbgrader course in {built.root}")
    for col in ("assignment", "notebook", "graded cells", "points", "learner files"):
        table.add_column(col)
    for a in built.assignments:
        shown = a.notebook + (" (generated: the exercise has none)" if a.generated_notebook else "")
        table.add_row(a.name, shown, str(a.graded_cells), f"{a.points:g}", ", ".join(a.stubs))
    from grader.report import fitted
    fitted(out, table).print(table)
    first = built.assignments[0].name
    out.print(f"Next, in {built.root}:\n"
              f"  nbgrader generate_assignment {first}     the student version, in release/{first}/\n"
              f"  (collect submissions into submitted/<student>/{first}/)\n"
              f"  grade course autograde {built.root} {first}\n"
              f"  nbgrader generate_feedback {first}", soft_wrap=True)


@course_app.command("autograde", cls=Command)
def autograde_cmd(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="the course folder written by `grade course build`")],
    assignment: Annotated[str, typer.Argument(metavar="ASSIGNMENT", help="the assignment, e.g. 01_foundations")],
    workers: Annotated[int | None, typer.Option(
        "--workers", "-w", min=1, show_default=False, metavar="N",
        help="gradings at a time on this host [default: one per GPU, 1 without a GPU]")] = None,
    scheduler: Annotated[str | None, typer.Option(
        metavar="ADDRESS",
        help="a running Dask scheduler (tcp://HOST:8786) whose workers, one per GPU, do the grading")] = None,
    timeout: Annotated[float | None, typer.Option(
        min=1, show_default=False, metavar="SECONDS",
        help="seconds one student's grading may take before it is stopped and "
        "recorded with 0 points [default: 3600]")] = None,
    force: Annotated[bool, typer.Option(help="grade again submissions that were already autograded")] = False,
    derivations_only: Annotated[bool, typer.Option(
        "--derivations-only", help="grade without a GPU: the derivations count, every kernel scores 0 for now, and "
        "the next run on a GPU grades these submissions again")] = False,
    export: Annotated[bool, typer.Option("--export/--no-export", help="write grades.csv afterwards")] = True,
) -> None:
    """Autograde every submission of ASSIGNMENT not graded yet, one nbgrader grading per student, then
    summarise and export."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    course = _load()
    from grader import class_grading

    err, out = Console(stderr=True), Console()
    root = directory.resolve()
    if not (root / "nbgrader_config.py").is_file():
        err.print(f"[red]error:[/red] {root} has no nbgrader_config.py: run `grade course build {directory}` first")
        raise typer.Exit(int(ExitCode.USAGE))
    if not course.submitted_students(root, assignment):
        err.print(f"[red]error:[/red] no submissions in {root / 'submitted'}/<student>/{assignment}/")
        raise typer.Exit(int(ExitCode.USAGE))
    try:
        course.require_full_checkers(root)
    except course.CourseError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(int(ExitCode.USAGE)) from None
    if scheduler is None and not derivations_only and not class_grading.visible_gpus():
        err.print(class_grading.NO_GPU, soft_wrap=True)
        raise typer.Exit(int(ExitCode.NOT_GRADED))

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[failed]}"), TimeElapsedColumn(), console=err, transient=False) as bar:
        job = bar.add_task(f"autograding {assignment}", total=None, failed="")

        def on_plan(run) -> None:
            if run.plan.skipped:
                bar.console.print(f"{len(run.plan.skipped)} of {len(run.plan.skipped) + len(run.plan.to_grade)} "
                                  "submissions are already autograded and are kept (--force grades them again)")
            if run.plan.to_grade:
                bar.console.print(f"grading {len(run.plan.to_grade)} {run.where}")
            bar.update(job, total=len(run.plan.to_grade))

        failed: list[str] = []

        def on_result(outcome) -> None:
            if not outcome.graded:
                failed.append(outcome.student)
            bar.update(job, advance=1, description=f"autograding {assignment}: {outcome.student} done",
                       failed=f"{len(failed)} not graded" if failed else "")

        try:
            run = class_grading.grade_class(root, assignment, workers=workers, scheduler=scheduler, force=force,
                                            timeout_s=timeout or class_grading.DEFAULT_TIMEOUT_S,
                                            derivations_only=derivations_only,
                                            on_plan=on_plan, on_result=on_result, say=bar.console.print)
        except course.CourseError as exc:
            bar.update(job, visible=False)
            bar.stop()
            err.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(int(ExitCode.USAGE)) from None
        bar.update(job, description=f"autograded {assignment}" if not run.interrupted
                   else f"autograding {assignment}: interrupted")

    results = course.scores(root, assignment)
    if results:
        out.print(summary_table(assignment, results))
    if run.derivations_only and run.outcomes:
        out.print(f"Kernels not graded: {_count(len(run.outcomes), 'submission')} graded for the derivations only "
                  f"(every kernel 0 for now); `grade course autograde {directory} {assignment}` on a machine with a "
                  "GPU grades them again.", soft_wrap=True)
    if run.failures:
        err.print(f"[red]Not graded[/red] ({len(run.failures)}; recorded with 0 points, the next run tries again):")
        for outcome in run.failures:
            err.print(f"  {outcome.student}: {outcome.reason}", soft_wrap=True)
    if run.interrupted:
        done, left = len(run.outcomes), len(run.plan.to_grade) - len(run.outcomes)
        err.print(f"[yellow]interrupted:[/yellow] {_count(done, 'grading')} recorded, {left} not; run the same "
                  "command again to grade the rest (what is recorded is kept)")
        raise typer.Exit(130)
    if export:
        try:
            path = course.export_grades(root)
        except course.CourseError as exc:
            err.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(int(ExitCode.FAILED)) from None
        out.print(f"grades of every assignment: {path}")
    if run.outcomes:
        out.print(f"nbgrader's log: {run.log}")
    raise typer.Exit(int(ExitCode.FAILED) if run.failures else 0)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("s were" if n != 1 else " was")


# Graded cells by what they give points for; their grade ids come from grader.course.
GROUPS = (("derivations", lambda name: name.startswith("check_")),
          ("kernels correct", lambda name: name.startswith("kernel_") and name.endswith("_correct")),
          ("kernels fast", lambda name: name.startswith("kernel_") and name.endswith("_speed")),
          ("model bars", lambda name: name.startswith("model_")))


def summary_table(assignment: str, results) -> Table:
    table = Table(header_style="bold", title=f"{assignment}: {len(results)} submissions")
    table.add_column("student")
    present = [(title, match) for title, match in GROUPS
               if any(match(c.name) for r in results for c in r.cells)]
    for title, _ in present:
        table.add_column(title, justify="right")
    table.add_column("total", justify="right")
    for r in results:
        row = [r.student]
        for _, match in present:
            got = sum(c.score for c in r.cells if match(c.name))
            most = sum(c.max_score for c in r.cells if match(c.name))
            row.append(f"{got:g}/{most:g}")
        row.append(f"{r.score:g}/{r.max_score:g}")
        table.add_row(*row)
    return table


from grader.course_example import example_cmd  # noqa: E402 - the example class, beside the commands it tries

course_app.command("example", cls=Command)(example_cmd)


if __name__ == "__main__":
    course_app(prog_name="grade course")
