"""The instructor's path through stock nbgrader, end to end, on a machine without a GPU.

`grade course build` writes the course; stock nbgrader releases it; three students hand in (the
hidden solution, the untouched stubs, a subtly wrong kernel); `grade course autograde
--derivations-only` grades them all in one nbgrader run; nbgrader writes the feedback and exports
the grades. Every nbgrader step runs as a child process with CUDA_VISIBLE_DEVICES="", so the
kernels score zero for the stated no-GPU reason everywhere (and wait for a run on a GPU), and the
derivation prompts score as answered, by the instructor's own checkers.

Each known way nbgrader goes wrong with this kind of exercise has its test here: solutions copied
into the release, stubs put back over the students' .cu files, points decided by printed text or
lost to stderr, hidden material in feedback, build products in autograded/ and feedback/, and cell
timeouts too short for GPU grading.
"""
from __future__ import annotations

import csv
import html
import io
import os
import re
import shutil
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbgrader", reason="nbgrader is not installed: pip install -e '.[course]'")

from course_helpers import (ASSIGNMENT, CAPSTONE, EX01, NO_GPU, ROOT, SOLUTIONS, WRONG_VECTOR_ADD,  # noqa: E402
                            course_env, grade_id, run_ok, submit)
from lab_server import jupyter_lab  # noqa: E402

from grader import class_grading, course, spec  # noqa: E402
from grader.course import CourseError, defined_names, function_bodies, hidden_answers  # noqa: E402
from grader.notebook import (checked, correctness_problem, quiet, require_correct, require_speed,  # noqa: E402
                             speed_problem)
from grader.result import ExitCode, GradeResult, Points, TaskResult  # noqa: E402

STUDENTS = ("solution", "stub", "wrong")
DERIVATION_POINTS = 10.0           # the four prompts of exercise 01: 2 + 3 + 2 + 3
KERNEL_POINTS = sum(t.points.total for t in EX01.tasks)

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None,
                                reason="nvcc (the CUDA toolkit) is not on PATH, so no .cu can be compiled here")


# ================================================================== the course, built once

@dataclass
class Course:
    root: Path
    cache: Path
    autograde_output: str

    def notebook(self, where: str, student: str | None = None):
        folder = self.root / where / (student or "") / ASSIGNMENT
        return nbformat.read(folder / f"{ASSIGNMENT}.ipynb", as_version=4)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Course:
    root = tmp_path_factory.mktemp("course")
    cache = tmp_path_factory.mktemp("s2s-cache")
    env = course_env(cache)
    cli = [sys.executable, "-m", "grader.course_cli"]
    run_ok(cli + ["build", str(root)], ROOT, env)
    for ex in spec.units():
        run_ok([sys.executable, "-m", "nbgrader", "generate_assignment", ex.folder.name, "--force"], root, env)
    solutions = {t.source: SOLUTIONS / t.source for t in EX01.tasks}
    submit(root, "solution", answers=True, files=solutions)
    submit(root, "stub", answers=False, files={})
    submit(root, "wrong", answers=True, files={**solutions, "vector_add.cu": WRONG_VECTOR_ADD})
    graded = run_ok(cli + ["autograde", str(root), ASSIGNMENT, "--derivations-only"], root, env, timeout=600)
    run_ok([sys.executable, "-m", "nbgrader", "generate_feedback", ASSIGNMENT], root, env)
    # The capstone, handed in after exercise 01: its kernels are those of the exercise folders beside it.
    submit(root, "solution", answers=True, files={}, assignment=CAPSTONE.slug)
    submit(root, "stub", answers=False, files={}, assignment=CAPSTONE.slug)
    capstone = run_ok(cli + ["autograde", str(root), CAPSTONE.slug, "--derivations-only"], root, env, timeout=600)
    return Course(root, cache, graded.stdout + capstone.stdout)


# ================================================================== what the build writes

def _config(root: Path):
    from traitlets.config import Config
    c = Config()
    saved = os.environ.copy()
    try:
        exec(compile((root / "nbgrader_config.py").read_text(), "nbgrader_config.py", "exec"),
             {"get_config": lambda: c, "__file__": str(root / "nbgrader_config.py")})
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return c


def test_config_keeps_every_students_cu_and_gives_gpu_grading_time(built):
    c = _config(built.root)
    expected = {ex.folder.name: [t.source for t in ex.tasks] for ex in spec.units()}
    assert c.Autograde.exclude_overwriting == expected
    assert c.ClearSolutions.code_stub == {"python": ""}
    assert c.Execute.timeout >= 1800 and c.ExecutePreprocessor.timeout >= 1800
    for clutter in (".ipynb_checkpoints", "__pycache__", "*.so", "*.o"):
        assert clutter in c.CourseDirectory.ignore


@pytest.mark.parametrize("exercise", spec.discover(), ids=lambda e: e.folder.name)
def test_every_exercise_is_an_assignment_with_its_grading_cells(built, exercise):
    folder = built.root / "source" / exercise.folder.name
    nb = nbformat.read(folder / (exercise.notebook or f"{exercise.folder.name}.ipynb"), as_version=4)
    cells = {grade_id(c): c for c in nb.cells}
    grading = cells["grade_kernels"]
    assert grading.metadata.nbgrader["locked"] and not grading.metadata.nbgrader["grade"]
    assert f'grade("{exercise.id}", submission=".", profile=False)' in grading.source
    order = [grade_id(c) for c in nb.cells]
    for task in exercise.tasks:
        for kind, points in (("correct", task.points.correct), ("speed", task.points.speed)):
            cell = cells[f"kernel_{task.name}_{kind}"]
            assert cell.metadata.nbgrader["points"] == points
            assert cell.metadata.nbgrader["locked"]
            assert f'(result, "{task.name}")' in cell.source
            assert order.index(cell_id := f"kernel_{task.name}_{kind}") > order.index("grade_kernels"), cell_id
        assert (folder / task.source).read_bytes() == (exercise.folder / task.source).read_bytes()


def test_the_capstone_is_an_assignment_with_a_cell_per_bar_and_its_prompts(built):
    from grader.capstone import bar_points, load_capstone
    from grader.derivations import prompts

    folder = built.root / "source" / CAPSTONE.slug
    nb = nbformat.read(folder / CAPSTONE.notebook, as_version=4)
    cells = {grade_id(c): c for c in nb.cells}
    order = [grade_id(c) for c in nb.cells]
    assert sorted(p.name for p in folder.iterdir()) == [CAPSTONE.notebook], "no stub, no script: only the notebook"
    for model in CAPSTONE.models:
        trains = cells[f"grade_model_{model}"]
        assert trains.metadata.nbgrader["locked"] and not trains.metadata.nbgrader["grade"]
        assert f'grade_model("{model}", submission="..")' in trains.source
        points = bar_points(load_capstone(model))
        assert points and all(v > 0 for v in points.values())
        for bar, value in points.items():
            cell = cells[f"model_{model}_{bar}"]
            assert cell.metadata.nbgrader["points"] == value and cell.metadata.nbgrader["locked"]
            assert f'bar_problem(result_{model}, "{bar}")' in cell.source
            assert order.index(f"model_{model}_{bar}") > order.index(f"grade_model_{model}")
    for p in prompts(CAPSTONE.id):
        assert cells[f"check_{p.id}"].metadata.nbgrader["points"] == p.max_points
        assert cells[f"answer_{p.id}"].metadata.nbgrader["solution"]
    assert not any(i.startswith("kernel_") for i in order)


def test_the_capstone_grades_its_prompts_and_its_bars_fail_cleanly_without_kernels(built):
    from grader.capstone import bar_points, load_capstone
    from grader.derivations import prompts

    prompt_points = sum(p.max_points for p in prompts(CAPSTONE.id))
    bar_total = sum(sum(bar_points(load_capstone(m)).values()) for m in CAPSTONE.models)
    by_student = {s.student: s for s in course.scores(built.root, CAPSTONE.slug)}
    assert sorted(by_student) == ["solution", "stub"]
    assert by_student["solution"].group("check_") == (prompt_points, prompt_points)
    assert by_student["stub"].group("check_") == (0.0, prompt_points)
    for student, s in by_student.items():
        assert s.group("model_") == (0.0, bar_total), student
        nb = nbformat.read(built.root / "autograded" / student / CAPSTONE.slug / CAPSTONE.notebook, as_version=4).cells
        bar_cells = [c for c in nb if grade_id(c).startswith("model_")]
        assert len(bar_cells) == sum(len(bar_points(load_capstone(m))) for m in CAPSTONE.models)
        for cell in bar_cells:
            errors = [o for o in cell.outputs if o.output_type == "error"]
            assert len(errors) == 1 and errors[0].ename == "AssertionError", (student, cell.outputs)
            # Exercise 02's folder was never handed in: the sentence names the kernels it lacks.
            assert "Nothing was trained" in errors[0].evalue and "linear_forward (exercise 02)" in errors[0].evalue, \
                errors[0].evalue
        trained = [c for c in nb if grade_id(c).startswith("grade_model_") and c.cell_type == "code"]
        assert trained and not any(o.output_type == "error" for c in trained for o in c.outputs)
    assert re.search(r"solution\s*│\s*5/5\s*│\s*0/\d+\s*│\s*5/\d+", built.autograde_output), built.autograde_output


def test_an_exercise_without_notebook_gets_a_minimal_one(tmp_path, monkeypatch):
    """An exercise folder with kernels but no notebook yet still becomes a gradable assignment."""
    root = tmp_path / "repo"
    shutil.copytree(EX01.folder, root / "exercises" / EX01.folder.name, ignore=shutil.ignore_patterns("*.ipynb"))
    (root / "solutions" / EX01.folder.name).mkdir(parents=True)
    monkeypatch.setenv("S2S_ROOT", str(root))
    course.build_course(tmp_path / "course")
    nb = nbformat.read(tmp_path / "course" / "source" / EX01.folder.name / EX01.notebook, as_version=4)
    assert nb.cells[0].cell_type == "markdown" and EX01.title in nb.cells[0].source
    graded = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"].get("points")
              for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    for task in EX01.tasks:
        assert f"[{task.source}]({task.source})" in nb.cells[0].source
        assert graded[f"kernel_{task.name}_correct"] == task.points.correct
        assert graded[f"kernel_{task.name}_speed"] == task.points.speed
    assert not any(k.startswith("check_") for k in graded), "no notebook, no derivation prompts"


def test_release_answer_cells_show_exactly_the_learners_stub(built):
    original = {c.metadata["tags"][0]: c.source
                for c in nbformat.read(EX01.folder / EX01.notebook, as_version=4).cells
                if any(t.startswith("answer:") for t in c.metadata.get("tags", []))}
    released = {c.metadata["tags"][0]: c.source for c in built.notebook("release").cells
                if c.metadata.get("nbgrader", {}).get("solution")}
    assert released.keys() == original.keys() and released
    for tag, stub in original.items():
        # nbgrader replaces the hidden region by the empty stub line: only a final newline is added.
        assert released[tag].rstrip("\n") == stub.rstrip("\n"), tag


# ================================================================== trap 1: no solution in the release

def _texts(folder: Path) -> dict[Path, str]:
    return {p: p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file()}


def _secret_lines(solution: Path, public: list[Path]) -> list[str]:
    """Lines of a reference solution that no public file holds, even as part of a line: what would
    give it away. An #include names a header every CUDA file may use, and gives nothing away."""
    known = "\n".join(p.read_text(errors="replace") for p in public if p.is_file())
    return [line.strip() for line in solution.read_text().splitlines()
            if len(line.strip()) >= 20 and line.strip() not in known and not line.strip().startswith("#include")]


def test_release_holds_no_solution_code(built):
    released = _texts(built.root / "release")
    assert released, "nothing was released"
    blob = "\n".join(released.values())
    checked_any = False
    # A line that some public file of the course holds too (a stub, any exercise's baseline, a
    # notebook, a reference) gives nothing away.
    public = sorted(p for p in (ROOT / "exercises").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for solution in sorted(p for p in (ROOT / "solutions").rglob("*") if p.is_file() and p.suffix != ".py"):
        for line in _secret_lines(solution, public):
            checked_any = True
            assert line not in blob, f"{solution.relative_to(ROOT)} leaked into the release: {line!r}"
    for answers in (ROOT / "solutions").rglob("answers.py"):
        for body in function_bodies(answers.read_text()):
            checked_any = True
            flat = " ".join(body.split())
            assert flat not in " ".join(blob.split()), f"a function body of {answers} leaked: {body[:80]!r}"
    assert checked_any


# ================================================================== trap 2: the student's .cu is graded

def _report_text(nb) -> str:
    cell = next(c for c in nb.cells if grade_id(c) == "grade_kernels")
    shown = [o.data["text/html"] for o in cell.outputs if o.get("data", {}).get("text/html")]
    assert shown, f"the grading cell shows no report: {cell.outputs}"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", shown[-1])).split())


@needs_nvcc
def test_autograde_grades_the_students_own_cu(built):
    graded = built.root / "autograded" / "wrong" / ASSIGNMENT / "vector_add.cu"
    assert graded.read_bytes() == WRONG_VECTOR_ADD.read_bytes()
    stub = _report_text(built.notebook("autograded", "stub"))
    wrong = _report_text(built.notebook("autograded", "wrong"))
    # The stub launches no kernel; the wrong submission's kernel shows in the ptxas report.
    assert re.search(r"vector_add no kernel yet", stub), stub
    assert re.search(r"vector_add \d+ regs", wrong), wrong


# ================================================================== the scores, and why

def test_scores_on_a_machine_without_gpu(built):
    by_student = {s.student: s for s in course.scores(built.root, ASSIGNMENT)}
    assert sorted(by_student) == sorted(STUDENTS)
    for student, derivations in (("solution", DERIVATION_POINTS), ("stub", 0.0), ("wrong", DERIVATION_POINTS)):
        s = by_student[student]
        assert s.group("check_") == (derivations, DERIVATION_POINTS), student
        assert s.group("kernel_") == (0.0, KERNEL_POINTS), student
        assert s.max_score == DERIVATION_POINTS + KERNEL_POINTS


def test_kernel_cells_fail_for_the_no_gpu_reason_and_nothing_else(built):
    for student in STUDENTS:
        nb = built.notebook("autograded", student)
        kernel_cells = [c for c in nb.cells if grade_id(c).startswith("kernel_")]
        assert len(kernel_cells) == 2 * len(EX01.tasks)
        for cell in kernel_cells:
            errors = [o for o in cell.outputs if o.output_type == "error"]
            assert len(errors) == 1 and errors[0].ename == "AssertionError", (student, cell.outputs)
            assert NO_GPU in errors[0].evalue, errors[0].evalue
        assert NO_GPU in _report_text(nb)


def test_summary_and_export(built):
    table = built.autograde_output
    assert re.search(r"solution\s*│\s*10/10\s*│\s*0/6\s*│\s*0/3\s*│\s*10/19", table), table
    assert re.search(r"stub\s*│\s*0/10\s*│\s*0/6\s*│\s*0/3\s*│\s*0/19", table), table
    rows = list(csv.DictReader(io.StringIO((built.root / "grades.csv").read_text())))
    scores = {r["student_id"]: float(r["score"]) for r in rows if r["assignment"] == ASSIGNMENT}
    assert scores == {"solution": DERIVATION_POINTS, "stub": 0.0, "wrong": DERIVATION_POINTS}


# ================================================================== trap 3: points from objects, no stderr

def test_no_graded_cell_writes_to_stderr(built):
    for student in STUDENTS:
        for cell in built.notebook("autograded", student).cells:
            if cell.cell_type == "code":
                stderr = [o for o in cell.outputs if o.output_type == "stream" and o.name == "stderr"]
                assert not stderr, (student, grade_id(cell), stderr)


def test_graded_cells_assert_on_result_objects(built):
    for cell in built.notebook("release").cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            assert re.search(r"\b(assert|require_correct|require_speed)\b", cell.source), cell.source
            assert "print(" not in cell.source


def _answer(fn):
    """A correct answer that also warns and writes to stderr, as numpy or a stray print would."""
    def noisy(*args):
        warnings.warn("overflow encountered in exp", RuntimeWarning)
        print("debug output", file=sys.stderr)
        os.write(2, b"written by C code to fd 2\n")
        return fn(*args)
    return noisy


def test_a_correct_answer_that_warns_still_passes_without_stderr(capfd):
    ns: dict = {}
    exec(hidden_answers((SOLUTIONS / "answers.py").read_text(), ["jacobian_y_wrt_x", "jacobian_y_wrt_b"]), ns)
    verdict = checked("01", "relu_jacobians", {name: _answer(ns[name])
                                                for name in ("jacobian_y_wrt_x", "jacobian_y_wrt_b")})
    out, err = capfd.readouterr()
    assert verdict.passed
    assert err == ""
    assert "note: RuntimeWarning: overflow encountered in exp" in out
    assert "note: written by C code to fd 2" in out


def test_quiet_restores_stderr(capfd):
    with quiet() as captured:
        print("hidden", file=sys.stderr)
    print("visible", file=sys.stderr)
    assert "hidden" in captured.stderr
    assert capfd.readouterr().err == "visible\n"


def _result(task: TaskResult, notice: str = "") -> GradeResult:
    return GradeResult("01", "t", ".", [task], None, notice=notice)


def test_requirements_pass_and_fail_on_points_not_text():
    good = TaskResult("vector_add", "vector_add.cu", "passed", "prints: error", correct=True,
                      points=Points(2, 1, 2, 1))
    assert require_correct(_result(good), "vector_add") is None
    assert require_speed(_result(good), "vector_add") is None
    slow = TaskResult("vector_add", "vector_add.cu", "failed", "all fine", correct=True, points=Points(2, 0, 2, 1))
    with pytest.raises(AssertionError, match="speed|timed"):
        require_speed(_result(slow), "vector_add")
    not_run = TaskResult("vector_add", "vector_add.cu", "not run", "compiled", points=Points(0, 0, 2, 1))
    with pytest.raises(AssertionError, match="vector_add was not run. Correctness.* need an NVIDIA GPU"):
        require_correct(_result(not_run, notice="Correctness, timing and hardware counters need an NVIDIA GPU"),
                        "vector_add")
    with pytest.raises(AssertionError, match="run the grading cell above first"):
        require_correct(None, "vector_add")


def test_the_graded_cells_assert_on_the_sentence_themselves():
    """The sentence a failing kernel cell shows comes from correctness_problem / speed_problem."""
    not_run = TaskResult("vector_add", "vector_add.cu", "not run", "compiled", points=Points(0, 0, 2, 1))
    result = _result(not_run, notice="Correctness needs an NVIDIA GPU.")
    assert correctness_problem(result, "vector_add") == "vector_add was not run. Correctness needs an NVIDIA GPU."
    assert speed_problem(result, "vector_add").startswith("Speed points need a correct kernel first.")
    assert correctness_problem(result, "transpose").startswith("The grading result has no task 'transpose'")
    cells = [c.source for c in course.grading_cells(spec.find("01")) if c.cell_type == "code"][1:]
    assert cells and all(c.endswith("assert problem is None, problem") for c in cells), cells


# ================================================================== trap 4: nothing hidden reaches feedback

HIDDEN = re.compile(re.escape(course.BEGIN_HIDDEN) + r"\n(.*?)\n" + re.escape(course.END_HIDDEN) + r"\n?", re.S)


def test_feedback_reveals_nothing_the_release_did_not_show(built):
    """Locked cells are graded as the release shows them; what the release hides of a check cell is
    the assertion that its verdict came from the instructor's checkers, nothing else."""
    released = {grade_id(c): c.source for c in built.notebook("release").cells}
    for student in STUDENTS:
        for cell in built.notebook("autograded", student).cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("locked"):
                hidden = HIDDEN.findall(cell.source)
                assert hidden == ([course.FROM_THE_INSTRUCTOR] if grade_id(cell).startswith("check_") else [])
                assert HIDDEN.sub("", cell.source).rstrip() == released[grade_id(cell)].rstrip(), \
                    (student, grade_id(cell))
    # The cases, tolerances and references stay with the grader, not in the students' folders.
    assert not [p for p in (built.root / "release").rglob("*") if p.name in ("exercise.toml", "reference.py")]
    sources = [c.source for c in built.notebook("release").cells if c.cell_type == "code"]
    for source in sources:
        assert "HIDDEN" not in source and "seed" not in source.lower() and "solutions" not in source
    answers = function_bodies((SOLUTIONS / "answers.py").read_text())
    for student in ("stub", "wrong"):
        page = (built.root / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
        text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())
        assert "seed" not in text.lower()
        if student == "stub":
            for body in answers:
                assert " ".join(body.split()) not in text


def test_feedback_explains_without_a_traceback_into_the_grader(built):
    """A kernel cell that fails shows the learner the grader's sentence, not frames of our code."""
    page = (built.root / "feedback" / "stub" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())
    assert "AssertionError" in text and "vector_add was not run" in text
    assert "notebook.py" not in text and str(ROOT) not in text


# ================================================================== trap 6: graded by the instructor's checkers

def test_check_cells_pass_only_with_the_instructors_checkers(built):
    """The hidden test ran at autograde: a solution's check cells show no error, and no verdict of
    theirs came from a learner's copy of the course."""
    for cell in built.notebook("autograded", "solution").cells:
        if grade_id(cell).startswith("check_"):
            assert not [o for o in cell.outputs if o.output_type == "error"], cell.outputs
            assert course.FROM_THE_INSTRUCTOR in cell.source


def _autograde(built: Course, *args: str, **env: str) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-m", "grader.course_cli", "autograde", str(built.root), ASSIGNMENT, *args],
                          cwd=built.root, env={**course_env(built.cache), **env}, capture_output=True, text=True,
                          timeout=300, check=False)
    return done.returncode, done.stdout, done.stderr


def test_autograde_refuses_to_grade_kernels_without_a_gpu(built):
    status, out, err = _autograde(built, "--force")
    assert status == ExitCode.NOT_GRADED, out + err
    assert " ".join(err.split()) == class_grading.NO_GPU and not out
    assert "--derivations-only" in class_grading.NO_GPU


def test_derivations_only_leaves_the_kernels_to_the_next_run_on_a_gpu(built):
    """The class was graded for its derivations only: a run that grades kernels grades every student
    again; another run for the derivations only keeps them."""
    pending = built.root / ".autograde" / ASSIGNMENT / "kernels-pending"
    assert sorted(p.name for p in pending.iterdir()) == sorted(STUDENTS)
    assert "Kernels not graded: 3 submissions were graded for the derivations only" in " ".join(
        built.autograde_output.split())
    assert class_grading.plan(built.root, ASSIGNMENT).to_grade == tuple(sorted(STUDENTS))
    again = class_grading.plan(built.root, ASSIGNMENT, derivations_only=True)
    assert again.to_grade == () and again.skipped == tuple(sorted(STUDENTS))


def test_autograde_refuses_to_grade_with_a_learners_copy(built, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "learner-copy.toml").write_text('gpu = "h100-sxm"\n')
    status, out, err = _autograde(built, "--derivations-only", "--force", S2S_ROOT=str(copy))
    said = " ".join((out + err).split())
    assert status == ExitCode.USAGE, said
    assert f"the course grades with {copy}, a learner's copy of the course" in said
    assert "Autograde with the instructor's repository" in said


# ================================================================== trap 5: no build products

def test_no_build_products_in_autograded_or_feedback(built):
    for where in ("autograded", "feedback"):
        for path in (built.root / where).rglob("*"):
            assert path.suffix not in (".so", ".o", ".pyc"), path
            assert path.name not in ("__pycache__", ".ipynb_checkpoints"), path
    assert any(built.cache.rglob("*.so")), "the grader should have compiled into its own cache"


# ================================================================== the builder's pieces

def test_hidden_answers_bring_their_helpers_and_imports():
    code = hidden_answers((SOLUTIONS / "answers.py").read_text(), ["grad_W"])
    assert code.startswith("import numpy as np\n")
    assert "def _active(" in code and "def grad_W(" in code and "def grad_b(" not in code
    assert "__future__" not in code and "hardware" not in code
    ns: dict = {}
    exec(code, ns)
    assert callable(ns["grad_W"])


def test_hidden_answers_name_what_is_missing():
    with pytest.raises(CourseError, match="does not define nope"):
        hidden_answers("x = 1\n", ["x", "nope"], "answers.py")


def test_defined_names_of_a_stub_cell():
    assert defined_names("import numpy as np\ndef f(x):\n    pass\ny = {1: 2}\n") == ["np", "f", "y"]


def test_build_refuses_a_foreign_config(tmp_path):
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\n")
    with pytest.raises(CourseError, match="was not written by"):
        course.build_course(tmp_path)


# ================================================================== the formgrader reads the same course

def test_formgrader_in_jupyterlab_sees_the_autograded_class(built, tmp_path):
    pytest.importorskip("jupyterlab", reason="needs JupyterLab: pip install -e '.[course]'")
    import json
    import urllib.request

    env = course_env(built.cache)
    env.update(JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_DATA_DIR=str(tmp_path / "data"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    with jupyter_lab(built.root, env, tmp_path / "lab.log") as lab:
        with urllib.request.urlopen(f"{lab.base}/formgrader/api/assignments?token={lab.token}", timeout=30) as reply:
            assignments = json.load(reply)
    by_name = {a["name"]: a for a in assignments}
    assert by_name[ASSIGNMENT]["num_submissions"] == len(STUDENTS)
    assert by_name[ASSIGNMENT]["max_score"] == DERIVATION_POINTS + KERNEL_POINTS
