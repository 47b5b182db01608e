"""The README's "Adding an exercise", made true: its files, read from the README, form an exercise in a
temporary folder that loads, compiles, checks its derivation prompt and, on a GPU, grades.

The exercise uses what the spec offers beyond exercises 01 and 04: an inout list of tensors with
its element counts and length, a float32 scalar set per call, two consecutive calls on the same
state, a case that draws an input as zeros, and two benchmark sizes.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader import spec
from grader.build import Toolchain, ToolchainError, compile_cuda
from grader.derivations import check, prompts
from grader.inspect_source import check as inspect_source

README = Path(__file__).resolve().parents[1] / "README.md"
FILE_BLOCK = re.compile(r"<!-- file: (\S+) -->\n```\w*\n(.*?)\n```", re.S)


def readme_files() -> dict[str, str]:
    return {path: code + "\n" for path, code in FILE_BLOCK.findall(README.read_text(encoding="utf-8"))}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """A checkout holding only the walk-through's exercise and its hidden solution."""
    base = tmp_path_factory.mktemp("new_exercise")
    for path, code in readme_files().items():
        target = base / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(code)
    return base


@pytest.fixture(scope="module")
def folder(root) -> Path:
    return root / "exercises" / "99_scratch"


@pytest.fixture(scope="module")
def task(folder) -> spec.Task:
    return spec.load(folder).task("sgd_step")


def test_the_readme_shows_every_file_of_the_exercise():
    assert set(readme_files()) == {
        "exercises/99_scratch/exercise.toml", "exercises/99_scratch/reference.py",
        "exercises/99_scratch/sgd_step.cu", "exercises/99_scratch/baselines/sgd_step.cu",
        "exercises/99_scratch/derivations.py", "solutions/99_scratch/sgd_step.cu"}


def test_the_spec_loads_with_lists_inout_state_calls_and_two_sizes(task):
    assert task.prototype() == ('extern "C" void sgd_step(float* const* p, const float* const* g, '
                                'const int64_t* sizes, int count, float lr);')
    assert [a.role for a in task.args] == ["inout", "in", "in", "scalar", "scalar"]
    assert [c["lr"] for c in task.calls] == [0.5, spec.float32(0.001)]
    assert [len(b.lists["params"]) for b in task.benchmarks] == [8, 300]
    assert task.work(task.benchmarks[0]) == (2.0 * 8 * 4096 * 1024, 12.0 * 8 * 4096 * 1024)
    assert task.cases[3].fills == {"g": "zeros"}


def test_the_stub_declares_the_prototype(folder, task):
    stub = " ".join((folder / task.source).read_text().split())
    assert task.prototype().rstrip(";") + " {" in stub


def test_the_reference_returns_the_updated_list(folder, task):
    torch = pytest.importorskip("torch")
    fn = spec.load(folder).reference_function(task)
    p = [torch.ones(3, dtype=torch.float64), torch.full((2, 2), 2.0, dtype=torch.float64)]
    g = [torch.ones(3, dtype=torch.float64), torch.ones(2, 2, dtype=torch.float64)]
    out = fn(p, g, torch.tensor([3, 4]), 2, 0.5)
    assert [t.tolist() for t in out] == [[0.5] * 3, [[1.5, 1.5], [1.5, 1.5]]]


def test_stub_baseline_and_solution_pass_the_static_checks_and_compile(root, folder, task, tmp_path, monkeypatch):
    try:
        toolchain = Toolchain.find()
    except ToolchainError as exc:
        pytest.skip(f"needs nvcc: {exc}")
    monkeypatch.setenv("S2S_CACHE", str(tmp_path / "cache"))
    for source in (folder / task.source, folder / task.baseline, root / "solutions" / "99_scratch" / task.source):
        assert inspect_source(source, task) == [], source
        built = compile_cuda(source, task.build.target("sm_90"), toolchain)
        assert built.ok, built.log
    solution = compile_cuda(root / "solutions" / "99_scratch" / task.source, "sm_90", toolchain)
    assert [k.name for k in solution.kernels] == ["sgd_all"] and solution.kernels[0].spills == 0


def test_the_derivation_prompt_reads_its_size_from_the_spec(folder):
    assert [(p.id, p.max_points) for p in prompts(str(folder))] == [("traffic", 1.0)]
    right = check(str(folder), "traffic", {"bytes": 12 * 8 * 4096 * 1024})
    assert right.passed and right.points == 1.0
    wrong = check(str(folder), "traffic", {"bytes": 8 * 8 * 4096 * 1024})
    assert not wrong.passed and "p is read and written" in wrong.message
    assert "not answered yet" in check(str(folder), "traffic", {"bytes": None}).message


# --------------------------------------------------------------------------- on the GPU

def graded(folder: Path, submission: Path):
    from grader.pipeline import Options, grade
    return grade(str(folder), Options(submission=submission, profile=False)).task("sgd_step")


@pytest.mark.gpu
def test_the_solution_passes_at_both_sizes(root, folder):
    task = graded(folder, root / "solutions" / "99_scratch")
    assert task.status == "passed", task.summary
    assert task.cases_passed == task.cases_total == 4
    assert [m.label for m in task.timing.sizes] == ["lr=0.01, params: 8 tensors of 33,554,432 values",
                                                    "lr=0.01, params: 300 tensors of 300,000 values"]
    for m in task.timing.sizes:
        print(f"\n99 sgd_step at {m.label}: {m.learner_s * 1e6:.1f} µs, {m.speedup:.1f}x the baseline, "
              f"{m.roofline.percent:.0f}% of the roofline")
    print(f"geometric mean {task.timing.speedup:.1f}x (needs {task.timing.min_speedup:g}x)")
    assert task.points.total == task.points.max


@pytest.mark.gpu
def test_state_left_alone_is_reported_as_not_updated(root, folder):
    task = graded(folder, folder)
    assert task.status == "failed" and task.points.total == 0
    assert task.cases[-1].mismatch.reason == "not updated", task.summary
    assert "p[0][0] = " in task.summary and "the state was not updated" in task.summary


@pytest.mark.gpu
def test_a_write_past_one_tensor_of_the_list_is_caught(root, folder, tmp_path):
    solution = (root / "solutions" / "99_scratch" / "sgd_step.cu").read_text()
    (tmp_path / "sgd_step.cu").write_text(solution.replace("i < n;", "i <= n;"))
    task = graded(folder, tmp_path)
    assert task.status == "failed" and task.error.kind == "out of bounds", task.summary
    assert "memory just outside 'p' was overwritten" in task.summary
