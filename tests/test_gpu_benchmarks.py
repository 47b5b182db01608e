"""Performance requirements, measured on the GPU: ratios from one run.

Prints a table (use `pytest -m gpu -s` to see it) and checks the requirements:
exercise 01's vector_add and reduce_sum solutions reach 90% of the device-to-device
copy bandwidth measured in the same grading, transpose 80%; `grade exercise 01`
turns around in at most 15 s with counters and 5 s without, on a warm compile cache;
exercise 02's fp32 GEMM solutions reach their share of cuBLAS (sgemm 85%, the forward
pass of nn.Linear + GELU 100% of F.linear + F.gelu, its backward pass 80% of autograd's).
"""
from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from grader.pipeline import Options, grade
from grader.spec import find, solutions_dir

pytestmark = pytest.mark.gpu

BANDWIDTH_REQUIREMENT = {"vector_add": 0.90, "reduce_sum": 0.90, "transpose": 0.80}


def test_ex01_solutions_against_copy_bandwidth() -> None:
    from test_gpu_grading import graded      # the gradings shared with the grading tests
    solution, baseline = graded("01", "solution"), graded("01", "baseline")
    copy = solution.device.copy_gbs
    rows = []
    for t in solution.tasks:
        b = baseline.task(t.name)
        mine, theirs = t.timing.sizes[0].roofline, b.timing.sizes[0].roofline
        ratio = mine.achieved_gbs / copy
        rows.append((t.name, mine.achieved_gbs, ratio, theirs.achieved_gbs, t.timing.speedup,
                     t.timing.min_speedup, b.timing.speedup))
    print(f"\ndevice copy bandwidth measured in this run: {copy:.0f} GB/s")
    print(f"{'task':<11} {'solution GB/s':>13} {'% of copy':>9} {'baseline GB/s':>13} {'speedup':>8} "
          f"{'needs':>6} {'baseline/baseline':>17}")
    for name, gbs, ratio, bgbs, speedup, need, bself in rows:
        print(f"{name:<11} {gbs:13.0f} {ratio:9.1%} {bgbs:13.0f} {speedup:8.2f} {need:6g} {bself:17.2f}")
    for name, gbs, ratio, *_ in rows:
        assert ratio >= BANDWIDTH_REQUIREMENT[name], \
            f"{name}: {ratio:.1%} of copy bandwidth, requirement {BANDWIDTH_REQUIREMENT[name]:.0%}"
    for name, *_, speedup, need, _b in rows:
        assert speedup >= 1.3 * need, f"{name}: the solution must clear min_speedup {need} by 30% (got {speedup:.2f})"


SOLUTION_FOLDERS = {"01": "01_foundations", "04": "04_sequence_models"}
TURNAROUND_TARGETS_S = {("01", "command line"): 3.0, ("01", "notebook"): 1.5, ("04", "command line"): 6.0}

_NOTEBOOK = r"""
import sys, time
from grader import grade
for profile in (False, False, False, True):
    began = time.perf_counter()
    grade(sys.argv[1], submission=sys.argv[2], profile=profile)
    print(f"{profile} {time.perf_counter() - began:.3f}", flush=True)
    time.sleep(3)        # a learner reads the report: the next grading's worker starts meanwhile
"""


def _turnaround(exercise: str, *args: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "grader.cli", "exercise", exercise, "--submission",
                           str(solutions_dir() / SOLUTION_FOLDERS[exercise]), "--json", *args],
                          capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr[-2000:]
    return seconds


def _in_a_notebook(exercise: str, env: dict[str, str]) -> tuple[float, float]:
    """(second grading without counters, grading with counters) in one Python process, as from a
    notebook's grading cell run again and again."""
    proc = subprocess.run([sys.executable, "-c", _NOTEBOOK, exercise, str(solutions_dir() / SOLUTION_FOLDERS[exercise])],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    times = [float(line.split()[1]) for line in proc.stdout.split("\n") if line.startswith(("True", "False"))]
    return min(times[1:3]), times[3]


def test_turnaround_with_warm_cache(tmp_path) -> None:
    """`grade exercise 01` and `04`, from the command line (where a fork server provides the worker)
    and from a notebook (where a worker is started ahead of the next grading), with and without
    counters. The first grading starts the fork server and fills the compile cache."""
    # Warm as on a learner's machine: compiled kernels cached, and Python's byte-compiled modules
    # cached too (an image that sets PYTHONDONTWRITEBYTECODE re-compiles PyTorch's sources at every
    # start, seconds that have nothing to do with grading).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(tmp_path / "pycache")
    for exercise in SOLUTION_FOLDERS:
        _turnaround(exercise, "--no-profile", env=env)
        _turnaround(exercise, env=env)
    time.sleep(3)                                      # the fork server is ready
    measured: dict[tuple[str, str], tuple[float, float]] = {}
    for exercise in SOLUTION_FOLDERS:
        plain = min(_turnaround(exercise, "--no-profile", env=env) for _ in range(2))
        measured[exercise, "command line"] = (plain, _turnaround(exercise, env=env))
        measured[exercise, "notebook"] = _in_a_notebook(exercise, env)
    print(f"\n{'grade exercise':<15}{'from':<14}{'no counters':>12}{'counters':>10}{'target':>8}")
    for (exercise, where), (plain, counters) in measured.items():
        target = TURNAROUND_TARGETS_S.get((exercise, where))
        print(f"{exercise:<15}{where:<14}{plain:11.2f}s{counters:9.2f}s{f'{target:g} s' if target else '':>8}")
    for key, target in TURNAROUND_TARGETS_S.items():
        assert measured[key][0] <= target, f"exercise {key[0]} from the {key[1]}: {measured[key][0]:.2f} s, target {target} s"


def test_ex04_solutions_against_pytorch(tmp_path) -> None:
    """Solution, naive baseline and PyTorch (softmax, SDPA) at the benchmark sizes, both causal settings."""
    ex = find("04")
    causal = tmp_path / "04_causal"
    shutil.copytree(ex.folder, causal, ignore=shutil.ignore_patterns("*.ipynb", "*.cu"))
    shutil.copytree(ex.folder / "baselines", causal / "baselines", dirs_exist_ok=True)
    toml = (causal / "exercise.toml").read_text()
    (causal / "exercise.toml").write_text(re.sub(r"(benchmark = \{[^}]*causal = )0", r"\g<1>1", toml))
    rows = []
    for folder, label in ((ex.folder, "causal=0"), (causal, "causal=1")):
        result = grade(str(folder), Options(submission=solutions_dir() / ex.slug, profile=False,
                                            tasks=("attention", "attention_bf16") if label == "causal=1"
                                            else ("softmax", "attention", "attention_bf16")))
        for t in result.tasks:
            tm = t.timing.sizes[0]
            rows.append((t.name, label if "attention" in t.name else "", tm.learner_s, tm.baseline_s, tm.vendor_s,
                         tm.speedup, tm.vendor_ratio, tm.roofline.achieved_tflops, tm.roofline.achieved_gbs))
    print(f"\n{'task':<15}{'':<10}{'solution':>11}{'baseline':>11}{'PyTorch':>11}{'vs base':>9}{'vs torch':>9}"
          f"{'TFLOP/s':>9}{'GB/s':>7}")
    for name, label, ts, tb, tv, sp, vr, tf, gbs in rows:
        print(f"{name:<15}{label:<10}{ts * 1e3:9.3f}ms{tb * 1e3:9.1f}ms{(tv or 0) * 1e3:9.3f}ms{sp:9.1f}"
              f"{vr or 0:9.2f}{tf:9.1f}{gbs:7.0f}")
    for name, label, ts, tb, tv, sp, vr, *_ in rows:
        if name == "attention_bf16":
            assert vr >= 0.5, f"{name} {label}: {vr:.2f} of SDPA's throughput, requirement 0.5"
            assert sp >= 3
        if name == "attention":
            assert sp >= 5
        if name == "softmax":
            assert vr >= 1.5


# --------------------------------------------------------------------------- exercise 04, a training step

# Targets of the training-step kernels: shares of the copy bandwidth measured in the same grading,
# and ratios to PyTorch's own kernels timed here without the grader's output copies.
COPY_SHARE_04 = {"layernorm_forward": 0.85, "layernorm_backward": 0.75, "cross_entropy": 0.85}
TORCH_RATIO_04 = {"layernorm_backward": 1.2, "cross_entropy": 2.0, "attention_backward": 1.0}
NAIVE_RATIO_04 = {"attention_backward": 10.0}
TRAINING_STEP = ("layernorm_forward", "layernorm_backward", "cross_entropy", "attention_backward")


def _torch_04(task: str, values: dict, l2: int) -> float:
    """Seconds of PyTorch's kernel for one task at one size, timed like the grader (CUDA events, L2
    flushed), outputs left where PyTorch puts them. attention_backward is SDPA's backward pass alone
    (the memory-efficient backend, PyTorch's fastest for fp32), its forward run beforehand."""
    import torch
    import torch.nn.functional as F
    if task == "attention_backward":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        shape = (1, values["bh"], values["seq"], values["dim"])
        q, k, v = (torch.randn(shape, device="cuda", requires_grad=True) for _ in range(3))
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=bool(values["causal"]))
            grad = torch.randn_like(out)
            return _cuda_median(lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True), l2)
    rows, cols = values["rows"], values["cols"]
    x = torch.randn(rows, cols, device="cuda")
    if task == "cross_entropy":
        targets = torch.randint(0, cols, (rows,), device="cuda")

        def loss_and_grad():
            logits = x.detach().requires_grad_()
            loss = F.cross_entropy(logits, targets, reduction="none")
            torch.autograd.grad(loss.mean(), logits)
        return _cuda_median(loss_and_grad, l2)
    gamma, beta = torch.randn(cols, device="cuda"), torch.randn(cols, device="cuda")
    if task == "layernorm_forward":
        return _cuda_median(lambda: torch.native_layer_norm(x, [cols], gamma, beta, 1e-5), l2)
    _, mean, rstd = torch.native_layer_norm(x, [cols], gamma, beta, 1e-5)
    dy = torch.randn_like(x)
    return _cuda_median(lambda: torch.ops.aten.native_layer_norm_backward(
        dy, x, [cols], mean, rstd, gamma, beta, [True, True, True]), l2)


def test_ex04_training_step_against_bandwidth_and_pytorch() -> None:
    """LayerNorm forward and backward, cross-entropy and attention's backward pass at every benchmark
    size: the solution's time, GB/s and share of copy, TFLOP/s, speedup over the naive baseline, the
    grader's vendor ratio (PyTorch with its output copies; attention_backward's includes SDPA's forward)
    and the ratio to PyTorch's kernel alone. The targets: LayerNorm forward and cross-entropy at 85% of
    copy, LayerNorm backward at 75%; cross-entropy 2x F.cross_entropy forward and backward, LayerNorm
    backward 1.2x PyTorch's; attention_backward 1.0x SDPA's backward alone and 10x its naive baseline
    at every size, causal and not."""
    import torch
    from test_gpu_grading import graded      # the solutions' grading, shared with the grading tests
    result = graded("04", "solution")
    copy = result.device.copy_gbs
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print(f"\ndevice copy bandwidth measured in this run: {copy:.0f} GB/s")
    print(f"{'task':<19} {'size':<38} {'time':>10} {'naive':>10} {'GB/s':>6} {'% copy':>7} {'TFLOP/s':>8} "
          f"{'vs naive':>8} {'grader':>7} {'vs torch':>8}")
    short = []
    for name in TRAINING_STEP:
        t = result.task(name)
        assert t.status == "passed", f"{name}: {t.summary}"
        if t.timing.speedup < 1.3 * t.timing.min_speedup:
            short.append(f"{name}: {t.timing.speedup:.1f}x the naive baseline, under 1.3 x min_speedup "
                         f"{t.timing.min_speedup:g}")
        for m in t.timing.sizes:
            theirs = _torch_04(name, m.case, l2)
            gbs = m.bytes / m.learner_s / 1e9
            ratio = theirs / m.learner_s
            print(f"{name:<19} {m.label[:38]:<38} {m.learner_s * 1e6:8.1f}us {m.baseline_s * 1e3:8.2f}ms {gbs:6.0f} "
                  f"{gbs / copy:7.1%} {m.flops / m.learner_s / 1e12:8.2f} {m.speedup:8.1f} {m.vendor_ratio or 0:7.2f} "
                  f"{ratio:8.2f}")
            if name in COPY_SHARE_04 and gbs < COPY_SHARE_04[name] * copy:
                short.append(f"{name} at {m.label}: {gbs / copy:.0%} of copy (needs {COPY_SHARE_04[name]:.0%})")
            if name in TORCH_RATIO_04 and ratio < TORCH_RATIO_04[name]:
                short.append(f"{name} at {m.label}: {ratio:.2f}x PyTorch (needs {TORCH_RATIO_04[name]}x)")
            if name in NAIVE_RATIO_04 and m.speedup < NAIVE_RATIO_04[name]:
                short.append(f"{name} at {m.label}: {m.speedup:.1f}x the naive baseline (needs {NAIVE_RATIO_04[name]}x)")
        torch.cuda.empty_cache()
    assert not short, "below the targets: " + "; ".join(short)


# --------------------------------------------------------------------------- exercise 03

COPY_FRACTION_03 = {"sgd_momentum": 0.90, "adamw": 0.90, "adamw_multi": 0.85, "clip_grad_norm": 0.85}


def _cuda_median(fn, ceiling_bytes: int, reps: int = 15) -> float:
    """Median seconds of fn between CUDA events, the L2 flushed (by reading) before each call, as
    the grader times: PyTorch's Python overhead before its first launch counts, as it does for a user."""
    import torch
    flush = torch.ones(ceiling_bytes // 2, dtype=torch.int32, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps + 2):
        flush.sum()
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    times = sorted(times[2:])
    return times[len(times) // 2]


def _torch_optimizer_steps(shapes: list[tuple[int, ...]], l2: int) -> dict[str, float]:
    """torch.optim.AdamW(fused=True) and (foreach=True): seconds of one step() over tensors of these shapes."""
    import torch
    out = {}
    for kind in ("fused", "foreach"):
        params = [torch.randn(s, device="cuda", requires_grad=True) for s in shapes]
        for p in params:
            p.grad = torch.randn_like(p)
        optimizer = torch.optim.AdamW(params, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, **{kind: True})
        optimizer.step()                  # creates the state outside the timing
        out[kind] = _cuda_median(optimizer.step, l2)
        del optimizer, params
        torch.cuda.empty_cache()
    return out


def test_ex03_solutions_against_bandwidth_and_pytorch() -> None:
    """Every solution against the copy bandwidth measured in the same grading, its naive baseline,
    PyTorch's fused kernel timed by the grader, and torch.optim's own step() (fused and foreach)."""
    import torch
    from test_gpu_grading import graded      # the solutions' grading, shared with the grading tests
    ex = find("03")
    result = graded("03", "solution")
    copy = result.device.copy_gbs
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print(f"\ndevice copy bandwidth measured in this run: {copy:.0f} GB/s")
    print(f"{'task':<15} {'size':<22} {'time':>9} {'GB/s':>6} {'% copy':>7} {'vs naive':>8} {'vs torch kernel':>15}")
    rows = {}
    for t in result.tasks:
        assert t.status == "passed", f"{t.name}: {t.summary}"
        for m in t.timing.sizes:
            gbs = m.bytes / m.learner_s / 1e9
            rows[(t.name, m.label)] = (m, gbs)
            print(f"{t.name:<15} {m.label[:22]:<22} {m.learner_s * 1e6:7.1f}us {gbs:6.0f} {gbs / copy:7.1%} "
                  f"{m.speedup:8.1f} {m.vendor_ratio or 0:15.2f}")
        assert t.timing.speedup >= 1.3 * t.timing.min_speedup, \
            f"{t.name}: the solution must clear min_speedup {t.timing.min_speedup} by 30% (got {t.timing.speedup:.2f})"

    task = ex.task("adamw_multi")
    gpt2, tiny = (list(b.lists["params"]) for b in task.benchmarks)
    flat = [(ex.task("adamw").benchmarks[0].values["n"],)]
    print(f"\n{'torch.optim.AdamW step()':<32} {'fused':>10} {'foreach':>10} {'solution':>10} {'vs fused':>9}")
    comparisons = {}
    for label, shapes, mine in (("flat tensor, 2^26", flat, result.task("adamw").timing.sizes[0]),
                                ("GPT-2 small, 148 tensors", gpt2, result.task("adamw_multi").timing.sizes[0]),
                                ("500 tiny tensors", tiny, result.task("adamw_multi").timing.sizes[1])):
        torch_times = _torch_optimizer_steps(shapes, l2)
        comparisons[label] = torch_times["fused"] / mine.learner_s
        print(f"{label:<32} {torch_times['fused'] * 1e6:8.1f}us {torch_times['foreach'] * 1e6:8.1f}us "
              f"{mine.learner_s * 1e6:8.1f}us {comparisons[label]:8.2f}x")
    parameter = torch.empty(ex.task("clip_grad_norm").benchmarks[0].values["n"], device="cuda", requires_grad=True)
    parameter.grad = torch.randn_like(parameter)       # clip_grad_norm_ clips the gradients of parameters
    clip_torch = _cuda_median(lambda: torch.nn.utils.clip_grad_norm_([parameter], 1.0), l2)
    clip_mine = result.task("clip_grad_norm").timing.sizes[0].learner_s
    print(f"{'torch.nn.utils.clip_grad_norm_':<32} {clip_torch * 1e6:8.1f}us {'':>10} {clip_mine * 1e6:8.1f}us "
          f"{clip_torch / clip_mine:8.2f}x")

    for (name, label), (m, gbs) in rows.items():
        if name == "adamw_multi" and "500" in label:
            continue    # launches, not bandwidth, count there
        assert gbs >= COPY_FRACTION_03[name] * copy, f"{name} at {label}: {gbs / copy:.1%} of copy bandwidth"
    assert comparisons["flat tensor, 2^26"] >= 1.3, "adamw: at least 1.3x torch.optim.AdamW(fused=True)"
    assert comparisons["GPT-2 small, 148 tensors"] >= 1.3, "adamw_multi: at least 1.3x torch's fused AdamW"
    assert clip_torch / clip_mine >= 1.5, "clip_grad_norm: at least 1.5x torch.nn.utils.clip_grad_norm_"


# --------------------------------------------------------------------------- exercise 02

# The solutions' throughput against PyTorch's own kernels (cuBLAS, TF32 off), geometric mean over
# the benchmark sizes. gemm_bf16 has no bar here: its solution is being written on wgmma.
CUBLAS_RATIO_02 = {"sgemm": 0.85, "linear_forward": 1.0, "linear_backward": 0.8}


def _torch_02(task: str, values: dict, l2: int) -> float:
    """Seconds of PyTorch's version of one task at one size, as a model runs it, timed like the
    grader (CUDA events, L2 flushed); outputs that can be given go to preallocated buffers."""
    import torch
    import torch.nn.functional as F
    M, N, K = values["M"], values["N"], values["K"]

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, device="cuda", dtype=torch.float32).to(dtype)
    if task == "sgemm":
        A, B, C = randn(M, K), randn(K, N), torch.empty(M, N, device="cuda")
        return _cuda_median(lambda: torch.mm(A, B, out=C), l2)
    if task == "gemm_bf16":
        A, B = randn(M, K, dtype=torch.bfloat16), randn(N, K, dtype=torch.bfloat16)
        C = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        return _cuda_median(lambda: torch.mm(A, B.t(), out=C), l2)
    X, W, b = randn(M, K), randn(N, K), randn(N)
    if task == "linear_forward":
        return _cuda_median(lambda: F.gelu(F.linear(X, W, b)), l2)
    Z, dY = randn(M, N), randn(M, N)
    dX, dW, db = torch.empty(M, K, device="cuda"), torch.empty(N, K, device="cuda"), torch.empty(N, device="cuda")

    def backward():
        dZ = torch.ops.aten.gelu_backward(dY, Z)
        torch.mm(dZ, W, out=dX)
        torch.mm(dZ.t(), X, out=dW)
        torch.sum(dZ, dim=0, out=db)
    return _cuda_median(backward, l2)


def test_ex02_solutions_against_cublas() -> None:
    """Every GEMM solution at every benchmark size: TFLOP/s of the solution, of its naive baseline
    and of PyTorch (cuBLAS with TF32 off, timed here without the grader's output copy), and the
    ratios. The fp32 solutions must reach their share of cuBLAS, and clear their speed bar by 30%."""
    import torch

    # The solutions' grading, shared with the grading tests.
    from test_gpu_grading import graded
    torch.backends.cuda.matmul.allow_tf32 = False
    assert torch.get_float32_matmul_precision() == "highest"
    result = graded("02", "solution")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print(f"\n{'task':<16} {'size (M x N x K)':<18} {'solution':>9} {'baseline':>9} {'PyTorch':>9} "
          f"{'vs naive':>8} {'vs torch':>8} {'grader':>7}  (TFLOP/s; 'grader' is its vendor ratio)")
    ratios: dict[str, list[float]] = {}
    for t in result.tasks:
        assert t.status == "passed", f"{t.name}: {t.summary}"
        for m in t.timing.sizes:
            theirs = _torch_02(t.name, m.case, l2)
            ratios.setdefault(t.name, []).append(theirs / m.learner_s)
            size = f"{m.case['M']} x {m.case['N']} x {m.case['K']}"
            print(f"{t.name:<16} {size:<18} {m.flops / m.learner_s / 1e12:9.1f} {m.flops / m.baseline_s / 1e12:9.2f} "
                  f"{m.flops / theirs / 1e12:9.1f} {m.speedup:8.1f} {theirs / m.learner_s:8.2f} "
                  f"{m.vendor_ratio or 0:7.2f}")
        torch.cuda.empty_cache()
    print(f"\n{'task':<16} {'vs naive':>9} {'needs':>6} {'vs torch':>9} {'needs':>6}   (geometric means)")
    for t in result.tasks:
        mean = math.prod(ratios[t.name]) ** (1 / len(ratios[t.name]))
        print(f"{t.name:<16} {t.timing.speedup:9.1f} {t.timing.min_speedup:6g} {mean:9.2f} "
              f"{CUBLAS_RATIO_02.get(t.name, 0):6g}")
    for t in result.tasks:
        assert t.timing.speedup >= 1.3 * t.timing.min_speedup, \
            f"{t.name}: the solution must clear min_speedup {t.timing.min_speedup} by 30% (got {t.timing.speedup:.2f})"
        if t.name in CUBLAS_RATIO_02:
            mean = math.prod(ratios[t.name]) ** (1 / len(ratios[t.name]))
            assert mean >= CUBLAS_RATIO_02[t.name], f"{t.name}: {mean:.2f} of PyTorch's throughput, " \
                                                    f"requirement {CUBLAS_RATIO_02[t.name]}"


def test_ex02_naive_kernels_speed() -> None:
    """The naive kernels' TFLOP/s at every size: the speed bars were set from estimates of these
    (about 3.5 TFLOP/s for sgemm, 1.5 for the K-contiguous products) and are to be set again from
    what this prints."""
    from test_gpu_grading import graded
    result = graded("02", "baseline")
    print()
    for t in result.tasks:
        for m in t.timing.sizes:
            print(f"{t.name:<16} {m.label:<30} naive {m.flops / m.baseline_s / 1e12:6.2f} TFLOP/s")
        assert t.correct and not t.timing.passed


# What exercise 05's solutions must reach (fractions of the copy bandwidth measured in the same
# grading, and ratios to PyTorch's kernels timed by the grader).
QUANTIZER_COPY_SHARE = 0.85
GEMV_COPY_SHARE = 0.80
# At 16 tokens and N = 8192, a pass that only reads W in the order the tensor-core GEMV reads it
# barely reaches 80% of copy on the H200, and the GEMV stays below it (the README's table of
# exercise 05 and the paragraph under it): 70% there.
GEMV_COPY_SHARE_AT = {(16, 8192): 0.70}
GEMV_VS_BF16 = 1.6
W8A8_VS_INT_MM = 1.0


def gemv_copy_share(case: dict) -> float:
    """The share of copy the GEMV must reach at a benchmark size (M tokens, N rows of W)."""
    return GEMV_COPY_SHARE_AT.get((int(case["M"]), int(case["N"])), GEMV_COPY_SHARE)


def test_ex05_solutions_against_bandwidth_and_pytorch() -> None:
    """Every solution at every size: time, GB/s and share of the copy bandwidth, TOPS, speedup over
    its naive baseline, ratio to PyTorch (the torch quantizer, torch._int_mm with scales and bias, a
    bf16 weight). The quantizers must reach 85% of copy at every size, the GEMV 80% (70% at 16
    tokens and N = 8192) and 1.6x the bf16 weight at every size, the W8A8 layer torch._int_mm's speed
    at 8192^3."""
    from test_gpu_grading import graded      # the solutions' grading, shared with the grading tests
    result = graded("05", "solution")
    copy = result.device.copy_gbs
    print(f"\ndevice copy bandwidth measured in this run: {copy:.0f} GB/s")
    print(f"{'task':<14} {'size':<28} {'time':>10} {'GB/s':>6} {'% copy':>7} {'TOPS':>6} {'vs naive':>8} {'vs torch':>8}")
    short = []
    for t in result.tasks:
        assert t.status == "passed", f"{t.name}: {t.summary}"
        assert t.timing.speedup >= 1.3 * t.timing.min_speedup, \
            f"{t.name}: the solution must clear min_speedup {t.timing.min_speedup} by 30% (got {t.timing.speedup:.2f})"
        for m in t.timing.sizes:
            gbs = m.bytes / m.learner_s / 1e9
            print(f"{t.name:<14} {m.label[:28]:<28} {m.learner_s * 1e6:8.1f}us {gbs:6.0f} {gbs / copy:7.1%} "
                  f"{m.flops / m.learner_s / 1e12:6.1f} {m.speedup:8.1f} {m.vendor_ratio or 0:8.2f}")
            if t.name.startswith("quantize") and gbs < QUANTIZER_COPY_SHARE * copy:
                short.append(f"{t.name} at {m.label}: {gbs / copy:.0%} of copy (needs {QUANTIZER_COPY_SHARE:.0%})")
            if t.name == "gemv_fp8" and gbs < gemv_copy_share(m.case) * copy:
                short.append(f"gemv_fp8 at {m.label}: {gbs / copy:.0%} of copy (needs {gemv_copy_share(m.case):.0%})")
            if t.name == "gemv_fp8" and (m.vendor_ratio or 0) < GEMV_VS_BF16:
                short.append(f"gemv_fp8 at {m.label}: {m.vendor_ratio or 0:.2f}x the bf16 weight (needs {GEMV_VS_BF16}x)")
            if t.name == "gemm_w8a8" and m.case["M"] == m.case["N"] == m.case["K"] == 8192 and \
                    (m.vendor_ratio or 0) < W8A8_VS_INT_MM:
                short.append(f"gemm_w8a8 at 8192^3: {m.vendor_ratio or 0:.2f}x torch._int_mm (needs {W8A8_VS_INT_MM}x)")
    assert not short, "below the targets: " + "; ".join(short)
