"""A reference that allows a difference per element (grader.tolerance.Within): a quantizer's
output is exact except at rounding ties, where one step either way is right."""
from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from grader import spec
from grader.worker.checking import Checker
from grader.worker.memory import ArgMemory, CaseMemory

TOML = """
id = "98"
title = "Rounding"
reference = "reference.py"

[[tasks]]
name = "round_half"
source = "round_half.cu"
baseline = "baselines/round_half.cu"
flops = "n"
bytes = "5 * n"
min_speedup = 1.5
points = { correct = 1, speed = 1 }
args = [
  { name = "x", role = "in", dtype = "float32", shape = ["n"] },
  { name = "q", role = "out", dtype = "int8", shape = ["n"] },
  { name = "n", role = "scalar", dtype = "int32" },
]
cases = [{ n = 4 }]
benchmark = { n = 1024 }
"""

REFERENCE = '''
import torch
from grader.tolerance import Within


def round_half(x, n):
    """q = round-to-nearest-even(2 x); one step either way where 2 x lies within 1e-6 of a tie."""
    y = 2 * x
    tie = ((y - y.floor()) - 0.5).abs() <= 1e-6 * y.abs().clamp(min=1)
    return Within(torch.round(y), tie.to(torch.float64))
'''


@dataclass
class HostBuffer:
    """A buffer as the checker sees it, in host memory."""
    data: torch.Tensor

    def tensor(self):
        return self.data

    def unwritten(self):
        return torch.zeros_like(self.data, dtype=torch.bool)


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> tuple:
    folder = tmp_path_factory.mktemp("ex") / "98_rounding"
    folder.mkdir()
    (folder / "exercise.toml").write_text(TOML)
    (folder / "reference.py").write_text(textwrap.dedent(REFERENCE))
    (folder / "round_half.cu").write_text('extern "C" void round_half(const float* x, int8_t* q, int n) {}\n')
    (folder / "baselines").mkdir()
    (folder / "baselines" / "round_half.cu").write_text((folder / "round_half.cu").read_text())
    exercise = spec.load(folder)
    task = exercise.task("round_half")
    return task, exercise.reference_function(task)


def compare(task_and_reference, x: list[float], q: list[int]):
    task, reference = task_and_reference
    x_t = torch.tensor(x, dtype=torch.float32)
    memory = CaseMemory(task, task.cases[0], {
        "x": ArgMemory(task.args[0], [HostBuffer(x_t)]),
        "q": ArgMemory(task.args[1], [HostBuffer(torch.tensor(q, dtype=torch.int8))]),
    }, before={"x": [x_t.clone()]})
    return Checker(task, reference, memory, {"n": len(x)}).compare()


def test_exact_values_pass(task):
    assert compare(task, [0.1, -1.3, 3.0, 10.2], [0, -3, 6, 20]) is None


def test_at_a_tie_either_neighbour_passes(task):
    # 2 x = 2.5 and -0.5: ties; round-half-even gives 2 and -0, a float32 kernel may give 3 and -1.
    assert compare(task, [1.25, -0.25, 0.0, 0.0], [2, 0, 0, 0]) is None
    assert compare(task, [1.25, -0.25, 0.0, 0.0], [3, -1, 0, 0]) is None


def test_away_from_a_tie_one_step_is_wrong_and_the_message_names_the_element(task):
    miss = compare(task, [1.25, 1.3, 0.0, 0.0], [2, 3, 0, 0])      # 2.6 rounds to 3: right
    assert miss is None
    miss = compare(task, [1.25, 1.2, 0.0, 0.0], [2, 3, 0, 0])      # 2.4 rounds to 2: 3 is wrong
    assert miss is not None and miss.output == "q" and miss.index == [1]
    assert miss.expected == 2.0 and miss.got == 3.0 and miss.tolerance == 0.0 and miss.bad == 1


def test_two_steps_at_a_tie_are_wrong(task):
    miss = compare(task, [1.25, 0.0, 0.0, 0.0], [4, 0, 0, 0])
    assert miss is not None and miss.index == [0] and miss.tolerance == 1.0
