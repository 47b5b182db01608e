"""On the GPU: the capstone's operators against PyTorch (opcheck, and each operator's forward and
backward against the float64 reference: the kernels are float32 only), then `grade model gpt` on
the hidden solutions at the small size, every bar passed; with the stubs it names the missing
kernels. The report is printed (`pytest -m gpu -s`)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grader.result import ExitCode
from grader.spec import repo_root, solutions_dir

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("no CUDA device for PyTorch here", allow_module_level=True)

from capstone_helpers import s2s_ops  # noqa: E402


@pytest.fixture(scope="module")
def solutions():
    previous = s2s_ops.use(None)
    kernels = s2s_ops.load_from(solutions_dir())
    yield kernels
    s2s_ops.use(previous)


def cuda32(*shape, scale=1.0):
    return (torch.randn(*shape, device="cuda") * scale).requires_grad_()


CASES = {
    "linear": lambda: (torch.ops.s2s.linear.default, (cuda32(33, 70), cuda32(17, 70), cuda32(17), True)),
    "layernorm": lambda: (torch.ops.s2s.layernorm.default, (cuda32(40, 384), cuda32(384), cuda32(384))),
    "attention": lambda: (torch.ops.s2s.attention.default,
                          (cuda32(6, 100, 64), cuda32(6, 100, 64), cuda32(6, 100, 64), True)),
    "cross_entropy": lambda: (torch.ops.s2s.cross_entropy.default,
                              (cuda32(50, 256), torch.randint(0, 256, (50,), dtype=torch.int32, device="cuda"))),
}


@pytest.mark.parametrize("name", CASES)
def test_each_operator_passes_opcheck_and_matches_float64(name, solutions):
    torch.manual_seed(0)
    op, args = CASES[name]()
    checks = torch.library.opcheck(op, args)
    assert set(checks.values()) == {"SUCCESS"}, checks
    grads = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    out = op(*args)
    first = out[0] if isinstance(out, tuple) else out
    weight = torch.randn_like(first)
    (first * weight).sum().backward()
    ref_args = [a.detach().double().cpu().requires_grad_() if isinstance(a, torch.Tensor) and a.requires_grad
                else (a.cpu() if isinstance(a, torch.Tensor) else a) for a in args]
    from capstone_helpers import References
    previous = s2s_ops.use(References())
    try:
        ref = op(*ref_args)
        ref_first = ref[0] if isinstance(ref, tuple) else ref
        (ref_first * weight.double().cpu()).sum().backward()
    finally:
        s2s_ops.use(previous)
    assert torch.allclose(first.double().cpu(), ref_first.detach(), rtol=1e-4, atol=1e-4)
    ref_grads = [a for a in ref_args if isinstance(a, torch.Tensor) and a.requires_grad]
    for g, r in zip(grads, ref_grads):
        assert torch.allclose(g.grad.double().cpu(), r.grad, rtol=1e-3, atol=1e-3), name


def test_fp8_operators(solutions):
    w = torch.randn(300, 384, device="cuda").bfloat16()
    q, scale = torch.ops.s2s.quantize_fp8(w)
    x = torch.randn(20, 384, device="cuda").bfloat16()
    y = torch.ops.s2s.gemv_fp8(x, q, scale)
    want = x.double() @ (q.double() * scale.double()[:, None]).T
    assert torch.allclose(y.double(), want, rtol=2e-2, atol=2e-2)


def _grade_model(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(repo_root()), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "grader.cli", "model", "gpt", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=900)


def test_the_solutions_train_a_gpt_that_passes_every_bar(tmp_path) -> None:
    from rich.console import Console

    from grader.model import grade_model, render_rich
    result = grade_model(solutions_dir(), tmp_path / "report", say=print, model="gpt",
                         options={"size": "small", "steps": 200})
    Console(width=160).print(render_rich(result))
    assert result.exit_code == ExitCode.PASSED, (result.kernels, result.run.fatal, result.run.error)
    assert [b.passed for b in result.bars] == [True, True, True], result.bars
    learner, twin = result.values["learner"], result.values["twin"]
    assert learner["losses"][:20] == pytest.approx(twin["losses"][:20], rel=1e-3)
    assert learner["sample"].startswith("def ")


def test_the_stubs_name_every_missing_kernel_and_train_only_the_twin(tmp_path) -> None:
    proc = _grade_model("--size", "small", "--steps", "30", "--out", str(tmp_path / "report"), cwd=tmp_path)
    assert proc.returncode == ExitCode.FAILED, proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stdout.count("MISSING: ") == 10
    assert "PyTorch twin, training (fp32)" in proc.stdout and "your kernels, training" not in proc.stdout
