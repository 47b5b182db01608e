"""The capstone's GPT on the CPU: the operators' registrations (opcheck) and their autograd
(float64 gradcheck) with the exercises' references behind them, the model on those operators
following its PyTorch twin step by step, FP8 serving, the typed job and result, the report, and
`grade model gpt` without a GPU (the twin alone)."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from capstone_helpers import CAPSTONE, ROOT, References, s2s_ops

import gpt  # noqa: E402  (capstone_helpers put the capstone's folder on the path)
import report_gpt  # noqa: E402

from grader.model import (ExitCode, KernelCheck, ModelResult, TrainJob, TrainResult, load_capstone,  # noqa: E402
                          render_rich)

CONFIG = load_capstone("gpt")
SMALL = gpt.Config.small()


@pytest.fixture
def references():
    previous = s2s_ops.use(References())
    yield
    s2s_ops.use(previous)


def f64(*shape, grad=True):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=grad)


# ---------------------------------------------------------------------------- the operators

OPERATORS = {
    "linear": lambda: (torch.ops.s2s.linear.default, (f64(5, 7), f64(3, 7), f64(3), True)),
    "linear without GELU": lambda: (torch.ops.s2s.linear.default, (f64(5, 7), f64(3, 7), f64(3), False)),
    "layernorm": lambda: (torch.ops.s2s.layernorm.default, (f64(4, 9), f64(9), f64(9))),
    "attention": lambda: (torch.ops.s2s.attention.default, (f64(2, 5, 64), f64(2, 5, 64), f64(2, 5, 64), True)),
    "cross_entropy": lambda: (torch.ops.s2s.cross_entropy.default,
                              (f64(6, 11), torch.randint(0, 11, (6,), dtype=torch.int32))),
}


@pytest.mark.parametrize("name", OPERATORS)
def test_each_operator_passes_opcheck_and_float64_gradcheck(name, references):
    torch.manual_seed(0)
    op, args = OPERATORS[name]()
    checks = torch.library.opcheck(op, args)
    assert set(checks.values()) == {"SUCCESS"}, checks
    tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad]

    def first(*xs):
        full = list(args)
        for i, x in zip(tensors, xs):
            full[i] = x
        out = op(*full)
        return out[0] if isinstance(out, tuple) else out
    assert torch.autograd.gradcheck(first, tuple(args[i] for i in tensors))


def test_cross_entropy_gradient_weighs_each_rows_loss(references):
    """The kernel's dlogits is the gradient of the mean; the operator's backward scales it by
    the weight each row's loss gets downstream, not only 1 / rows."""
    logits = f64(4, 5)
    targets = torch.tensor([0, 4, 2, 2], dtype=torch.int32)
    weights = torch.tensor([1.0, 0.0, 3.0, -2.0], dtype=torch.float64)
    (torch.ops.s2s.cross_entropy(logits, targets)[0] * weights).sum().backward()
    want = logits.detach().clone().requires_grad_()
    (torch.nn.functional.cross_entropy(want, targets.long(), reduction="none") * weights).sum().backward()
    assert torch.allclose(logits.grad, want.grad)


def test_adamw_on_the_operator_is_torchs_adamw(references):
    torch.manual_seed(0)
    params = [torch.randn(4, 3, dtype=torch.float64), torch.randn(5, dtype=torch.float64)]
    theirs = [p.clone().requires_grad_() for p in params]
    ours = [p.clone().requires_grad_() for p in params]
    opt_t = torch.optim.AdamW(theirs, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    opt_o = s2s_ops.AdamW(ours, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    checks = torch.library.opcheck(torch.ops.s2s.adamw_multi.default,
                                   ([p.detach().clone() for p in params], [torch.ones_like(p) for p in params],
                                    [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params],
                                    1e-3, 0.9, 0.999, 1e-8, 0.01, 1))
    assert set(checks.values()) == {"SUCCESS"}, checks
    for _ in range(3):
        g = [torch.randn_like(p) for p in params]
        for opt, ps in ((opt_t, theirs), (opt_o, ours)):
            for p, gi in zip(ps, g):
                p.grad = gi.clone()
            opt.step()
    for a, b in zip(ours, theirs):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-12)


def test_the_fp8_operators_round_trip(references):
    w = torch.randn(20, 32).bfloat16()
    q, scale = torch.ops.s2s.quantize_fp8(w)
    assert q.dtype == torch.float8_e4m3fn and scale.shape == (20,)
    x = torch.randn(19, 32).bfloat16()          # more than 16 rows: two calls of gemv_fp8
    y = torch.ops.s2s.gemv_fp8(x, q, scale)
    want = x.float() @ (q.float() * scale[:, None]).T
    assert y.dtype == torch.bfloat16 and torch.allclose(y.float(), want, rtol=1e-2, atol=1e-2)
    assert torch.allclose(q.float() * scale[:, None], w.float(), rtol=0.07, atol=1e-6)


def test_torch_compile_traces_a_model_on_the_operators(references):
    torch.manual_seed(0)
    model = gpt.GPT(gpt.Config(layers=1, width=64, heads=1, context=8, batch=2), gpt.KernelOps).double()
    x = torch.randint(0, 256, (2, 8))
    eager = model(x, x)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    assert torch.allclose(compiled(x, x), eager)


# ---------------------------------------------------------------------------- the model and its twin

@pytest.fixture(scope="module")
def corpus():
    return gpt.load_corpus(SMALL)


def test_the_corpus_is_the_standard_library_split_by_file(corpus):
    again = gpt.load_corpus(SMALL)
    assert torch.equal(corpus.val, again.val) and corpus.val_files >= 10
    assert len(corpus.train) > 5 * len(corpus.val) > 1_000_000
    assert b"def " in bytes(corpus.val[:100_000].tolist())
    starts = gpt.batch_starts(SMALL, len(corpus.train))
    assert starts.shape == (SMALL.steps, SMALL.batch) and torch.equal(starts, gpt.batch_starts(SMALL, len(corpus.train)))


def test_on_the_references_the_model_follows_its_twin_step_by_step(corpus, references):
    config = gpt.Config.named("small", 3)
    twin = gpt.GPT(config)
    ours = gpt.twin_of(twin, gpt.KernelOps)
    theirs = torch.optim.AdamW(twin.param_groups(config.weight_decay), lr=config.lr, betas=config.betas)
    mine = s2s_ops.AdamW(ours.param_groups(config.weight_decay), lr=config.lr, betas=config.betas)
    a = gpt.train(twin, theirs, corpus, config)
    b = gpt.train(ours, mine, corpus, config)
    worst = max(abs(x - y) / y for x, y in zip(a.losses, b.losses))
    assert worst < 1e-5, (a.losses, b.losses)        # float64 references against float32 PyTorch
    assert a.losses[0] == pytest.approx(5.545, abs=0.1)   # near ln 256: the first guess is nearly uniform


def test_fp8_serving_on_the_references_stays_within_the_bar(corpus, references):
    config = gpt.Config.named("small", 40)
    model = gpt.GPT(config)
    gpt.train(model, torch.optim.AdamW(model.param_groups(0.1), lr=config.lr), corpus, config)
    fp32 = gpt.validation_loss(model, corpus, config)
    bf16, _ = gpt.decode_validation(lambda b: gpt.bf16_decoder(model, b), corpus, config)
    fp8, rate = gpt.decode_validation(lambda b: gpt.fp8_decoder(model, b), corpus, config)
    assert abs(bf16 / fp32 - 1) < 0.01, (fp32, bf16)       # decoding computes what the forward pass does
    assert abs(fp8 / fp32 - 1) < CONFIG["bars"]["fp8_rtol"], (fp32, fp8)
    assert rate > 0


# ---------------------------------------------------------------------------- job, result, report

def test_job_and_result_are_typed_and_round_trip(tmp_path):
    job = TrainJob("gpt", str(tmp_path), {"attention": "/x.so"}, {"attention": "04"}, {"steps": 5}, gpu=False)
    job.write(tmp_path / "job.json")
    assert TrainJob.read(tmp_path / "job.json") == job
    result = TrainResult(about="a", device="cpu", values={"twin": {"losses": [1.0]}}, error="e")
    result.write(tmp_path / "r.json")
    assert TrainResult.read(tmp_path / "r.json") == result


def _values(losses_gap=1e-6, val_gap=0.005, fp8_gap=0.01):
    twin = [5.5 - 0.01 * i for i in range(30)]
    return {"config": {"decode_batch": 16},
            "twin": {"losses": twin, "val_loss": 1.40, "val_bpb": 2.02, "tokens_per_s": 300_000.0, "about": "eager"},
            "learner": {"losses": [x * (1 + losses_gap) for x in twin], "val_loss": 1.40 * (1 + val_gap),
                        "val_bpb": 2.03, "tokens_per_s": 330_000.0, "step_seconds": 0.012,
                        "ops": [{"name": "linear_backward", "calls": 25, "seconds": 0.005, "flops": 1e11,
                                 "bytes": 4e8},
                                {"name": "attention", "calls": 6, "seconds": 0.001, "flops": 5e9, "bytes": 1e8}],
                        "fp8": {"val_loss": 1.40 * (1 + val_gap) * (1 + fp8_gap), "val_bpb": 2.05,
                                "tokens_per_s": 9000.0},
                        "bf16": {"val_loss": 1.41, "val_bpb": 2.03, "tokens_per_s": 6000.0},
                        "sample": "def f(x):\n    return x", "sample_by": "your FP8 model"}}


@pytest.mark.parametrize("values, verdicts", [
    (_values(), [True, True, True]),
    (_values(val_gap=0.03), [False, True, True]),
    (_values(losses_gap=2e-3), [True, False, True]),
    (_values(fp8_gap=-0.025), [True, True, False]),
])
def test_the_bars(values, verdicts):
    assert [b.passed for b in report_gpt.bars(values, CONFIG)] == verdicts


def test_the_report_shows_every_table_the_sample_and_the_rates():
    from rich.console import Console
    values = _values()
    kernels = [KernelCheck(k["exercise"], k["task"], k["role"], "ready", "correct") for k in CONFIG["kernels"]]
    result = ModelResult("solutions", kernels, TrainResult(about="6 layers", device="H100", values=values),
                         report_gpt.bars(values, CONFIG), report_gpt.tables(values, CONFIG),
                         report_gpt.lines(values, CONFIG), model=CONFIG["model"])
    assert result.exit_code == ExitCode.PASSED
    console = Console(record=True, width=200, file=io.StringIO())
    console.print(render_rich(result))
    text = console.export_text()
    for fragment in ("Passed: a model trained and served on nothing but your kernels matches PyTorch.",
                     "your kernels, training (fp32)", "1.10x the twin", "1.50x PyTorch bf16", "9,000",
                     "The first 20 steps", "linear_backward", "41.7%", "glue, launches and Python (the rest)",
                     "def f(x):", "validation loss beside the PyTorch twin's"):
        assert fragment in text, fragment
    assert len(report_gpt.first_rows(values, 20)) == 20
    assert report_gpt.plots(values, CONFIG)[0].file == "loss_curve.png"
    assert json.loads(result.to_json())["exit_code"] == 0


def test_missing_kernels_leave_every_bar_unmeasured():
    values = {"twin": _values()["twin"]}
    assert [b.passed for b in report_gpt.bars(values, CONFIG)] == [None, None, None]
    assert report_gpt.op_rows(values) == [] and report_gpt.model_rows(values)[0][0] == "PyTorch twin, training (fp32)"


def _grade_model(*args, cwd):
    return subprocess.run([sys.executable, "-m", "grader.cli", "model", *args], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=900)


@pytest.mark.skipif(__import__("grader.device", fromlist=["probe"]).probe().gpu is not None,
                    reason="this checks the report without a GPU; tests/test_gpu_capstone_gpt.py runs it on one")
def test_grade_model_gpt_without_a_gpu_trains_the_twin_alone(tmp_path):
    proc = _grade_model("gpt", "--steps", "12", "--out", str(tmp_path / "report"), "--json", cwd=tmp_path)
    assert proc.returncode == ExitCode.FAILED, proc.stderr[-3000:]          # the stubs: missing kernels
    assert "Traceback" not in proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert {k["status"] for k in result["kernels"]} == {"missing"} and len(result["kernels"]) == 10
    run = result["run"]
    assert run["notice"] == ("Without a GPU only the PyTorch twin trains, on the CPU, at the small size "
                             "(2 layers, width 128, 12 steps).")
    assert len(run["values"]["twin"]["losses"]) == 12 and "learner" not in run["values"]
    assert run["values"]["twin"]["sample"].startswith("def ")
    assert [b["passed"] for b in result["bars"]] == [None, None, None]


def test_grade_model_names_its_models_and_refuses_an_option_a_model_does_not_take(tmp_path):
    proc = _grade_model("--list", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.splitlines()[0].startswith("mlp: a digits classifier")
    assert "gpt: a byte-level GPT" in proc.stdout and "--steps" in proc.stdout
    proc = _grade_model("mlp", "--steps", "3", cwd=tmp_path)
    assert proc.returncode == ExitCode.USAGE and "takes --tensorrt, not --steps" in proc.stderr
    proc = _grade_model("bert", cwd=tmp_path)
    assert proc.returncode == ExitCode.USAGE and "the capstone has no model 'bert'; its models: mlp, gpt" in proc.stderr
