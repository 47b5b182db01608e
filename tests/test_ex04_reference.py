"""Exercise 04 (softmax, attention): the references, the spec and the CUDA sources agree.

Runs on a CPU. The float64 references are checked against PyTorch's own softmax and
scaled_dot_product_attention; the spec is checked against the `extern "C"` signature of every
stub, baseline and solution; every .cu file must compile for sm_90 when nvcc is present.
"""

from __future__ import annotations

import ast
import math
import importlib.util
import inspect
import re
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
EXERCISE = ROOT / "exercises" / "04_sequence_models"
SOLUTIONS = ROOT / "solutions" / "04_sequence_models"

C_TYPES = {"float32": "float", "bfloat16": "__nv_bfloat16", "int32": "int"}


@dataclass(frozen=True)
class CParam:
    const: bool
    ctype: str
    pointer: bool
    name: str


def load_spec() -> dict:
    with open(EXERCISE / "exercise.toml", "rb") as f:
        return tomllib.load(f)


def load_reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ex04_reference", EXERCISE / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def task_sources(task: dict) -> list[Path]:
    """The stub, the naive baseline and the hidden solution of one task."""
    return [EXERCISE / task["source"], EXERCISE / task["baseline"], SOLUTIONS / task["source"]]


def all_sources() -> list[Path]:
    return [path for task in load_spec()["tasks"] for path in task_sources(task)]


def parse_c_param(text: str) -> CParam:
    match = re.fullmatch(r"(const\s+)?(\w+)\s*(\*)?\s*(\w+)", " ".join(text.split()))
    assert match, f"cannot parse parameter {text!r}"
    const, ctype, star, name = match.groups()
    return CParam(const=const is not None, ctype=ctype, pointer=star is not None, name=name)


def extern_c_signature(source: Path, symbol: str) -> list[CParam]:
    text = source.read_text()
    match = re.search(rf'extern\s+"C"\s+void\s+{symbol}\s*\(([^)]*)\)', text)
    assert match, f'{source.relative_to(ROOT)} has no extern "C" void {symbol}(...)'
    return [parse_c_param(p) for p in match.group(1).split(",")]


def expected_c_param(arg: dict) -> CParam:
    role = arg["role"]
    return CParam(
        const=role == "in",
        ctype=C_TYPES[arg["dtype"]],
        pointer=role != "scalar",
        name=arg["name"],
    )


def expression_names(expr: str) -> set[str]:
    return {
        node.id for node in ast.walk(ast.parse(expr, mode="eval")) if isinstance(node, ast.Name)
    }


def evaluate(expr: str | int, scalars: dict[str, int]) -> int:
    if isinstance(expr, int):
        return expr
    return eval(
        compile(ast.parse(expr, mode="eval"), "<spec>", "eval"), {"__builtins__": {}}, scalars
    )


def task_ids(tasks: list[dict]) -> list[str]:
    return [t["name"] for t in tasks]


TASKS = load_spec()["tasks"]


# --- references ---------------------------------------------------------------------------


@pytest.mark.parametrize("rows, cols", [(1, 1), (5, 1), (1, 7), (3, 7), (17, 1000), (2, 4097)])
def test_softmax_reference_matches_torch(rows, cols):
    ref = load_reference()
    x = torch.randn(rows, cols, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(
        ref.softmax(x, rows, cols), torch.softmax(x, dim=1), rtol=1e-12, atol=1e-15
    )


def test_softmax_large_magnitude_case_overflows_a_naive_float32_exp():
    spec_case = next(
        c for t in TASKS if t["name"] == "softmax" for c in t["cases"] if "input_scale" in c
    )
    x = spec_case["input_scale"] * torch.randn(
        spec_case["rows"], spec_case["cols"], generator=torch.Generator().manual_seed(5)
    )
    assert torch.isinf(torch.exp(x)).any()


@pytest.mark.parametrize("scale", [100.0, 1000.0])
def test_softmax_reference_survives_large_logits(scale):
    ref = load_reference()
    rows, cols = 9, 32768
    x = scale * torch.randn(
        rows, cols, dtype=torch.float64, generator=torch.Generator().manual_seed(5)
    )
    y = ref.softmax(x, rows, cols)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y.sum(dim=1), torch.ones(rows, dtype=torch.float64))
    torch.testing.assert_close(y, torch.softmax(x, dim=1), rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("bh, seq, dim", [(1, 1, 64), (3, 17, 64), (2, 129, 128), (2, 40, 128)])
def test_attention_reference_matches_sdpa(bh, seq, dim, causal):
    ref = load_reference()
    gen = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(bh, seq, dim, dtype=torch.float64, generator=gen) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
    torch.testing.assert_close(
        ref.attention(q, k, v, bh, seq, dim, causal), expected, rtol=1e-10, atol=1e-12
    )


def test_attention_reference_causal_first_row_is_first_value():
    """Query 0 sees only key 0 under the causal mask, so its output is exactly v[:, 0]."""
    ref = load_reference()
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 33, 64, dtype=torch.float64, generator=gen) for _ in range(3))
    out = ref.attention(q, k, v, 2, 33, 64, 1)
    torch.testing.assert_close(out[:, 0], v[:, 0], rtol=0, atol=0)


def test_attention_reference_slices_many_heads_like_one_batch():
    """The reference works through the heads a few at a time; the slicing must not matter."""
    ref = load_reference()
    gen = torch.Generator().manual_seed(8)
    bh, seq, dim = 5, 3000, 64  # 3000^2 scores per head: several slices
    q, k, v = (torch.randn(bh, seq, dim, dtype=torch.float64, generator=gen) for _ in range(3))
    out = ref.attention(q, k, v, bh, seq, dim, 1)
    for head in (0, bh - 1):
        one = ref.attention(
            q[head : head + 1], k[head : head + 1], v[head : head + 1], 1, seq, dim, 1
        )
        # The same float64 arithmetic up to summation order: a batched matmul may block its sums
        # differently from a single one (it does on some CPUs), which moves the last bits only.
        torch.testing.assert_close(out[head], one[0], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_reference_survives_large_scores(causal):
    ref = load_reference()
    gen = torch.Generator().manual_seed(9)
    q, k, v = (6.0 * torch.randn(2, 129, 64, dtype=torch.float64, generator=gen) for _ in range(3))
    out = ref.attention(q, k, v, 2, 129, 64, causal)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)), rtol=1e-10, atol=1e-10
    )


# --- spec -----------------------------------------------------------------------------------


# --- a Transformer block's training step, against PyTorch autograd in float64 ---------------


def _randn(*shape, seed):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("rows, cols", [(1, 1), (5, 1), (3, 7), (17, 33), (4, 768)])
def test_layernorm_forward_reference_matches_torch(rows, cols):
    ref = load_reference()
    x, gamma, beta = _randn(rows, cols, seed=1), _randn(cols, seed=2), _randn(cols, seed=3)
    y, mean, rstd = ref.layernorm_forward(x, gamma, beta, rows, cols)
    torch.testing.assert_close(y, F.layer_norm(x, (cols,), gamma, beta, eps=1e-5), rtol=1e-12, atol=1e-12)
    torch_y, torch_mean, torch_rstd = torch.native_layer_norm(x, [cols], gamma, beta, 1e-5)
    torch.testing.assert_close(mean, torch_mean.reshape(rows), rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(rstd, torch_rstd.reshape(rows), rtol=1e-12, atol=1e-15)
    if cols == 1:       # one column: x - mean = 0, so y = beta and rstd = 1 / sqrt(eps)
        assert torch.equal(y, beta.expand(rows, 1))
        torch.testing.assert_close(rstd, torch.full((rows,), 1e-5 ** -0.5, dtype=torch.float64))


@pytest.mark.parametrize("rows, cols", [(1, 1), (5, 1), (3, 7), (17, 33), (4, 768)])
def test_layernorm_backward_reference_matches_autograd(rows, cols):
    ref = load_reference()
    x = _randn(rows, cols, seed=4).requires_grad_()
    gamma, beta = _randn(cols, seed=5).requires_grad_(), _randn(cols, seed=6).requires_grad_()
    dy = _randn(rows, cols, seed=7)
    F.layer_norm(x, (cols,), gamma, beta, eps=1e-5).backward(dy)
    x0 = x.detach()
    mean, rstd = ref.layernorm_mean(x0, rows, cols), ref.layernorm_rstd(x0, rows, cols)
    dx, dgamma, dbeta = ref.layernorm_backward(x0, gamma.detach(), mean, rstd, dy, rows, cols)
    torch.testing.assert_close(dx, x.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(dgamma, gamma.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(dbeta, beta.grad, rtol=1e-10, atol=1e-12)


def test_layernorm_backward_reference_uses_the_statistics_it_is_given():
    """The backward pass takes mean and rstd as saved: other statistics give another x_hat."""
    ref = load_reference()
    x, gamma, dy = _randn(3, 8, seed=8), _randn(8, seed=9), _randn(3, 8, seed=10)
    mean, rstd = ref.layernorm_mean(x, 3, 8), ref.layernorm_rstd(x, 3, 8)
    _, dgamma, dbeta = ref.layernorm_backward(x, gamma, mean, rstd, dy, 3, 8)
    _, shifted, same = ref.layernorm_backward(x, gamma, mean + 1, rstd, dy, 3, 8)
    assert torch.equal(same, dbeta) and not torch.allclose(shifted, dgamma)


@pytest.mark.parametrize("rows, cols, scale", [(1, 1, 1.0), (5, 1, 1.0), (3, 7, 1.0), (17, 1000, 1.0),
                                               (9, 3000, 1e4), (4, 50257, 1.0)])
def test_cross_entropy_reference_matches_autograd(rows, cols, scale):
    ref = load_reference()
    logits = (scale * _randn(rows, cols, seed=11)).requires_grad_()
    targets = torch.randint(0, cols, (rows,), generator=torch.Generator().manual_seed(12))
    loss = F.cross_entropy(logits, targets, reduction="none")
    loss.mean().backward()
    got_loss, got = ref.cross_entropy(logits.detach(), targets.to(torch.float64), rows, cols)
    torch.testing.assert_close(got_loss, loss.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got.value, logits.grad, rtol=1e-12, atol=1e-300)
    assert torch.isfinite(got_loss).all()
    # The allowance is only at the targets, and only there p - 1 can be close to 0.
    assert (got.allowed > 0).sum() <= rows
    torch.testing.assert_close(got.allowed.sum(dim=1), 1e-4 * torch.softmax(logits.detach(), 1).gather(
        1, targets[:, None]).squeeze(1) / rows, rtol=1e-12, atol=1e-300)


def test_cross_entropy_reference_of_equal_logits_and_of_confident_rows():
    ref = load_reference()
    loss, grad = ref.cross_entropy(torch.zeros(3, 50257, dtype=torch.float64),
                                   torch.tensor([0.0, 50256.0, 7.0]), 3, 50257)
    torch.testing.assert_close(loss, torch.full((3,), math.log(50257), dtype=torch.float64))
    assert grad.value[0, 0] == pytest.approx((1 / 50257 - 1) / 3) and grad.value[1, 1] == pytest.approx(1 / 50257 / 3)
    # Logits of 1e4 and a target at the maximum: the loss is 0 and nothing overflows.
    logits = torch.tensor([[1e4, -1e4, 0.0]], dtype=torch.float64)
    loss, grad = ref.cross_entropy(logits, torch.tensor([0.0]), 1, 3)
    assert loss.item() == 0.0 and torch.equal(grad.value, torch.zeros(1, 3, dtype=torch.float64))


def test_cross_entropy_large_logits_overflow_a_naive_float32_exp():
    case = next(c for t in TASKS if t["name"] == "cross_entropy" for c in t["cases"]
                if c.get("input_scale", 1) >= 1e4)
    assert torch.isinf(torch.exp(case["input_scale"] * torch.randn(case["rows"], case["cols"]))).any()


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("bh, seq, dim", [(1, 1, 64), (3, 17, 64), (2, 40, 128)])
def test_attention_backward_reference_matches_autograd(bh, seq, dim, causal):
    ref = load_reference()
    q, k, v = (_randn(bh, seq, dim, seed=20 + i).requires_grad_() for i in range(3))
    dO = _randn(bh, seq, dim, seed=23)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
    out.backward(dO)
    o = ref.attention(q.detach(), k.detach(), v.detach(), bh, seq, dim, causal)
    dq, dk, dv = ref.attention_backward(q.detach(), k.detach(), v.detach(), o, dO, bh, seq, dim, causal)
    for got, want in ((dq, q.grad), (dk, k.grad), (dv, v.grad)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_attention_backward_reference_delta_is_rowsum_of_dp_times_p():
    """delta = rowsum(dO * o) equals rowsum(dP * P): the identity that lets a kernel skip P."""
    ref = load_reference()
    bh, seq, dim = 2, 33, 64
    q, k, v, dO = (_randn(bh, seq, dim, seed=30 + i) for i in range(4))
    p = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(dim), dim=2)
    o = ref.attention(q, k, v, bh, seq, dim, 0)
    torch.testing.assert_close((dO * o).sum(2), ((dO @ v.transpose(1, 2)) * p).sum(2), rtol=1e-12, atol=1e-12)


def test_attention_backward_reference_slices_many_heads_like_one():
    ref = load_reference()
    bh, seq, dim = 3, 3000, 64   # several slices of the score matrices
    q, k, v, dO = (_randn(bh, seq, dim, seed=40 + i) for i in range(4))
    o = ref.attention(q, k, v, bh, seq, dim, 1)
    full = ref.attention_backward(q, k, v, o, dO, bh, seq, dim, 1)
    one = ref.attention_backward(q[2:], k[2:], v[2:], o[2:], dO[2:], 1, seq, dim, 1)
    for a, b in zip(full, one):
        torch.testing.assert_close(a[2:], b, rtol=1e-12, atol=1e-14)


# --- spec -----------------------------------------------------------------------------------


def _benchmarks(task: dict) -> list[dict]:
    return task["benchmark"] if isinstance(task["benchmark"], list) else [task["benchmark"]]


@pytest.mark.parametrize("task", TASKS, ids=task_ids(TASKS))
def test_spec_task_is_consistent(task):
    args = task["args"]
    scalars = [a["name"] for a in args if a["role"] == "scalar"]
    inputs = [a["name"] for a in args if a["role"] == "in"]
    assert {a["role"] for a in args} <= {"in", "out", "scalar"}
    assert all(a["dtype"] in C_TYPES for a in args)
    assert all(a["dtype"] == "int32" for a in args if a["role"] == "scalar")
    # Integer inputs are indices: they say where they point.
    assert all("range" in a for a in args if a["role"] == "in" and a["dtype"] == "int32")
    assert any(a["role"] == "out" for a in args)
    assert task["compute"] in {"fp32", "bf16_tensor"}

    for arg in args:
        for expr in arg.get("shape", []):
            if isinstance(expr, str):
                assert expression_names(expr) <= set(scalars), (arg["name"], expr)
    for key in ("flops", "bytes"):
        assert expression_names(task[key]) <= set(scalars), (key, task[key])

    for case in task["cases"] + _benchmarks(task):
        assert set(case) - {"input_scale", "fill"} == set(scalars), case
        values = {name: case[name] for name in scalars}
        for arg in args:
            for expr in arg.get("shape", []):
                assert evaluate(expr, values) > 0, (case, arg["name"], expr)
        assert evaluate(task["flops"], values) >= 0
        assert evaluate(task["bytes"], values) > 0
    assert all(b in task["cases"] for b in _benchmarks(task)), "the benchmark sizes must also be checked"

    ref = load_reference()
    params = list(inspect.signature(getattr(ref, task["reference"])).parameters)
    assert params == inputs + scalars
    for arg in args:
        if "derive" in arg:
            assert set(inspect.signature(getattr(ref, arg["derive"])).parameters) <= set(inputs + scalars)
    if "vendor" in task:
        assert list(inspect.signature(getattr(ref, task["vendor"])).parameters) == inputs + scalars


def test_spec_cases_cover_the_edges():
    tasks = {t["name"]: t for t in TASKS}
    softmax_cols = {c["cols"] for c in tasks["softmax"]["cases"]}
    assert {1, 7, 1000, 4097, 32768} <= softmax_cols
    assert any(c["rows"] == 1 for c in tasks["softmax"]["cases"])
    assert any("input_scale" in c for c in tasks["softmax"]["cases"])
    for name in ("attention", "attention_bf16"):
        cases = tasks[name]["cases"]
        assert {1, 17, 129, 1000} <= {c["seq"] for c in cases}
        assert {(d, c) for d in (64, 128) for c in (0, 1)} <= {
            (c["dim"], c["causal"]) for c in cases
        }
        assert any("input_scale" in c for c in cases)
    bench = tasks["attention_bf16"]["benchmark"]
    assert bench == {"bh": 128, "seq": 4096, "dim": 128, "causal": 0}
    assert {**bench, "causal": 1} in tasks["attention_bf16"]["cases"]
    for name in ("layernorm_forward", "layernorm_backward", "cross_entropy"):
        cases = tasks[name]["cases"]
        assert {c["rows"] for c in cases} >= {1, 5} and {c["cols"] for c in cases} >= {1, 7, 4097}
        assert any(c["cols"] > 32768 for c in cases), "a row longer than a block's registers"
    ce = tasks["cross_entropy"]["cases"]
    assert any(c.get("input_scale", 1) >= 1e4 for c in ce), "logits of size 1e4"
    assert any(c.get("fill", {}).get("logits") == "zeros" for c in ce), "a row of equal logits"
    assert any(c.get("fill", {}).get("targets") == "ends" and c["cols"] == 50257 for c in ce), \
        "targets at both ends of GPT-2's vocabulary"
    assert {"rows": 8192, "cols": 50257} in tasks["cross_entropy"]["benchmark"]
    assert {"rows": 8192, "cols": 768} in tasks["layernorm_backward"]["benchmark"]
    backward = tasks["attention_backward"]
    assert {1, 17, 129, 1000} <= {c["seq"] for c in backward["cases"]}
    assert {(d, c) for d in (64, 128) for c in (0, 1)} <= {(c["dim"], c["causal"]) for c in backward["cases"]}
    assert {b["causal"] for b in backward["benchmark"]} == {0, 1}


def test_spec_flops_count_only_visible_pairs_when_causal():
    task = next(t for t in TASKS if t["name"] == "attention")
    full = evaluate(task["flops"], {"bh": 1, "seq": 3, "dim": 2, "causal": 0})
    causal = evaluate(task["flops"], {"bh": 1, "seq": 3, "dim": 2, "causal": 1})
    assert full == 4 * 9 * 2  # 9 query-key pairs, 2 matmuls x 2 FLOPs x dim
    assert causal == 4 * 6 * 2  # 6 pairs on or below the diagonal


# --- CUDA sources ---------------------------------------------------------------------------


@pytest.mark.parametrize("task", TASKS, ids=task_ids(TASKS))
def test_c_signatures_match_spec(task):
    expected = [expected_c_param(a) for a in task["args"]]
    for source in task_sources(task):
        assert source.exists(), f"missing {source.relative_to(ROOT)}"
        assert extern_c_signature(source, task["symbol"]) == expected, source.relative_to(ROOT)


@pytest.mark.parametrize("task", TASKS, ids=task_ids(TASKS))
def test_solution_is_not_the_stub(task):
    stub = (EXERCISE / task["source"]).read_text()
    solution = (SOLUTIONS / task["source"]).read_text()
    assert "__global__" in solution
    assert "__global__" not in stub
    assert len(solution) > 2 * len(stub)


def test_bf16_solution_uses_tensor_cores():
    """wgmma on TMA-loaded tiles on Hopper; mma.sync with ldmatrix and cp.async where it falls back."""
    hopper = (SOLUTIONS / "attention_bf16.cu").read_text()
    for instruction in ("wgmma.mma_async", "cp.async.bulk.tensor", "mbarrier"):
        assert instruction in hopper, instruction
    fallback = (SOLUTIONS / "attention_bf16_mma.cuh").read_text()
    for instruction in ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix", "cp.async"):
        assert instruction in fallback, instruction


@pytest.mark.skipif(
    shutil.which("nvcc") is None, reason="nvcc is not on PATH: cannot compile CUDA here"
)
@pytest.mark.parametrize("source", all_sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_source_compiles_for_sm90(source, tmp_path):
    result = subprocess.run(
        ["nvcc", "-arch=sm_90", "-c", str(source), "-o", str(tmp_path / "out.o")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr


# --- dgamma and dbeta are overwritten, not accumulated ----------------------------------------


def test_dgamma_and_dbeta_are_outputs_so_a_kernel_that_adds_into_them_fails():
    """The stub says dgamma and dbeta are overwritten. That is tested by construction: they are
    'out' arguments, which the grader fills with its poison before every call, and the poison is
    NaN in float32, so a kernel that adds its sums into them leaves NaN and fails as 'not finite'."""
    from grader import spec as specmod
    from grader.worker.checking import Checker
    from grader.worker.memory import POISON, ArgMemory, CaseMemory

    exercise = specmod.find("04")
    task = exercise.task("layernorm_backward")
    roles = {a.name: a.role for a in task.args}
    assert roles["dgamma"] == roles["dbeta"] == roles["dx"] == "out"
    poison = torch.full((4,), POISON, dtype=torch.uint8).view(torch.float32)
    assert torch.isnan(poison).all() and torch.isnan(poison + 1.0).all()

    class Host:
        def __init__(self, data):
            self.data = data

        def tensor(self):
            return self.data

        def unwritten(self):
            return (self.data.view(torch.uint8).view(-1, 4) == POISON).all(dim=1).view(self.data.shape)

    rows, cols = 3, 8
    case = specmod.Case(values={"rows": rows, "cols": cols})
    ref = exercise.load_reference()
    x, gamma, dy = _randn(rows, cols, seed=50).float(), _randn(cols, seed=51).float(), _randn(rows, cols, seed=52).float()
    mean = ref.layernorm_mean(x.double(), rows, cols).float()
    rstd = ref.layernorm_rstd(x.double(), rows, cols).float()
    inputs = {"x": x, "gamma": gamma, "mean": mean, "rstd": rstd, "dy": dy}
    dx, dgamma, dbeta = (t.float() for t in ref.layernorm_backward(*(t.double() for t in inputs.values()),
                                                                   rows, cols))

    def compare(dgamma_written):
        outputs = {"dx": dx.clone(), "dgamma": dgamma_written, "dbeta": dbeta.clone()}
        memory = CaseMemory(task, case, {a.name: ArgMemory(a, [Host({**inputs, **outputs}[a.name])])
                                         for a in task.tensors},
                            before={name: [t.clone()] for name, t in inputs.items()})
        return Checker(task, ref.layernorm_backward, memory, {"rows": rows, "cols": cols}).compare()

    assert compare(dgamma.clone()) is None                      # written: right
    miss = compare(torch.full((cols,), POISON, dtype=torch.uint8).repeat(4).view(torch.float32) + dgamma)
    # NaN plus a sum is NaN: reported as 'not written' where the NaN keeps the poison's bits (as on
    # this CPU), 'not finite' where the GPU's adder returns its canonical NaN. A failure either way.
    assert miss is not None and miss.output == "dgamma" and miss.reason in ("not written", "not finite")
    assert miss.bad == cols
