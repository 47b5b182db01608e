"""Float64 references for exercise 01, written in PyTorch.

The grader calls each function with the task's inputs as float64 tensors (on the
GPU when there is one) followed by the scalar arguments, in the order of the C
signature with the output pointers left out, and compares the learner's output
with what it returns. A parameter named like a Python keyword gets a trailing
underscore (``in`` -> ``in_``).
"""
import torch


def vector_add(a: torch.Tensor, b: torch.Tensor, n: int) -> torch.Tensor:
    return a + b


def reduce_sum(x: torch.Tensor, n: int) -> torch.Tensor:
    return x.sum().reshape(1)


def transpose(in_: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    return in_.t().contiguous()
