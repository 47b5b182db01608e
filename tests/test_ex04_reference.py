"""Exercise 04 (softmax, attention): the references, the spec and the CUDA sources agree.

Runs on a CPU. The float64 references are checked against PyTorch's own softmax and
scaled_dot_product_attention; the spec is checked against the `extern "C"` signature of every
stub, baseline and solution; every .cu file must compile for sm_90 when nvcc is present.
"""

from __future__ import annotations

import ast
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


@pytest.mark.parametrize("task", TASKS, ids=task_ids(TASKS))
def test_spec_task_is_consistent(task):
    args = task["args"]
    scalars = [a["name"] for a in args if a["role"] == "scalar"]
    inputs = [a["name"] for a in args if a["role"] == "in"]
    assert {a["role"] for a in args} <= {"in", "out", "scalar"}
    assert all(a["dtype"] in C_TYPES for a in args)
    assert all(a["dtype"] == "int32" for a in args if a["role"] == "scalar")
    assert any(a["role"] == "out" for a in args)
    assert task["compute"] in {"fp32", "bf16_tensor"}

    for arg in args:
        for expr in arg.get("shape", []):
            if isinstance(expr, str):
                assert expression_names(expr) <= set(scalars), (arg["name"], expr)
    for key in ("flops", "bytes"):
        assert expression_names(task[key]) <= set(scalars), (key, task[key])

    for case in task["cases"] + [task["benchmark"]]:
        assert set(case) - {"input_scale"} == set(scalars), case
        values = {name: case[name] for name in scalars}
        for arg in args:
            for expr in arg.get("shape", []):
                assert evaluate(expr, values) > 0, (case, arg["name"], expr)
        assert evaluate(task["flops"], values) >= 0
        assert evaluate(task["bytes"], values) > 0
    assert task["benchmark"] in task["cases"], "the benchmark size must also be checked"

    ref = load_reference()
    params = list(inspect.signature(getattr(ref, task["reference"])).parameters)
    assert params == inputs + scalars
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
    text = (SOLUTIONS / "attention_bf16.cu").read_text()
    for instruction in (
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        "ldmatrix",
        "cp.async",
    ):
        assert instruction in text


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
