"""`grade course example DIR`: a small class to try the nbgrader path on before a real one.

It builds the course for one exercise (the first, unless told), releases it with `nbgrader
generate_assignment`, and hands in three submissions as a class would after `nbgrader collect`:

    s1_solution   the derivations answered, the hidden reference solutions: every point on a GPU
    s2_naive      the derivations answered, the naive baselines: correct but too slow, so the
                  correctness points and none of the speed points
    s3_stubs      the release untouched: no points

Then `grade course autograde DIR ASSIGNMENT` grades them, `nbgrader generate_feedback` and
`nbgrader export` work on them, and the formgrader shows them. Without a GPU the kernel cells score
zero, each saying why, and the derivations still score.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from grader.result import ExitCode

STUDENTS = ("s1_solution", "s2_naive", "s3_stubs")


@dataclass(frozen=True)
class ExampleClass:
    root: Path
    assignment: str
    students: tuple[str, ...]


def _grade_id(cell) -> str:  # noqa: ANN001 - an nbformat cell
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")


def hand_in(root: Path, assignment: str, student: str, *, answers: bool, files: dict[str, Path]) -> Path:
    """The released assignment as ``student`` hands it in: with the hidden answers of the derivation
    cells if ``answers``, and ``files`` (name -> path) in place of the stubs."""
    import nbformat

    release, target = root / "release" / assignment, root / "submitted" / student / assignment
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(release, target)
    if answers:
        for source in (root / "source" / assignment).glob("*.ipynb"):
            answered = {_grade_id(c): c.source for c in nbformat.read(source, as_version=4).cells}
            nb = nbformat.read(target / source.name, as_version=4)
            for cell in nb.cells:
                if cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
                    cell.source = answered[_grade_id(cell)]
            nbformat.write(nb, target / source.name)
    for name, path in files.items():
        shutil.copyfile(path, target / name)
    (target / "timestamp.txt").write_text("2026-01-05 10:00:00.000000 UTC")     # as nbgrader collect writes it
    return target


def make_example(root: Path, exercise: str | None = None) -> ExampleClass:
    """Build, release and hand in the example class in ``root`` (see the module's text)."""
    from grader import course
    from grader.spec import discover, find, solutions_dir

    chosen = find(exercise) if exercise else discover()[0]
    built = course.build_course(root, (chosen.id,))
    name = built.assignments[0].name
    done = subprocess.run(course.nbgrader_command("generate_assignment", name, "--force"), cwd=built.root,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise course.CourseError(f"nbgrader generate_assignment {name} failed:\n{done.stdout[-2000:]}"
                                 f"{done.stderr[-2000:]}")
    solutions = solutions_dir() / chosen.folder.name
    missing = [t.source for t in chosen.tasks if not (solutions / t.source).is_file()]
    if missing:
        raise course.CourseError(f"{solutions} lacks {', '.join(missing)}: the example's first student hands "
                                 "in the reference solutions")
    hand_in(built.root, name, STUDENTS[0], answers=True, files={t.source: solutions / t.source for t in chosen.tasks})
    hand_in(built.root, name, STUDENTS[1], answers=True,
            files={t.source: chosen.folder / t.baseline for t in chosen.tasks})
    hand_in(built.root, name, STUDENTS[2], answers=False, files={})
    return ExampleClass(built.root, name, STUDENTS)


def example_cmd(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="the course folder to make (created if missing)")],
    exercise: Annotated[str | None, typer.Option("--exercise", "-e", metavar="EXERCISE",
                                                 help="the exercise to hand in [default: the first]")] = None,
) -> None:
    """A course of one exercise with three students' submissions handed in, to try autograding,
    feedback and the formgrader on."""
    err, out = Console(stderr=True), Console()
    try:
        from grader import course
    except ImportError as exc:
        err.print(f'[red]error:[/red] {exc}. The course commands need nbgrader: pip install -e ".[course]"')
        raise typer.Exit(int(ExitCode.NOT_GRADED))
    from grader.spec import SpecError
    try:
        made = make_example(directory, exercise)
    except (course.CourseError, SpecError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(int(ExitCode.USAGE))
    a, (best, naive, stubs) = made.assignment, made.students
    out.print(f"An example class in {made.root}: {a} released, and handed in by {best} (the reference "
              f"solutions), {naive} (the naive baselines) and {stubs} (the untouched stubs).\n"
              f"Next, in {made.root}:\n"
              f"  grade course autograde . {a}    on a GPU: every point for {best}, the correctness points "
              f"for {naive}, none for {stubs}\n"
              f"  nbgrader generate_feedback {a}\n"
              "  jupyter lab    then Nbgrader -> Formgrader, to review and adjust by hand", soft_wrap=True)
