"""A class graded one submission at a time, over Dask workers, with nbgrader's gradebook as the one record.

One course of exercise 01 on a machine without a GPU, graded for its derivations only
(``--derivations-only``), so the kernels get compile-only grades and the derivation prompts score as
answered. Five students hand in, each with a submission time: the
hidden solution, the untouched stubs, the solution with a syntax error in its .cu, and a notebook
whose kernel dies (``os._exit(1)`` in an answer cell). Stock ``nbgrader autograde`` grades them in one
sequential run: the reference. Each test grades a fresh copy of the same course another way and
compares the gradebook field by field, grades.csv byte for byte, and the autograded folders.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbgrader", reason="nbgrader is not installed: pip install -e '.[course]'")
pytest.importorskip("distributed", reason="Dask distributed is not installed: pip install -e '.[course]'")

from course_helpers import (
    ASSIGNMENT,
    EX01,
    SOLUTIONS,
    build_and_release,
    course_cli,
    course_env,
    grade_id,
    run_ok,
    submit,
)

from grader import class_dask, class_grading
from grader.result import ExitCode

GOOD = ("solution", "stub", "syntax")
CRASH = "crash"
STUDENTS = tuple(sorted((*GOOD, CRASH)))
NOTEBOOK = f"{ASSIGNMENT}.ipynb"


# ================================================================== the course and the reference grading

def _hand_in(root: Path, student: str, day: int, *, answers: bool, files: dict[str, Path],
             first_cell: str = "") -> None:
    target = submit(root, student, answers=answers, files=files)
    (target / "timestamp.txt").write_text(f"2026-03-{day:02d} 10:00:00.000000 UTC")
    if first_cell:
        nb = nbformat.read(target / NOTEBOOK, as_version=4)
        cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
        cell.source = f"{first_cell}\n{cell.source}"
        nbformat.write(nb, target / NOTEBOOK)


@dataclass
class Graded:
    root: Path
    gradebook: tuple
    grades_csv: bytes


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("s2s-cache")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory, cache) -> Path:
    """The course with every submission handed in and nothing graded yet."""
    root = tmp_path_factory.mktemp("pristine") / "course"
    build_and_release(root, course_env(cache), ["01"])
    solutions = {t.source: SOLUTIONS / t.source for t in EX01.tasks}
    broken = root.parent / "vector_add.cu"
    broken.write_text((SOLUTIONS / "vector_add.cu").read_text().replace("kUnroll = 4;", "kUnroll = 4", 1))
    assert broken.read_text() != (SOLUTIONS / "vector_add.cu").read_text()
    _hand_in(root, "solution", 1, answers=True, files=solutions)
    _hand_in(root, "stub", 2, answers=False, files={})
    _hand_in(root, "syntax", 3, answers=True, files={**solutions, "vector_add.cu": broken})
    _hand_in(root, CRASH, 4, answers=True, files=solutions, first_cell="import os\nos._exit(1)")
    return root


def _copy(pristine: Path, tmp_path: Path) -> Path:
    root = tmp_path / "course"
    shutil.copytree(pristine, root, symlinks=True)
    return root


def gradebook_state(root: Path) -> tuple:
    """Everything the gradebook says about the students and their submissions of the assignment."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        students = [(s.id, s.first_name, s.last_name, s.email, s.lms_user_id) for s in gb.students]
        submissions = {}
        for sub in gb.find_assignment(ASSIGNMENT).submissions:
            submissions[sub.student_id] = (str(sub.timestamp), float(sub.score), {
                nb.name: (nb.late_submission_penalty,
                          sorted((g.name, g.auto_score, g.manual_score, g.extra_credit, g.needs_manual_grade)
                                 for g in nb.grades),
                          sorted((c.name, c.auto_comment, c.manual_comment) for c in nb.comments))
                for nb in sub.notebooks})
    return students, submissions


def _export(root: Path, cache: Path) -> bytes:
    run_ok([sys.executable, "-m", "nbgrader", "export"], root, course_env(cache))
    return (root / "grades.csv").read_bytes()


@pytest.fixture(scope="module")
def reference(tmp_path_factory, pristine, cache) -> Graded:
    """One stock `nbgrader autograde` over the class, as an instructor runs it without this repo's help."""
    root = _copy(pristine, tmp_path_factory.mktemp("reference"))
    done = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", ASSIGNMENT], cwd=root,
                                        env=course_env(cache), capture_output=True, text=True, timeout=600,
                                        check=False)
    assert done.returncode == 1, "the crashing submission makes nbgrader exit 1"
    assert "DeadKernelError" in done.stdout + done.stderr
    return Graded(root, gradebook_state(root), _export(root, cache))


def _without(state: tuple, student: str) -> tuple:
    students, submissions = state
    return [s for s in students if s[0] != student], {k: v for k, v in submissions.items() if k != student}


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _same_autograded_folders(root: Path, reference: Path) -> None:
    for student in STUDENTS:
        ours, theirs = root / "autograded" / student / ASSIGNMENT, reference / "autograded" / student / ASSIGNMENT
        assert ours.is_dir() == theirs.is_dir(), student
        if theirs.is_dir():
            mine, ref = _files(ours), _files(theirs)
            assert sorted(mine) == sorted(ref), student
            for name in mine:
                if not name.endswith(".ipynb"):
                    assert mine[name] == ref[name], (student, name)
            graded = nbformat.read(ours / NOTEBOOK, as_version=4)
            assert _errors(graded) == _errors(nbformat.read(theirs / NOTEBOOK, as_version=4)), student
            # The report names the folder the notebook was graded in: the student's own, in place.
            report = next(c for c in graded.cells if grade_id(c) == "grade_kernels").outputs[-1]
            assert str(ours) in report["data"]["text/plain"], student


def _errors(nb) -> list[list[str]]:
    """Which exception each code cell ended with, if any."""
    return [[o.get("ename") for o in c.get("outputs", []) if o.output_type == "error"]
            for c in nb.cells if c.cell_type == "code"]


def test_the_reference_run_grades_as_test_course_expects(reference):
    _, submissions = reference.gradebook
    assert sorted(submissions) == list(STUDENTS)
    assert {s: v[1] for s, v in submissions.items()} == {"crash": 0.0, "solution": 10.0, "stub": 0.0, "syntax": 10.0}
    assert not (reference.root / "autograded" / CRASH / ASSIGNMENT).exists()


# ================================================================== two Dask workers, a crash and a hang

def test_two_dask_workers_grade_like_one_sequential_nbgrader_run(pristine, reference, cache, tmp_path):
    """`--workers 2` on a LocalCluster: the same gradebook, grades.csv and folders as stock nbgrader, and
    a crash and a hang among the submissions stop nothing but themselves."""
    root = _copy(pristine, tmp_path)
    _hand_in(root, "hang", 5, answers=True, files={t.source: SOLUTIONS / t.source for t in EX01.tasks},
             first_cell="import time\ntime.sleep(100000)")
    env = course_env(cache)
    done = subprocess.run(course_cli("autograde", str(root), ASSIGNMENT, "--workers", "2", "--timeout", "45",
                                     "--derivations-only"),
                          cwd=root, env=env, capture_output=True, text=True, timeout=600, check=False)
    said = done.stdout + done.stderr
    assert done.returncode == ExitCode.FAILED, said
    assert "Traceback" not in said, said
    assert "on a local Dask cluster of 2 workers" in said
    assert "Not graded (2; recorded with 0 points" in said
    assert "hang: did not finish within 45 s, so it was stopped" in said
    assert "crash: nbgrader could not grade it: DeadKernelError: Kernel died" in said
    for student in GOOD:
        assert f"{student}: " not in done.stderr.split("Not graded", 1)[-1], said

    state = gradebook_state(root)
    assert _without(state, "hang") == reference.gradebook
    hang = state[1]["hang"]
    assert hang[0] == "2026-03-05 10:00:00" and hang[1] == 0.0
    assert all(g[1] is None for nb in hang[2].values() for g in nb[1]), "no automatic points for the hang"
    csv = (root / "grades.csv").read_bytes().splitlines(keepends=True)
    assert b"".join(line for line in csv if b",hang," not in line) == reference.grades_csv
    assert b"01_foundations,,2026-03-05 10:00:00,hang,,,,0.0,0.0,0.0,19.0\n" in csv
    _same_autograded_folders(root, reference.root)
    assert not (root / "autograded" / "hang" / ASSIGNMENT).exists()
    # Nothing of the run is left but the marks of the kernels still to grade: no seed, no mark of an
    # unfinished grading, no process (the hung kernel was stopped with its nbgrader).
    assert sorted(p.name for p in (root / ".autograde").iterdir()) == [ASSIGNMENT, f"{ASSIGNMENT}.lock"]
    assert sorted(p.relative_to(root / ".autograde" / ASSIGNMENT).as_posix()
                  for p in (root / ".autograde" / ASSIGNMENT).rglob("*")) == [
        "kernels-pending", *(f"kernels-pending/{s}" for s in sorted(GOOD))]
    assert not _processes_in(root)


def _processes_in(root: Path) -> list[list[str]]:
    """The command lines of processes working in the course: nbgrader and the notebooks' kernels."""
    import psutil

    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.cwd().startswith(str(root)):
                found.append(p.cmdline())
    return found


# ================================================================== stopped, then resumed

def test_an_interrupted_run_resumes_without_regrading(pristine, reference, cache, tmp_path, monkeypatch):
    """Ctrl-C after two results on a running scheduler's workers; the next run grades only the rest, and
    the class ends as the sequential run left it. A failed grading is tried again, a done one never."""
    from distributed import LocalCluster

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    root = _copy(pristine, tmp_path)
    env = course_env(cache)

    seen: list[str] = []

    def stop_after_two(outcome) -> None:
        seen.append(outcome.student)
        if len(seen) == 2:
            raise KeyboardInterrupt     # what Ctrl-C raises in the driver

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, resources={"GPU": 1},
                      dashboard_address=None) as cluster:
        first = class_grading.grade_class(root, ASSIGNMENT, scheduler=cluster.scheduler_address, env=env,
                                          on_result=stop_after_two)
    assert first.interrupted and len(first.outcomes) == 2
    assert not _processes_in(root), "the gradings under way were stopped"
    recorded = sorted(first.outcomes)
    done_first = sorted(s for s, o in first.outcomes.items() if o.graded)
    marks = root / ".autograde" / ASSIGNMENT / "unfinished"
    assert sorted(p.name for p in marks.iterdir()) == sorted(set(STUDENTS) - set(recorded))
    when = {s: (root / "autograded" / s / ASSIGNMENT / NOTEBOOK).stat().st_mtime_ns for s in done_first}

    with pytest.raises(class_grading.NoGpu, match="No NVIDIA GPU is visible here"):
        class_grading.grade_class(root, ASSIGNMENT, workers=1, env=env)
    second = class_grading.grade_class(root, ASSIGNMENT, workers=1, env=env, derivations_only=True)
    assert not second.interrupted
    assert list(second.plan.skipped) == done_first
    assert sorted(second.outcomes) == sorted(set(STUDENTS) - set(done_first)), "graded again, or left out"
    assert when == {s: (root / "autograded" / s / ASSIGNMENT / NOTEBOOK).stat().st_mtime_ns for s in done_first}
    assert gradebook_state(root) == reference.gradebook
    assert _export(root, cache) == reference.grades_csv
    _same_autograded_folders(root, reference.root)

    third = class_grading.grade_class(root, ASSIGNMENT, workers=1, env=env, derivations_only=True)
    assert third.plan.to_grade == (CRASH,) and [o.student for o in third.failures] == [CRASH]
    assert gradebook_state(root) == reference.gradebook


# ================================================================== spreading over GPUs

NVIDIA_SMI = """\
GPU 0: NVIDIA H200 (UUID: GPU-11111111-aaaa-bbbb-cccc-000000000000)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-22222222-aaaa-bbbb-cccc-000000000000)
  MIG 3g.20gb     Device  0: (UUID: MIG-33333333-aaaa-bbbb-cccc-000000000000)
  MIG 3g.20gb     Device  1: (UUID: MIG-44444444-aaaa-bbbb-cccc-000000000000)
"""


def test_gpus_are_counted_without_cuda():
    assert class_grading.parse_nvidia_smi(NVIDIA_SMI) == [
        "GPU-11111111-aaaa-bbbb-cccc-000000000000", "MIG-33333333-aaaa-bbbb-cccc-000000000000",
        "MIG-44444444-aaaa-bbbb-cccc-000000000000"]
    assert class_grading.parse_nvidia_smi("No devices were found\n") == []
    assert class_grading.visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 3"}) == ["2", "3"]
    assert class_grading.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert class_grading.visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == []
    assert [class_grading.pinned_env(i, ["a", "b"]) for i in range(3)] == [
        {"CUDA_VISIBLE_DEVICES": "a"}, {"CUDA_VISIBLE_DEVICES": "b"}, {"CUDA_VISIBLE_DEVICES": "a"}]
    assert class_grading.pinned_env(0, []) == {}


def test_each_local_worker_sees_one_gpu_and_holds_one_gpu_resource():
    client, cluster = class_dask.connect(2, None, ["GPU-a", "GPU-b"])
    try:
        seen = client.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES"))
        workers = client.scheduler_info()["workers"].values()
    finally:
        class_dask.disconnect(client, cluster)
    assert sorted(seen.values()) == ["GPU-a", "GPU-b"]
    assert [(w["nthreads"], w["resources"]) for w in workers] == [(1, {"GPU": 1})] * 2


def test_a_crash_is_reported_by_its_exception():
    log = ("[AutogradeApp | ERROR] Traceback (most recent call last):\n"
           "      raise DeadKernelError(\"Kernel died\") from None\n"
           "    nbclient.exceptions.DeadKernelError: Kernel died\n")
    assert class_grading.failure_reason(log).startswith("nbgrader could not grade it: DeadKernelError: Kernel died")
    assert class_grading.failure_reason("nothing useful") == "nbgrader could not grade it (its log says why)"


# ================================================================== mistakes get a sentence

def _autograde(root: Path, cache: Path, *args: str, **env: str) -> tuple[int, str]:
    """`grade course autograde` in the course: its exit status and what it told the terminal, in one line."""
    done = subprocess.run(course_cli("autograde", str(root), ASSIGNMENT, *args), cwd=root,
                          env={**course_env(cache), **env}, capture_output=True, text=True, timeout=300, check=False)
    return done.returncode, " ".join((done.stdout + done.stderr).split())


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:9", "no-port-here"])
def test_a_scheduler_that_cannot_be_reached_is_a_clear_error(pristine, cache, tmp_path, address):
    root = _copy(pristine, tmp_path)
    status, said = _autograde(root, cache, "--scheduler", address, DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="2s")
    assert status == ExitCode.USAGE, said
    assert f"error: could not reach the Dask scheduler at {address}" in said
    assert "start one with `dask scheduler`" in said and "Traceback" not in said
    assert gradebook_state(root)[1] == {}, "nothing was recorded"


def test_a_scheduler_whose_workers_have_no_gpu_resource_is_refused(pristine, cache, tmp_path):
    from distributed import LocalCluster

    root = _copy(pristine, tmp_path)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://",
                      dashboard_address=None) as cluster:
        status, said = _autograde(root, cache, "--scheduler", cluster.scheduler_address)
    assert status == ExitCode.USAGE, said
    assert "offers a GPU resource" in said and "start each worker with `--resources GPU=1`" in said
    assert "Traceback" not in said


def test_workers_and_scheduler_together_are_refused(pristine, cache, tmp_path):
    root = _copy(pristine, tmp_path)
    status, said = _autograde(root, cache, "--workers", "2", "--scheduler", "tcp://127.0.0.1:8786")
    assert status == ExitCode.USAGE and "--workers and --scheduler do not go together" in said, said
    assert "Traceback" not in said

