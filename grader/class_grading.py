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
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from grader.course import CourseError, nbgrader_command, submitted_students

DEFAULT_TIMEOUT_S = 3600.0          # a whole notebook; one grading cell alone may take 1800 s
WORK = ".autograde"                 # DIR/.autograde/<assignment>/: the run's seed and marks
POLL_S = 1.0
STOP_POLL_S = 5.0                   # how often a Dask task asks whether the run was interrupted
SCHEDULER_WAIT_S = 30.0             # how long to wait for a scheduler's first worker
# The last line of a Python traceback, e.g. "nbclient.exceptions.DeadKernelError: Kernel died".
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*(?:Error|Exception|Interrupt)): (.+)$")


# ================================================================== GPUs of this host

def visible_gpus(env: dict[str, str] | None = None) -> list[str]:
    """The GPUs gradings on this host may use, as CUDA_VISIBLE_DEVICES names them.

    Found without initialising CUDA: CUDA_VISIBLE_DEVICES when it is set, else ``nvidia-smi -L``,
    else NVML (nvidia-ml-py) if it is installed. Empty where there is none.
    """
    env = os.environ if env is None else env
    if "CUDA_VISIBLE_DEVICES" in env:
        return [d.strip() for d in env["CUDA_VISIBLE_DEVICES"].split(",") if d.strip() and not d.strip().startswith("-")]
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
        if listed.returncode == 0:
            found = parse_nvidia_smi(listed.stdout)
            if found:
                return found
    except (OSError, subprocess.TimeoutExpired):
        pass
    return _nvml_gpus()


def parse_nvidia_smi(text: str) -> list[str]:
    """UUIDs from ``nvidia-smi -L``: each GPU's, or its MIG instances' where it is partitioned."""
    gpus: list[list[str]] = []
    for line in text.splitlines():
        uuid_part = line.rsplit("(UUID: ", 1)[-1].rstrip(")").strip() if "(UUID: " in line else ""
        if line.startswith("GPU ") and uuid_part:
            gpus.append([uuid_part])
        elif line.strip().startswith("MIG ") and uuid_part and gpus:
            if gpus[-1][0].startswith("GPU-"):
                gpus[-1] = []
            gpus[-1].append(uuid_part)
    return [d for devices in gpus for d in devices]


def _nvml_gpus() -> list[str]:
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
        try:
            return [_text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)))
                    for i in range(pynvml.nvmlDeviceGetCount())]
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        return []


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def default_workers() -> int:
    """One worker per GPU of this host; one where none is found."""
    return max(1, len(visible_gpus()))


def pinned_env(worker: int | str, gpus: Sequence[str]) -> dict[str, str]:
    """The environment that pins worker number ``worker`` to its GPU (round robin past the last)."""
    if not gpus:
        return {}
    return {"CUDA_VISIBLE_DEVICES": gpus[int(worker) % len(gpus)]}


# ================================================================== one student's grading

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
def _gradebook(db_url: str):
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

    with _gradebook(db_url) as gb:
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

    @property
    def failures(self) -> list[StudentOutcome]:
        return [o for _, o in sorted(self.outcomes.items()) if not o.graded]


def _gradebook_url(root: Path) -> str:
    return f"sqlite:///{root / 'gradebook.db'}"


def _work(root: Path, assignment: str) -> Path:
    return root / WORK / assignment


def _marks(root: Path, assignment: str) -> Path:
    return _work(root, assignment) / "unfinished"


def _timestamp(folder: Path) -> datetime | None:
    from nbgrader.utils import parse_utc

    path = folder / "timestamp.txt"
    try:
        text = path.read_text().strip()
        return parse_utc(text) if text else None
    except (OSError, ValueError):
        return None


def plan(root: Path, assignment: str, students: Sequence[str] | None = None, force: bool = False) -> Plan:
    """Which submissions to grade, and which are already graded (nbgrader's rule, and no unfinished mark)."""
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
    with _gradebook(_gradebook_url(root)) as gb:
        try:
            found = gb.find_assignment(assignment)
        except MissingEntry:
            raise CourseError(f"the gradebook has no assignment {assignment}: run "
                              f"`nbgrader generate_assignment {assignment}` in {root} first") from None
        notebooks = [f"{nb.name}.ipynb" for nb in found.notebooks]
        in_gradebook = {s.student.id for s in found.submissions}
    marks = _marks(root, assignment)
    to_grade, skipped = [], []
    for student in handed_in:
        graded = root / "autograded" / student / assignment
        submitted = root / "submitted" / student / assignment
        newer = _timestamp(submitted), _timestamp(graded)
        done = (student in in_gradebook and not (marks / student).exists()
                and all((graded / nb).is_file() for nb in notebooks)
                and not (None not in newer and newer[0] > newer[1]))
        (skipped if done else to_grade).append(student)
    return Plan(tuple(to_grade), tuple(skipped))


def _prepare(root: Path, assignment: str, students: Sequence[str]) -> Path:
    """Add new students in id order, mark every grading unfinished, copy the gradebook to a seed."""
    from nbgrader.api import MissingEntry

    with _gradebook(_gradebook_url(root)) as gb:
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


def record(root: Path, assignment: str, outcome: StudentOutcome) -> None:
    """Write one grading into the course's gradebook and folders; the driver is the only writer."""
    root = Path(root).resolve()
    student = outcome.student
    with _gradebook(_gradebook_url(root)) as gb:
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
    (_marks(root, assignment) / student).unlink(missing_ok=True)


# ================================================================== where the gradings run

def _inline(jobs: Sequence[StudentJob]) -> Iterator[StudentOutcome]:
    for job in jobs:
        yield grade_student(job)


def _stop_requested(name: str) -> Callable[[], bool]:
    def asked() -> bool:
        from distributed import Event
        try:
            return bool(Event(name).is_set())
        except Exception:   # noqa: BLE001 (a scheduler that does not answer is no reason to stop a grading)
            return False
    return asked


def _dask_task(job: StudentJob) -> StudentOutcome:
    return grade_student(job, _stop_requested(job.stop_event) if job.stop_event else None)


def _connect(workers: int, scheduler: str | None, gpus: Sequence[str]):
    """A Dask client, and the cluster we started for it (None for a running scheduler)."""
    from distributed import Client, LocalCluster, Nanny

    if scheduler is None:
        class PinnedNanny(Nanny):
            """A nanny whose worker process sees one GPU: the one at its place in ``gpus``."""

            def __init__(self, *args, **kwargs):
                env = {**(kwargs.pop("env", None) or {}), **pinned_env(kwargs.get("name", 0), gpus)}
                super().__init__(*args, env=env, **kwargs)

        # Ctrl-C is the driver's to handle: the worker processes (and the nbgrader runs they start)
        # inherit an ignored SIGINT and are stopped by the driver, which waits for them.
        with _sigint_ignored():
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, resources={"GPU": 1},
                                   worker_class=PinnedNanny, dashboard_address=None)
        return Client(cluster), cluster
    try:
        client = Client(scheduler)
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        raise CourseError(f"could not reach the Dask scheduler at {scheduler} ({exc}); start one with "
                          "`dask scheduler` and give the address it prints (tcp://HOST:8786)") from None
    try:
        client.wait_for_workers(1, timeout=SCHEDULER_WAIT_S)
    except (TimeoutError, OSError):
        client.close()
        raise CourseError(f"the Dask scheduler at {scheduler} has no worker after {SCHEDULER_WAIT_S:g} s; start "
                          "one per GPU: `dask worker ADDRESS --nworkers 1 --nthreads 1 --resources GPU=1`") from None
    with_gpu = [w for w in client.scheduler_info()["workers"].values()
                if w.get("resources", {}).get("GPU", 0) >= 1]
    if not with_gpu:
        client.close()
        raise CourseError(f"no worker of the Dask scheduler at {scheduler} offers a GPU resource, so nothing "
                          "could run; start each worker with `--resources GPU=1`")
    return client, None


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@contextlib.contextmanager
def _on_dask(client, jobs: Sequence[StudentJob], say: Callable[[str], None]) -> Iterator[Iterator[StudentOutcome]]:
    """The outcomes of ``jobs`` as they finish on the cluster; on an early exit, stops what runs."""
    from distributed import Event, as_completed, wait

    futures = []
    try:
        by_key = {}
        for job in jobs:
            key = f"autograde-{job.assignment}-{job.student}-{uuid.uuid4().hex[:8]}"
            future = client.submit(_dask_task, job, key=key, resources={"GPU": 1}, pure=False)
            futures.append(future)
            by_key[future.key] = job.student

        def outcomes() -> Iterator[StudentOutcome]:
            for future in as_completed(futures):
                try:
                    yield future.result()
                except Exception as exc:    # noqa: BLE001 (a worker died, a task could not run: that student only)
                    yield StudentOutcome(by_key[future.key], False,
                                         f"the Dask worker grading it failed: {type(exc).__name__}: {exc}")

        yield outcomes()
    finally:
        unfinished = [f for f in futures if not f.done()]
        if unfinished:
            # Stopped early (Ctrl-C): every grading under way stops its nbgrader and cleans its folder
            # within STOP_POLL_S; those not started return at once.
            say("stopping the gradings under way (a few seconds; Ctrl-C again not to wait)")
            try:
                Event(jobs[0].stop_event, client=client).set()
                wait(unfinished, timeout=STOP_POLL_S + 15)
            except (KeyboardInterrupt, TimeoutError, OSError):
                pass
            with contextlib.suppress(OSError, TimeoutError):
                client.cancel(unfinished)


# ================================================================== the whole class

def grade_class(root: Path, assignment: str, *, workers: int | None = None, scheduler: str | None = None,
                force: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S, students: Sequence[str] | None = None,
                env: dict[str, str] | None = None, on_plan: Callable[[ClassRun], None] | None = None,
                on_result: Callable[[StudentOutcome], None] | None = None,
                say: Callable[[str], None] = lambda _: None) -> ClassRun:
    """Grade every submission of ``assignment`` not yet graded (all with ``force``); see the module's notes.

    ``workers``: gradings at a time on this host (default: one per GPU); ``scheduler``: the address of
    a running Dask scheduler instead. ``students``: only these. ``env``: set for every nbgrader run.
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
        run = ClassRun(assignment, plan(root, assignment, students, force), workers=count, where=where,
                       log=root / f"autograde-{assignment}.log")
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
            client, ours = _connect(run.workers, scheduler, gpus)
            stack.callback(_close, client, ours)
        seed = _prepare(root, assignment, run.plan.to_grade)
        stop = f"s2s-stop-{uuid.uuid4().hex}"
        jobs = [StudentJob(str(root), assignment, s, str(seed), timeout_s, tuple(env.items()), stop)
                for s in run.plan.to_grade]
        log.write(f"==== grade course autograde {assignment}: {len(jobs)} to grade {run.where}, "
                  f"{datetime.now().isoformat(timespec='seconds')}\n")
        try:
            engine = _on_dask(client, jobs, say) if client is not None else contextlib.nullcontext(_inline(jobs))
            with engine as outcomes:
                for outcome in outcomes:
                    record(root, assignment, outcome)
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


def _close(client, cluster) -> None:
    client.close()
    if cluster is not None:
        cluster.close()
