"""The exercises' float64 references as a backend of the capstone's operators (s2s_ops): called
with the arguments of each kernel's C function in their order, tensors where it takes pointers,
they write each output as the learner's kernel would. The operators' wiring (autograd, shapes,
the models built on them) is then checked on the CPU, without a GPU."""
from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
CAPSTONE = ROOT / "exercises" / "06_capstone"
if str(CAPSTONE) not in sys.path:
    sys.path.insert(0, str(CAPSTONE))

import s2s_ops  # noqa: E402

from grader import spec as specmod  # noqa: E402
from grader.tolerance import split  # noqa: E402

_POOL = ThreadPoolExecutor(1)


class References:
    """s2s_ops's backend made of the references; keeps the dtype of the outputs it is given."""

    def __init__(self) -> None:
        self.tasks = {}
        for name, (exercise_id, _source, _args) in s2s_ops.SIGNATURES.items():
            exercise = specmod.find(exercise_id)
            task = exercise.task(name)
            self.tasks[name] = (task, exercise.reference_function(task))

    def __call__(self, name, *values):
        task, fn = self.tasks[name]
        given = dict(zip((a.name for a in task.args), values))
        args = []
        for a in task.reference_args:
            v = given[a.name]
            if isinstance(v, s2s_ops.TensorList):
                args.append([t.double() for t in v.tensors])
            elif isinstance(v, torch.Tensor):
                args.append(v if (a.sizes_of or not v.is_floating_point()) else v.double())
            else:
                args.append(v)
        # Some references differentiate with autograd, which is switched off (thread-locally) while
        # an operator's implementation runs: they run on a thread of their own.
        got = _POOL.submit(fn, *args).result()
        for a, value in zip(task.results, got if isinstance(got, tuple) else (got,)):
            target = given[a.name]
            pairs = zip(target.tensors, value) if isinstance(target, s2s_ops.TensorList) else [(target, value)]
            for t, r in pairs:
                t.copy_(split(r)[0].reshape(t.shape).to(t.dtype))
