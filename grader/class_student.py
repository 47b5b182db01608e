"""One student's grading: stock ``nbgrader autograde`` for that student with a private copy of the
gradebook, stopped when it runs past its timeout or the run is interrupted, and what it wrote about
the submission read back as plain data for the driver to record (see grader.class_grading)."""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from grader.course import nbgrader_command

POLL_S = 1.0
STOP_POLL_S = 5.0                   # how often a Dask task asks whether the run was interrupted
# The last line of a Python traceback, e.g. "nbclient.exceptions.DeadKernelError: Kernel died".
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*(?:Error|Exception|Interrupt)): (.+)$")


@dataclass(frozen=True)
class GradeEntry:
    notebook: str
    cell: str
    auto_score: float | None
    needs_manual_grade: bool


@dataclass(frozen=True)
class CommentEntry:
    notebook: str
    cell: str
    auto_comment: str | None


@dataclass(frozen=True)
class AutogradeRecord:
    """What ``nbgrader autograde`` writes to a gradebook about one submission."""

    timestamp: datetime | None
    late_penalties: tuple[tuple[str, float | None], ...]
    grades: tuple[GradeEntry, ...]
    comments: tuple[CommentEntry, ...]


@dataclass(frozen=True)
class StudentJob:
    """One grading, as plain data that travels to whichever worker runs it."""

    root: str                       # the course folder, seen at the same path by every host
    assignment: str
    student: str
    seed: str                       # the gradebook as the run began
    timeout_s: float
    env: tuple[tuple[str, str], ...] = ()   # set for nbgrader on top of the grading process's own
    stop_event: str = ""            # a Dask Event that, once set, asks the grading to stop


@dataclass
class StudentOutcome:
    student: str
    graded: bool
    reason: str = ""                # why not graded, as the instructor reads it
    record: AutogradeRecord | None = None
    log: str = ""                   # nbgrader's output
    seconds: float = 0.0
    where: str = ""                 # host and GPU


def grade_student(job: StudentJob, should_stop: Callable[[], bool] | None = None) -> StudentOutcome:
    """``nbgrader autograde`` for one student, with a private gradebook; never raises for the submission."""
    began = time.monotonic()
    where = _where()
    if should_stop is not None and should_stop():
        return StudentOutcome(job.student, False, "stopped: the run was interrupted", where=where)
    dest = Path(job.root) / "autograded" / job.student / job.assignment
    with tempfile.TemporaryDirectory(prefix="s2s-autograde-") as private:
        db = Path(private) / "gradebook.db"
        shutil.copyfile(job.seed, db)
        url = f"sqlite:///{db}"
        cmd = nbgrader_command("autograde", job.assignment, "--student", job.student, "--force", f"--db={url}")
        with open(Path(private) / "nbgrader.log", "w+", errors="replace") as log:
            proc = subprocess.Popen(cmd, cwd=job.root, env={**os.environ, **dict(job.env)}, stdout=log,
                                    stderr=subprocess.STDOUT)
            try:
                ended = _wait(proc, job.timeout_s, should_stop)
            finally:
                if proc.poll() is None:
                    _stop_tree(proc)
            log.seek(0)
            text = log.read()
        seconds = time.monotonic() - began
        if ended != "exited":
            shutil.rmtree(dest, ignore_errors=True)
            reason = (f"did not finish within {job.timeout_s:g} s, so it was stopped" if ended == "timeout"
                      else "stopped: the run was interrupted")
            return StudentOutcome(job.student, False, reason, None, text, seconds, where)
        record = read_record(url, job.assignment, job.student)
    if proc.returncode != 0:
        return StudentOutcome(job.student, False, failure_reason(text), record, text, seconds, where)
    if record is None or not dest.is_dir():
        return StudentOutcome(job.student, False, "nbgrader finished without grading it (its log says why)",
                              record, text, seconds, where)
    return StudentOutcome(job.student, True, "", record, text, seconds, where)


def _where() -> str:
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES")
    return socket.gethostname() + (f", GPU {gpu}" if gpu else "")


def _wait(proc: subprocess.Popen, timeout_s: float, should_stop: Callable[[], bool] | None) -> str:
    deadline = time.monotonic() + timeout_s
    next_stop_check = time.monotonic() + STOP_POLL_S
    while True:
        try:
            proc.wait(timeout=POLL_S)
            return "exited"
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if now >= deadline:
            return "timeout"
        if should_stop is not None and now >= next_stop_check:
            next_stop_check = now + STOP_POLL_S
            if should_stop():
                return "stopped"


def _stop_tree(proc: subprocess.Popen) -> None:
    """Stop nbgrader and everything under it: its kernel, the grader's compilers and workers."""
    import psutil

    try:
        parent = psutil.Process(proc.pid)
        family = [*parent.children(recursive=True), parent]
    except psutil.NoSuchProcess:
        family = []
    for p in family:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(family, timeout=5)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    proc.wait()


def failure_reason(log: str) -> str:
    """The sentence that says why nbgrader could not grade a submission, from its log."""
    errors = [m for m in (_EXCEPTION_LINE.match(line.strip()) for line in log.splitlines()) if m]
    if errors:
        kind, message = errors[-1].groups()
        said = f"nbgrader could not grade it: {kind}: {message}"
        if kind == "DeadKernelError":
            return said + " (the notebook's Python process ended while a cell ran: os._exit, a crash in native code)"
        return said
    return "nbgrader could not grade it (its log says why)"


@contextlib.contextmanager
def gradebook(db_url: str):
    """nbgrader's Gradebook, without the SQLAlchemy warnings its own code triggers on every new submission."""
    from nbgrader.api import Gradebook
    from sqlalchemy.exc import SAWarning

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=SAWarning)
        with Gradebook(db_url) as gb:
            yield gb


def read_record(db_url: str, assignment: str, student: str) -> AutogradeRecord | None:
    """What the gradebook at ``db_url`` holds about the student's submission, or None."""
    from nbgrader.api import MissingEntry

    with gradebook(db_url) as gb:
        try:
            submission = gb.find_submission(assignment, student)
        except MissingEntry:
            return None
        notebooks = sorted(submission.notebooks, key=lambda nb: nb.name)
        return AutogradeRecord(
            timestamp=submission.timestamp,
            late_penalties=tuple((nb.name, nb.late_submission_penalty) for nb in notebooks),
            grades=tuple(sorted((GradeEntry(nb.name, g.name, g.auto_score, bool(g.needs_manual_grade))
                                 for nb in notebooks for g in nb.grades), key=lambda e: (e.notebook, e.cell))),
            comments=tuple(sorted((CommentEntry(nb.name, c.name, c.auto_comment)
                                   for nb in notebooks for c in nb.comments), key=lambda e: (e.notebook, e.cell))))
