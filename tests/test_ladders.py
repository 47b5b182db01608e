"""The optimisation ladders of the notebooks: each step a folder holding one task's file, graded
alone as `grade exercise NN --task T --submission FOLDER` does.

Without a GPU: every step file (given, or the learner's starting point) and every hidden step
solution compiles for the target the grader builds its task for, the notebook cells name folders
that exist, and the ladder's table shows no number that was not measured. On a GPU (marked gpu):
every step the learner is given and every hidden step solution is correct, and each step's time
and speedup are printed, with the lines that record them in the exercise's recorded.json.
"""
from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest
from derivation_helpers import no_gpu, read_notebook, source  # noqa: F401 (autouse: no GPU for notebooks)

from grader import ladder as ladder_module
from grader import spec
from grader.build import Toolchain, compile_cuda

ROOT = Path(__file__).resolve().parents[1]
ARCH = "sm_90"


def _ladder_cells() -> list[tuple[spec.Exercise, str, list[tuple[str, str]]]]:
    """(exercise, task, steps) of every call ladder("NN", "task", [(folder, idea), ...]) in a notebook."""
    found = []
    for ex in spec.discover():
        for cell in read_notebook(ex.folder / ex.notebook)["cells"]:
            if "ladder" not in cell["metadata"].get("tags", []):
                continue
            for node in ast.walk(ast.parse(source(cell))):
                if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "ladder":
                    exercise_id, task, steps = (ast.literal_eval(a) for a in node.args[:3])
                    assert exercise_id == ex.id
                    found.append((ex, task, steps))
    return found


LADDERS = _ladder_cells()
STEP_FILES = sorted((ROOT / "exercises").glob("*/steps/*/*.cu")) + sorted((ROOT / "solutions").glob("*/steps/*/*.cu"))


def _task_of(path: Path) -> tuple[spec.Exercise, spec.Task]:
    slug = path.relative_to(ROOT).parts[1]
    ex = next(e for e in spec.discover() if e.slug == slug)
    return ex, next(t for t in ex.tasks if t.source == path.name)


def _hidden(ex: spec.Exercise, folder: str) -> Path:
    return spec.solutions_dir() / ex.slug / folder


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None,
                                reason="nvcc (the CUDA toolkit) is not on PATH, so nothing can be compiled here")


def test_the_four_exercises_without_one_have_a_ladder_now():
    assert {ex.id for ex, _, _ in LADDERS} >= {"01", "03", "04", "05"}


def test_every_step_folder_holds_one_task_file():
    folders = {p.parent for p in STEP_FILES}
    assert folders, "no ladder steps found"
    for folder in folders:
        files = sorted(p.name for p in folder.iterdir())
        assert len(files) == 1, f"{folder.relative_to(ROOT)} holds {files}: one task's file per step"
        ex, task = _task_of(folder / files[0])
        assert task.source == files[0]


def test_every_hidden_step_solves_a_step_the_learner_is_given():
    hidden = [p for p in STEP_FILES if p.relative_to(ROOT).parts[0] == "solutions"]
    assert hidden
    for path in hidden:
        public = ROOT / "exercises" / path.relative_to(ROOT / "solutions")
        assert public.is_file(), f"{path.relative_to(ROOT)} has no step {public.relative_to(ROOT)} to start from"
        assert public.read_text() != path.read_text()


@pytest.mark.parametrize("ex,task,steps", LADDERS, ids=[f"{ex.id}-{task}" for ex, task, _ in LADDERS])
def test_every_ladder_step_exists_and_the_notebook_links_it(ex, task, steps):
    source_name = ex.task(task).source
    markdown = "\n".join(source(c) for c in read_notebook(ex.folder / ex.notebook)["cells"]
                         if c["cell_type"] == "markdown")
    for folder, idea in steps:
        assert idea.strip(), folder
        assert (ex.folder / folder / source_name).is_file(), f"{folder}/{source_name}"
        if folder.startswith("steps/"):
            assert f"({folder}/{source_name})" in markdown, f"the notebook does not link {folder}/{source_name}"
    assert len({f for f, _ in steps}) == len(steps)


@needs_nvcc
@pytest.mark.parametrize("path", STEP_FILES, ids=[str(p.relative_to(ROOT)) for p in STEP_FILES])
def test_every_step_compiles_for_its_tasks_target(path, tmp_path):
    _, task = _task_of(path)
    result = compile_cuda(path, task.build.target(ARCH), Toolchain.find(), display_root=ROOT)
    assert result.ok, f"{result.source}: {result.error}\n{result.log}"
    assert "warning" not in result.log.lower(), result.log
    assert result.kernels, "a step defines at least one kernel"
    spilled = {k.name: k.spills for k in result.kernels if k.spills}
    assert not spilled, f"register spills: {spilled}"


def test_without_a_gpu_the_ladder_says_what_it_would_run_and_shows_no_number(capsys):
    ex, task, steps = next(item for item in LADDERS if item[0].id == "03")
    result = ladder_module.ladder(ex.id, task, steps, gpu=False)
    out = capsys.readouterr().out
    for folder, _ in steps:
        assert f"grade exercise {ex.id} --task {task} --submission {folder}" in out
    assert "No step of this ladder has been recorded on a GPU yet" in out
    assert all(not any(cell for cell in row[2:]) for row in result.rows()[1:])
    assert result.figure() is None


def test_recorded_step_times_fill_the_table_and_the_roofline(monkeypatch, capsys):
    """A time recorded for a step shows as that time and the bandwidth it gives; the others stay empty."""
    ex, task, steps = next(item for item in LADDERS if item[0].id == "03")
    folder = steps[1][0]
    n = len(ex.task(task).benchmarks)
    monkeypatch.setattr(ladder_module, "recorded_rungs",
                        lambda exercise, name: ({folder: [1e-3] + [None] * (n - 1)}, "NVIDIA H200"))
    shown = []
    monkeypatch.setattr("grader.figures._display", lambda fig: shown.append(fig.get_label()))
    result = ladder_module.ladder(ex.id, task, steps, gpu=False)
    _, nbytes = ex.task(task).work(ex.task(task).benchmarks[0])
    rows = result.rows()
    assert rows[2][2] == f"1,000.0 µs, {nbytes / 1e-3 / 1e9:,.0f} GB/s"
    assert not rows[1][2] and not rows[3][2]
    assert "recorded on an NVIDIA H200" in capsys.readouterr().out
    pytest.importorskip("matplotlib")
    assert shown == ["ladder"]


def test_autograde_does_not_time_the_ladder(monkeypatch, capsys):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.setattr(ladder_module, "_grade_rung", lambda *a: pytest.fail("a step was graded"))
    ex, task, steps = LADDERS[0]
    ladder_module.ladder(ex.id, task, steps, gpu=True)
    assert "grading the notebook skips it" in capsys.readouterr().out


# ------------------------------------------------------------------ on the GPU

@pytest.mark.gpu
@pytest.mark.parametrize("who", ["given", "hidden"])
@pytest.mark.parametrize("ex,task,steps", LADDERS, ids=[f"{ex.id}-{task}" for ex, task, _ in LADDERS])
def test_every_step_is_correct_on_the_gpu(ex, task, steps, who, capsys):
    """given: the folders as the learner gets them (each step starts correct; the learner's own
    file, ".", is the stub); hidden: each step the learner writes, and ".", replaced by its hidden
    solution. Prints the table and, for hidden, the lines
    of recorded.json that record it."""
    if who == "hidden":
        steps = [(str(_hidden(ex, f)) if _hidden(ex, f).is_dir() else f, idea) for f, idea in steps]
        if all(not Path(f).is_absolute() for f, _ in steps):
            pytest.skip(f"no step of the ladder of {task} has a hidden solution: every step is given")
    result = ladder_module.ladder(ex.id, task, steps, gpu=True)
    with capsys.disabled():
        print(f"\n{result}")
        if who == "hidden":
            record = {Path(r.folder).relative_to(_hidden(ex, "")).as_posix() if Path(r.folder).is_absolute()
                      else r.folder: [{"benchmark": i, "us": round(s * 1e6, 1)} for i, s in enumerate(r.seconds) if s]
                      for r in result.rungs}
            print(f'recorded.json, "ladders": {json.dumps({task: record})}')
    for rung in result.rungs:
        if rung.folder == ".":          # the learner's own file: the untouched stub is not correct
            continue
        assert rung.status == "correct", f"{rung.folder}: {rung.status}"
        assert all(rung.seconds) and rung.speedup
