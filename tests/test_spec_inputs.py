"""Inputs that are not plain random numbers: integers in a range that follows the sizes (class
labels in [0, cols)), with the range's ends as a fill, and inputs derived from the others by a
function of the reference module (a forward pass's saved output, given to a backward pass)."""
from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from grader import spec
from grader.spec import SpecError
from grader.worker.memory import ArgMemory, CaseMemory, _draw

TOML = """
id = "97"
title = "Inputs"
reference = "reference.py"

[[tasks]]
name = "pick"
source = "pick.cu"
baseline = "baselines/pick.cu"
flops = "rows"
bytes = "4 * rows * cols + 12 * rows"
min_speedup = 1.5
points = { correct = 1, speed = 1 }
args = [
  { name = "x", role = "in", dtype = "float32", shape = ["rows", "cols"] },
  { name = "label", role = "in", dtype = "int32", shape = ["rows"], range = [0, "cols"] },
  { name = "top", role = "in", dtype = "float32", shape = ["rows"], derive = "row_max" },
  { name = "y", role = "out", dtype = "float32", shape = ["rows"] },
  { name = "rows", role = "scalar", dtype = "int32" },
  { name = "cols", role = "scalar", dtype = "int32" },
]
cases = [{ rows = 5, cols = 3 }, { rows = 64, cols = 1000, fill = { label = "ends" } }]
benchmark = { rows = 64, cols = 1000 }
"""

REFERENCE = '''
def row_max(x, rows):
    return x.reshape(rows, -1).max(dim=1).values


def pick(x, label, top, rows, cols):
    return x.reshape(rows, cols).gather(1, label.long().reshape(rows, 1)).reshape(rows) - top
'''


def write(tmp_path: Path, toml: str = TOML) -> Path:
    folder = tmp_path / "97_inputs"
    folder.mkdir()
    (folder / "exercise.toml").write_text(toml)
    (folder / "reference.py").write_text(textwrap.dedent(REFERENCE))
    return folder


def test_a_range_and_a_derivation_load(tmp_path):
    task = spec.load(write(tmp_path)).task("pick")
    label, top = task.args[1], task.args[2]
    assert label.bounds({"rows": 5, "cols": 3}) == (0, 3)
    assert label.fill == "normal" and label.derive is None
    assert top.derive == "row_max" and top.range is None and top.bounds({"cols": 3}) is None
    assert task.cases[1].fills == {"label": "ends"}
    # A derived input is still a read-only pointer of the C signature.
    assert task.prototype() == ('extern "C" void pick(const float* x, const int* label, const float* top, '
                                'float* y, int rows, int cols);')


@pytest.mark.parametrize("old, new, fragment", [
    ('range = [0, "cols"]', 'range = [0, "width"]', "range of 'label' uses ['width']"),
    ('range = [0, "cols"]', 'range = [0]', "range must be [low, high]"),
    ('dtype = "int32", shape = ["rows"], range', 'dtype = "float32", shape = ["rows"], range',
     "range is for integer inputs"),
    ('range = [0, "cols"]', 'range = [0, "cols - 3"]', "empty range [0, 0)"),
    ('range = [0, "cols"] }', 'fill = "ends" }', "fill 'ends', which needs a range"),
    ('{ rows = 5, cols = 3 }', '{ rows = 5, cols = 3, fill = { x = "ends" } }', "fill 'ends' for 'x' needs a range"),
    ('{ rows = 5, cols = 3 }', '{ rows = 5, cols = 3, fill = { top = "zeros" } }',
     "fill must map input or inout arguments (['label', 'x'])"),
    ('derive = "row_max" }', 'derive = "row_max", fill = "zeros" }', "derive names the function"),
    ('{ name = "y", role = "out", dtype = "float32", shape = ["rows"] }',
     '{ name = "y", role = "out", dtype = "float32", shape = ["rows"], derive = "row_max" }', "derive names the function"),
])
def test_a_wrong_range_or_derivation_is_named(tmp_path, old, new, fragment):
    assert old in TOML
    with pytest.raises(SpecError) as err:
        spec.load(write(tmp_path, TOML.replace(old, new)))
    assert fragment in str(err.value)


def test_integers_with_bounds_are_drawn_inside_them_and_ends_hit_both():
    gen = torch.Generator().manual_seed(3)
    drawn = _draw("normal", (10_000,), torch.int32, 100.0, gen, (0, 7), device="cpu")
    assert drawn.min() == 0 and drawn.max() == 6          # input_scale is for floats only
    assert set(_draw("uniform", (1000,), torch.int32, 1.0, gen, (5, 9), device="cpu").tolist()) == {5, 6, 7, 8}
    ends = _draw("ends", (1000,), torch.int32, 1.0, gen, (0, 50_257), device="cpu")
    assert set(ends.tolist()) == {0, 50_256}
    one = _draw("ends", (10,), torch.int32, 1.0, gen, (0, 1), device="cpu")
    assert one.tolist() == [0] * 10
    assert _draw("zeros", (3,), torch.int32, 1.0, gen, (4, 9), device="cpu").tolist() == [0, 0, 0]
    # Without bounds, integers keep their default range.
    plain = _draw("normal", (10_000,), torch.int32, 1.0, gen, device="cpu")
    assert plain.min() == -128 and plain.max() == 127


@dataclass
class HostBuffer:
    data: torch.Tensor

    def tensor(self):
        return self.data


def test_a_derived_input_is_the_reference_modules_function_of_the_drawn_ones(tmp_path):
    exercise = spec.load(write(tmp_path))
    task = exercise.task("pick")
    case = task.cases[0]
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(1))
    memory = CaseMemory(task, case, {
        "x": ArgMemory(task.args[0], [HostBuffer(x)]),
        "label": ArgMemory(task.args[1], [HostBuffer(torch.zeros(5, dtype=torch.int32))]),
        "top": ArgMemory(task.args[2], [HostBuffer(torch.zeros(5))]),
    }, functions=exercise.load_reference())
    top = memory._derived(task.args[2], task.scalar_values(case))
    assert top.dtype == torch.float64 and torch.equal(top, x.to(torch.float64).max(dim=1).values)
    with pytest.raises(RuntimeError, match="row_max"):
        CaseMemory(task, case, memory.args)._derived(task.args[2], task.scalar_values(case))
