"""Autograding a class: one nbgrader grading per submission, spread over GPUs and hosts by Dask.

``grade course autograde DIR ASSIGNMENT`` grades every submission as its own task. A task runs
stock ``nbgrader autograde ASSIGNMENT --student STUDENT --force`` in the course folder, with the
course's configuration, so nbgrader writes DIR/autograded/STUDENT/ASSIGNMENT itself and the graded
notebook shows the folder it was graded in. Students' folders never overlap, so tasks on several
GPUs and hosts write them side by side. (``--force``: the driver, below, has decided already that the
student needs grading, and nbgrader's own check would keep a folder left by a stopped run.)

The gradebook is the exception. DIR/gradebook.db is SQLite, the one record of the class, and SQLite
does not take writers on several hosts at once. So the process that runs ``grade course autograde``
(the driver) is its only writer:

1. Before anything is graded, the driver adds the students new to the gradebook, in the order of
   their ids (the order one sequential ``nbgrader autograde`` adds them, so nbgrader's export lists
   them alike), and copies the gradebook to a seed file.
2. Each task copies the seed to the local disk of the machine that grades and hands that private
   gradebook to nbgrader (``--db``). When nbgrader is done, the task reads back what autograding
   wrote about the student, and only that: the submission's timestamp, each grade's automatic
   score and whether it needs grading by hand, each automatic comment, each notebook's late
   penalty. It returns these values to the driver (an ``AutogradeRecord``).
3. The driver writes them into DIR/gradebook.db through nbgrader's own API, one student at a time.

The result is that of one sequential ``nbgrader autograde ASSIGNMENT``: the same nbgrader code grades
each notebook with the same configuration, reading the same gradebook (the assignment, the
student's grades by hand), and the driver stores the same fields with the same values. A test
compares the two, field by field, and grades.csv byte for byte.

Resuming. A student counts as graded, and is skipped unless ``force``, when the gradebook has their
submission, their autograded folder holds every notebook, and what they handed in is not newer
than what was graded (nbgrader's own rule), unless a mark says their grading never finished:
DIR/.autograde/ASSIGNMENT/unfinished/STUDENT exists from before the grading is handed out until its
result is in the gradebook. A run stopped by Ctrl-C, or a driver that was killed, leaves the marks
of the gradings it had not recorded, and the next run grades those students again. On Ctrl-C the
driver also asks the gradings under way to stop (a Dask Event they look at every few seconds) and
waits for them briefly, so nothing keeps writing into the course after it has returned. One run per
course and assignment at a time: the driver holds DIR/.autograde/ASSIGNMENT.lock.

Without a GPU. Kernels cannot be graded where no GPU is visible (and no scheduler gives one), so
a run there is refused, unless it is asked to grade the derivations only: then every kernel cell
scores 0 for now, and DIR/.autograde/ASSIGNMENT/kernels-pending/STUDENT marks the submission, so
the next run that grades kernels grades it again (a run for the derivations only counts it as done).

Failures. A submission whose kernel dies, or whose grading runs past the per-student timeout (its
nbgrader and every process under it are then stopped), is recorded as nbgrader records a failed
grading: the submission in the gradebook without automatic points, no autograded folder. The run
goes on; the summary says why; the next run tries that student again.

Where the gradings run. With one worker and no scheduler, in this process, one after the other.
Otherwise on Dask: a ``LocalCluster`` of our own on this host (one worker process per GPU, one
thread each, a ``GPU=1`` resource each, CUDA_VISIBLE_DEVICES set to that worker's GPU), or the
workers of a running scheduler (``scheduler=ADDRESS``, started by hand or by dask-jobqueue, each
worker with ``--resources GPU=1``). Every task asks for ``GPU=1``, so a GPU grades one submission at a
time; the grader's own per-GPU lock (grader.gpulock) guards its timing stages all the same. Hosts
must share the course folder (a shared file system) and have this checkout at the same path.
"""
from __future__ import annotations

import contextlib
import shutil
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from grader.class_dask import connect, default_workers, disconnect, inline, on_dask, parse_nvidia_smi, pinned_env, \
    visible_gpus
from grader.class_student import (AutogradeRecord, CommentEntry, GradeEntry, StudentJob, StudentOutcome,
                                  failure_reason, grade_student, gradebook, read_record)
from grader.course import CourseError, submitted_students

__all__ = ["AutogradeRecord", "ClassRun", "CommentEntry", "DEFAULT_TIMEOUT_S", "GradeEntry", "NO_GPU", "NoGpu", "Plan",
           "StudentJob", "StudentOutcome", "default_workers", "failure_reason", "grade_class", "grade_student",
           "parse_nvidia_smi", "pinned_env", "plan", "read_record", "record", "visible_gpus"]

DEFAULT_TIMEOUT_S = 3600.0          # a whole notebook; one grading cell alone may take 1800 s
NO_GPU = ("No NVIDIA GPU is visible here, so no kernel can be graded: run this on a GPU machine, give "
          "--scheduler for GPU workers elsewhere, or pass --derivations-only to grade the derivations now "
          "and the kernels later.")
WORK = ".autograde"                 # DIR/.autograde/<assignment>/: the run's seed and marks


class NoGpu(CourseError):
    """Kernels cannot be graded here: no GPU is visible and no scheduler offers one."""


# ================================================================== the driver: plan, record

@dataclass(frozen=True)
class Plan:
    to_grade: tuple[str, ...]
    skipped: tuple[str, ...]        # already graded


@dataclass
class ClassRun:
    assignment: str
    plan: Plan
    outcomes: dict[str, StudentOutcome] = field(default_factory=dict)
    interrupted: bool = False
    workers: int = 1
    where: str = ""                 # where the gradings run, as a phrase: "in this process, one at a time"
    log: Path | None = None
    derivations_only: bool = False  # no kernel was graded: they wait for a run on a GPU

    @property
    def failures(self) -> list[StudentOutcome]:
        return [o for _, o in sorted(self.outcomes.items()) if not o.graded]


def _gradebook_url(root: Path) -> str:
    return f"sqlite:///{root / 'gradebook.db'}"


def _work(root: Path, assignment: str) -> Path:
    return root / WORK / assignment


def _marks(root: Path, assignment: str) -> Path:
    return _work(root, assignment) / "unfinished"


def _pending(root: Path, assignment: str) -> Path:
    """Marks of the submissions graded for their derivations only: their kernels wait for a GPU."""
    return _work(root, assignment) / "kernels-pending"


def _timestamp(folder: Path) -> datetime | None:
    from nbgrader.utils import parse_utc

    path = folder / "timestamp.txt"
    try:
        text = path.read_text().strip()
        return parse_utc(text) if text else None
    except (OSError, ValueError):
        return None


def plan(root: Path, assignment: str, students: Sequence[str] | None = None, force: bool = False,
         derivations_only: bool = False) -> Plan:
    """Which submissions to grade, and which are already graded (nbgrader's rule, and no unfinished mark;
    for a run that grades kernels, no mark that the kernels are still to grade)."""
    from nbgrader.api import MissingEntry

    root = Path(root).resolve()
    handed_in = submitted_students(root, assignment)
    if students is not None:
        unknown = sorted(set(students) - set(handed_in))
        if unknown:
            raise CourseError(f"no submission in {root / 'submitted'} for {', '.join(unknown)}")
        handed_in = sorted(set(students))
    if force:
        return Plan(tuple(handed_in), ())
    with gradebook(_gradebook_url(root)) as gb:
        try:
            found = gb.find_assignment(assignment)
        except MissingEntry:
            raise CourseError(f"the gradebook has no assignment {assignment}: run "
                              f"`nbgrader generate_assignment {assignment}` in {root} first") from None
        notebooks = [f"{nb.name}.ipynb" for nb in found.notebooks]
        in_gradebook = {s.student.id for s in found.submissions}
    marks, pending = _marks(root, assignment), _pending(root, assignment)
    to_grade, skipped = [], []
    for student in handed_in:
        graded = root / "autograded" / student / assignment
        submitted = root / "submitted" / student / assignment
        newer = _timestamp(submitted), _timestamp(graded)
        done = (student in in_gradebook and not (marks / student).exists()
                and (derivations_only or not (pending / student).exists())
                and all((graded / nb).is_file() for nb in notebooks)
                and not (None not in newer and newer[0] > newer[1]))
        (skipped if done else to_grade).append(student)
    return Plan(tuple(to_grade), tuple(skipped))


def _prepare(root: Path, assignment: str, students: Sequence[str]) -> Path:
    """Add new students in id order, mark every grading unfinished, copy the gradebook to a seed."""
    from nbgrader.api import MissingEntry

    with gradebook(_gradebook_url(root)) as gb:
        try:
            gb.find_assignment(assignment)
        except MissingEntry:
            raise CourseError(f"the gradebook has no assignment {assignment}: run "
                              f"`nbgrader generate_assignment {assignment}` in {root} first") from None
        for student in sorted(students):
            gb.update_or_create_student(student)
    (root / "autograded").mkdir(exist_ok=True)
    marks = _marks(root, assignment)
    marks.mkdir(parents=True, exist_ok=True)
    for student in students:
        (marks / student).touch()
    seed = _work(root, assignment) / f"gradebook-{uuid.uuid4().hex[:8]}.db"
    with contextlib.closing(sqlite3.connect(root / "gradebook.db")) as source, \
            contextlib.closing(sqlite3.connect(seed)) as copy:
        source.backup(copy)
    return seed


def record(root: Path, assignment: str, outcome: StudentOutcome, derivations_only: bool = False) -> None:
    """Write one grading into the course's gradebook and folders; the driver is the only writer."""
    root = Path(root).resolve()
    student = outcome.student
    with gradebook(_gradebook_url(root)) as gb:
        gb.update_or_create_student(student)
        entry = outcome.record
        when = entry.timestamp if entry else _timestamp(root / "submitted" / student / assignment)
        submission = gb.update_or_create_submission(assignment, student, **({"timestamp": when} if when else {}))
        if entry is not None:
            notebooks = {nb.name: nb for nb in submission.notebooks}
            grades = {(nb.name, g.name): g for nb in submission.notebooks for g in nb.grades}
            comments = {(nb.name, c.name): c for nb in submission.notebooks for c in nb.comments}
            try:
                for name, penalty in entry.late_penalties:
                    notebooks[name].late_submission_penalty = penalty
                for g in entry.grades:
                    grades[g.notebook, g.cell].auto_score = g.auto_score
                    grades[g.notebook, g.cell].needs_manual_grade = g.needs_manual_grade
                for c in entry.comments:
                    comments[c.notebook, c.cell].auto_comment = c.auto_comment
            except KeyError as missing:
                gb.db.rollback()
                raise CourseError(f"{assignment} in the gradebook changed during the run ({missing} is new); "
                                  "grade the class again") from None
            gb.db.commit()
    if not outcome.graded:
        shutil.rmtree(root / "autograded" / student / assignment, ignore_errors=True)
    elif derivations_only:
        _pending(root, assignment).mkdir(parents=True, exist_ok=True)
        (_pending(root, assignment) / student).touch()
    else:
        (_pending(root, assignment) / student).unlink(missing_ok=True)
    (_marks(root, assignment) / student).unlink(missing_ok=True)


# ================================================================== the whole class

def grade_class(root: Path, assignment: str, *, workers: int | None = None, scheduler: str | None = None,
                force: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S, students: Sequence[str] | None = None,
                derivations_only: bool = False,
                env: dict[str, str] | None = None, on_plan: Callable[[ClassRun], None] | None = None,
                on_result: Callable[[StudentOutcome], None] | None = None,
                say: Callable[[str], None] = lambda _: None) -> ClassRun:
    """Grade every submission of ``assignment`` not yet graded (all with ``force``); see the module's notes.

    ``workers``: gradings at a time on this host (default: one per GPU); ``scheduler``: the address of
    a running Dask scheduler instead. ``students``: only these. ``env``: set for every nbgrader run.
    ``derivations_only``: grade where no GPU is visible; the kernels wait for a later run (refused
    otherwise: see NO_GPU).
    ``on_plan`` hears the plan before the first grading, ``on_result`` each grading once recorded,
    ``say`` what the run is waiting for.
    Ctrl-C stops the run; what was recorded stays, and the result says ``interrupted``.
    """
    import filelock

    root = Path(root).resolve()
    if workers is not None and workers < 1:
        raise CourseError(f"--workers must be at least 1, not {workers}")
    if workers is not None and scheduler is not None:
        raise CourseError("--workers and --scheduler do not go together: with a scheduler, its workers (one per "
                          "GPU) set how many gradings run at a time")
    if timeout_s <= 0:
        raise CourseError(f"--timeout must be a positive number of seconds, not {timeout_s:g}")
    gpus = visible_gpus() if scheduler is None else []
    if scheduler is None and not gpus and not derivations_only:
        raise NoGpu(NO_GPU)
    count = workers if workers is not None else max(1, len(gpus))
    (root / WORK).mkdir(exist_ok=True)
    lock = filelock.FileLock(str(root / WORK / f"{assignment}.lock"))
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        raise CourseError(f"another `grade course autograde` is grading {assignment} in {root}; wait for it to "
                          "finish (or stop it) first") from None
    try:
        where = (f"on the workers of the Dask scheduler at {scheduler}" if scheduler
                 else "in this process, one at a time" if count == 1
                 else f"on a local Dask cluster of {count} workers, one grading each at a time")
        run = ClassRun(assignment, plan(root, assignment, students, force, derivations_only), workers=count,
                       where=where, log=root / f"autograde-{assignment}.log", derivations_only=derivations_only)
        if on_plan:
            on_plan(run)
        if run.plan.to_grade:
            try:
                _grade(root, run, scheduler, gpus, float(timeout_s), env or {}, on_result, say)
            except KeyboardInterrupt:
                run.interrupted = True
        return run
    finally:
        lock.release()


def _grade(root: Path, run: ClassRun, scheduler: str | None, gpus: Sequence[str], timeout_s: float,
           env: dict[str, str], on_result: Callable[[StudentOutcome], None] | None,
           say: Callable[[str], None]) -> None:
    assignment = run.assignment
    work = _work(root, assignment)
    for old in work.glob("gradebook-*.db"):     # the seeds of runs that were stopped
        old.unlink(missing_ok=True)
    with contextlib.ExitStack() as stack, open(run.log, "a") as log:
        client = None
        if scheduler is not None or run.workers > 1:
            client, ours = connect(run.workers, scheduler, gpus)
            stack.callback(disconnect, client, ours)
        seed = _prepare(root, assignment, run.plan.to_grade)
        stop = f"s2s-stop-{uuid.uuid4().hex}"
        jobs = [StudentJob(str(root), assignment, s, str(seed), timeout_s, tuple(env.items()), stop)
                for s in run.plan.to_grade]
        log.write(f"==== grade course autograde {assignment}: {len(jobs)} to grade {run.where}, "
                  f"{datetime.now().isoformat(timespec='seconds')}\n")
        try:
            engine = on_dask(client, jobs, say) if client is not None else contextlib.nullcontext(inline(jobs))
            with engine as outcomes:
                for outcome in outcomes:
                    record(root, assignment, outcome, run.derivations_only)
                    run.outcomes[outcome.student] = outcome
                    log.write(f"---- {outcome.student}: {'graded' if outcome.graded else outcome.reason} "
                              f"({outcome.seconds:.1f} s{', ' + outcome.where if outcome.where else ''})\n"
                              f"{outcome.log}\n")
                    log.flush()
                    if on_result:
                        on_result(outcome)
        except KeyboardInterrupt:
            log.write("==== interrupted: the next run grades every student not listed above as graded\n")
            raise
    seed.unlink(missing_ok=True)
    with contextlib.suppress(OSError):      # left only where a grading is still unfinished
        _marks(root, assignment).rmdir()
        work.rmdir()

