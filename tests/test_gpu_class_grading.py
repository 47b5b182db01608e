"""On the GPU: a class of five submissions of exercise 01 (twelve with --release), worked on in a
learner's copy of the course as learners get it, autograded through the Dask path, gets exactly
the grades of one sequential, stock `nbgrader autograde` on the same GPU, and what each learner
saw in their copy agrees with their grade.

The instructor builds and releases the course from the full repository and publishes a learner's
copy (`grade course learner-copy`, for this GPU). Each learner runs the released notebook in a
kernel whose grader is that copy: the derivation checks compare digests, the grading cell grades
the kernels on this GPU. The mix: hidden solutions, untouched stubs, a subtly wrong kernel (the
last element never written), the naive baselines (correct but slow) and a .cu that does not
compile. Then the instructor autogrades with the full repository: the two runs grade copies of
one course; the gradebook and grades.csv must be identical, every derivation and kernel cell must
score where the learner's copy said it passed (and only there), and the wall times are printed.

    pytest -m gpu -s tests/test_gpu_class_grading.py

The capstone has its own test here: its bars need both models trained on the reference kernels.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
pytest.importorskip("nbgrader", reason="nbgrader is not installed: pip install -e '.[course]'")
pytest.importorskip("distributed", reason="Dask distributed is not installed: pip install -e '.[course]'")
pytest.importorskip("nbclient", reason="nbclient runs the learners' notebooks: pip install -e '.[course]'")

from course_helpers import ASSIGNMENT, ROOT, course_cli, course_env, hand_in_a_class, run_ok
from test_class_grading import gradebook_state

from grader import course, spec

KINDS = ("solution", "stub", "wrong", "slow", "syntax")
RELEASE_KINDS = ("solution", "solution", "solution", "solution", "stub", "stub", "wrong", "wrong", "slow", "slow",
                 "syntax", "syntax")


def _env(cache: Path) -> dict[str, str]:
    env = course_env(cache)
    del env["CUDA_VISIBLE_DEVICES"]          # this time the GPU grades
    return env


def test_a_class_through_dask_gets_the_grades_of_a_sequential_run(tmp_path, request: pytest.FixtureRequest):
    kinds = RELEASE_KINDS if request.config.getoption("release") else KINDS
    cache = tmp_path / "cache"
    env = _env(cache)
    copy = tmp_path / "learner-copy"
    made = run_ok(course_cli("learner-copy", str(copy)), ROOT, env, timeout=600)
    print(f"\n{' '.join(made.stdout.split())}")
    assert spec.learner_copy(copy) is not None and not (copy / "solutions").exists()
    pristine = tmp_path / "pristine" / "course"
    seen = hand_in_a_class(pristine, env, kinds, tmp_path, learner_copy=copy)

    sequential, dask = tmp_path / "sequential", tmp_path / "dask"
    shutil.copytree(pristine, sequential, symlinks=True)
    shutil.copytree(pristine, dask, symlinks=True)
    began = time.perf_counter()
    seq = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", ASSIGNMENT], cwd=sequential, env=env,
                         capture_output=True, text=True, timeout=900, check=False)
    seq_s = time.perf_counter() - began
    assert seq.returncode == 0, seq.stdout[-3000:] + seq.stderr[-3000:]
    began = time.perf_counter()
    run = subprocess.run(course_cli("autograde", str(dask), ASSIGNMENT, "--workers", "1"), cwd=dask, env=env,
                         capture_output=True, text=True, timeout=900, check=False)
    dask_s = time.perf_counter() - began
    said = run.stdout + run.stderr
    assert run.returncode == 0, said[-4000:]
    assert "Traceback" not in said, said[-4000:]

    ours, theirs = gradebook_state(dask), gradebook_state(sequential)
    print(f"{'student':<14} {'sequential':>10} {'Dask':>6}")
    for student in sorted(theirs[1]):
        print(f"{student:<14} {theirs[1][student][1]:10.1f} {ours[1].get(student, (0, float('nan')))[1]:6.1f}")
    print(f"class of {len(kinds)}: sequential nbgrader {seq_s:.0f} s, through Dask (1 worker, this GPU) {dask_s:.0f} s")
    assert ours == theirs
    for name in ("sequential", "dask"):
        subprocess.run([sys.executable, "-m", "nbgrader", "export"], cwd=tmp_path / name, env=env, check=True,
                       capture_output=True)
    assert (dask / "grades.csv").read_bytes() == (sequential / "grades.csv").read_bytes()
    scores = {s: v[1] for s, v in theirs[1].items()}
    for student, score in scores.items():
        kind = student.split("_", 1)[1]
        best = max(scores.values())
        if kind == "solution":
            assert score == best, f"a hidden solution lost points: {student} {score} < {best}"
        else:
            assert score < best, f"{student} scored like the solutions ({score})"

    # What each learner saw in the learner's copy is what the instructor's autograding gave.
    print(f"{'kind':<10} {'cells that passed in the learner copy':<40} autograde")
    for result in course.scores(dask, ASSIGNMENT):
        kind = result.student.split("_", 1)[1]
        graded = {c.name: c.score == c.max_score for c in result.cells}
        print(f"{kind:<10} {sum(seen[kind].values()):>3} of {len(seen[kind]):<34} {sum(graded.values())}")
        assert graded == seen[kind], (result.student, {c: (seen[kind][c], graded[c]) for c in graded
                                                       if graded[c] != seen[kind][c]})
    assert all(seen["solution"].values()), seen["solution"]
    assert not any(v for c, v in seen["stub"].items() if c.startswith("check_")), seen["stub"]


def test_the_capstone_gives_every_bar_its_points_on_the_solutions_and_none_on_the_stubs(tmp_path):
    """The capstone as an assignment, autograded by stock nbgrader on this GPU after the exercises:
    a student whose exercise folders hold the reference solutions earns every prompt's and every
    bar's points (both models train on those kernels), one who handed in nothing earns none, and
    each bar cell of the latter says which kernels are missing."""
    from course_helpers import CAPSTONE, build_and_release, grade_id, submit
    from grader.capstone import bar_points, load_capstone

    nbformat = pytest.importorskip("nbformat")
    env = _env(tmp_path / "cache")
    root = tmp_path / "course"
    build_and_release(root, env, [CAPSTONE.id])
    submit(root, "solution", answers=True, files={}, assignment=CAPSTONE.slug)
    submit(root, "stub", answers=False, files={}, assignment=CAPSTONE.slug)
    # What autograding the exercises first leaves beside the capstone: each student's .cu files.
    for exercise in sorted({k["exercise"] for m in CAPSTONE.models for k in load_capstone(m)["kernels"]}):
        folder = spec.find(exercise).folder.name
        target = root / "autograded" / "solution" / folder
        shutil.copytree(ROOT / "solutions" / folder, target, ignore=shutil.ignore_patterns("answers.py", "__pycache__"))
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", CAPSTONE.slug], cwd=root, env=env,
                          capture_output=True, text=True, timeout=3600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    print(f"\ncapstone autograded for 2 students in {time.perf_counter() - began:.0f} s")
    results = {s.student: s for s in course.scores(root, CAPSTONE.slug)}
    bars = sum(sum(bar_points(load_capstone(m)).values()) for m in CAPSTONE.models)
    for student, s in results.items():
        print(student, {c.name: c.score for c in s.cells})
    assert results["solution"].score == results["solution"].max_score
    assert results["solution"].group("model_") == (bars, bars)
    assert results["stub"].score == 0
    nb = nbformat.read(root / "autograded" / "stub" / CAPSTONE.slug / CAPSTONE.notebook, as_version=4)
    for cell in nb.cells:
        if grade_id(cell).startswith("model_"):
            errors = [o for o in cell.outputs if o.output_type == "error"]
            assert errors and "Nothing was trained" in errors[0].evalue, cell.outputs
