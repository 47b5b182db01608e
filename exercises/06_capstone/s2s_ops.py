"""Your kernels as PyTorch operators: ``torch.ops.s2s.*``.

Each kernel of exercises 02 to 05 that a Transformer needs becomes a custom operator
(``torch.library.custom_op``). Forward and backward kernels are paired for autograd
(``register_autograd``), and every operator says what shapes and dtypes it returns without running
(``register_fake``), so ``torch.compile`` can trace a model built on them. In your own code:

    import torch, s2s_ops
    s2s_ops.load_from("..")              # compile your kernels (exercises/NN_*/*.cu) and use them
    y, z = torch.ops.s2s.linear(x, w, b, True)           # gelu(x w^T + b), on your linear_forward
    y.sum().backward()                                   # ... and your linear_backward

The operators (float32 on the GPU unless said; 2-D means rows x columns, contiguous):

    s2s::linear(x[M,K], w[N,K], b[N], gelu) -> (y, z)        linear_forward; z = x w^T + b, y = gelu(z) or z
    s2s::layernorm(x[R,C], gamma[C], beta[C]) -> (y, mean, rstd)               layernorm_forward
    s2s::attention(q, k, v [BH,T,D], causal) -> o            attention; D is 64 or 128
    s2s::cross_entropy(logits[R,C], targets[R] int32) -> (loss[R], dlogits)    cross_entropy
    s2s::adamw_multi(params, grads, exp_avgs, exp_avg_sqs, lr, beta1, beta2, eps, weight_decay, step)
    s2s::quantize_fp8(x[R,C] bf16) -> (q e4m3, scale[R])     quantize_fp8
    s2s::gemv_fp8(x[M,K] bf16, w[N,K] e4m3, scale[N]) -> y[M,N] bf16            gemv_fp8, 16 rows at a time

and the backward operators autograd calls: s2s::linear_backward, s2s::layernorm_backward,
s2s::attention_backward. Outputs the backward pass only reads (z, mean, rstd, dlogits) are not
differentiable.

The operators call a *backend*: an object called as ``backend(kernel, *arguments)`` with the
arguments of the kernel's C function in their order, tensors where it takes pointers. On the GPU
that is :class:`Kernels`, your compiled libraries through ctypes; anything with the same calling
convention can stand in (the tests use the exercises' float64 references to check the operators'
wiring on the CPU).
"""
from __future__ import annotations

import ctypes
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

_P, _I, _L, _F = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float

# Each kernel's exercise, source file and C arguments, as its stub declares them.
SIGNATURES: dict[str, tuple[str, str, list[Any]]] = {
    "linear_forward": ("02", "linear_forward.cu", [_P] * 5 + [_I] * 4),
    "linear_backward": ("02", "linear_backward.cu", [_P] * 7 + [_I] * 4),
    "adamw_multi": ("03", "adamw_multi.cu", [_P] * 5 + [_I] + [_F] * 5 + [_I]),
    "layernorm_forward": ("04", "layernorm_forward.cu", [_P] * 6 + [_I] * 2),
    "layernorm_backward": ("04", "layernorm_backward.cu", [_P] * 8 + [_I] * 2),
    "attention": ("04", "attention.cu", [_P] * 4 + [_I] * 4),
    "attention_backward": ("04", "attention_backward.cu", [_P] * 8 + [_I] * 4),
    "cross_entropy": ("04", "cross_entropy.cu", [_P] * 4 + [_I] * 2),
    "quantize_fp8": ("05", "quantize_fp8.cu", [_P] * 3 + [_I] * 2),
    "gemv_fp8": ("05", "gemv_fp8.cu", [_P] * 4 + [_I] * 3),
}
GEMV_ROWS = 16            # gemv_fp8 takes at most 16 rows of x; more are done 16 at a time


class KernelFailure(Exception):
    """A kernel failed: a launch error, a CUDA error."""


@dataclass
class TensorList:
    """A list argument (adamw_multi's tensors): the kernel gets the device array of their pointers."""

    tensors: list[torch.Tensor]
    table: torch.Tensor | None = None


Backend = Callable[..., None]


class Kernels:
    """Your compiled libraries, called through ctypes. Your kernels launch on the legacy default
    stream (stream 0), which is PyTorch's current stream unless code switches to another one: the
    operators refuse to run under another stream (torch.cuda.stream(...), CUDA Graph capture)."""

    def __init__(self, libraries: dict[str, str]):
        self.functions: dict[str, Any] = {}
        self._last_error: dict[str, Any] = {}
        self.failure: tuple[str, int] | None = None     # the first launch that failed: kernel, CUDA error
        for name, path in libraries.items():
            if name not in SIGNATURES:
                continue
            lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = None, SIGNATURES[name][2]
            self.functions[name] = fn
            last = getattr(lib, "s2s_last_error", None)
            if last is not None:
                last.restype, last.argtypes = ctypes.c_int, []
            self._last_error[name] = last
        self._tables: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}

    def __call__(self, name: str, *values: Any) -> None:
        if name not in self.functions:
            raise KernelFailure(f"{name} is not loaded: s2s_ops.load() was not given its library")
        if torch.cuda.current_stream().cuda_stream != 0:
            raise KernelFailure(f"{name} was called under a CUDA stream other than the default one (or during "
                                "CUDA Graph capture): your kernels launch on the default stream")
        self.functions[name](*(self._pointer(name, v) for v in values))
        # A launch error is kept per host thread, and autograd runs the backward operators on a
        # thread of its own: read it here, in the thread that launched, and report it at check().
        last = self._last_error.get(name)
        code = last() if last is not None else 0
        if code and self.failure is None:
            self.failure = (name, code)

    def _pointer(self, name: str, value: Any) -> Any:
        if isinstance(value, TensorList):
            return self._table(value.tensors).data_ptr()
        if isinstance(value, torch.Tensor):
            if not value.is_cuda:
                raise KernelFailure(f"{name} was given a tensor on {value.device}: your kernels take GPU tensors")
            return value.data_ptr()
        return value

    def _table(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        """The device array of the tensors' addresses; kept, since a model's tensors stay put (and
        the caching allocator hands its gradients the same addresses step after step)."""
        key = tuple(t.data_ptr() for t in tensors)
        if key not in self._tables:
            if len(self._tables) > 64:
                self._tables.clear()
            host = torch.tensor(key, dtype=torch.int64).pin_memory()
            self._tables[key] = (host, host.to(tensors[0].device, non_blocking=True))
        return self._tables[key][1]

    def check(self, where: str) -> None:
        """Wait for the GPU; raise on any error your kernels left."""
        try:
            torch.cuda.synchronize()
        except RuntimeError as exc:
            raise KernelFailure(f"a CUDA error during {where}: {exc}") from None
        if self.failure is not None:
            (name, code), self.failure = self.failure, None
            raise KernelFailure(f"{name}: a kernel launch failed with CUDA error {code} during {where} (check "
                                "the launch configuration)")


class Timed:
    """A backend that records how long each kernel took (CUDA events around each call, or the
    wall clock on the CPU), how often it was called and with which sizes."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.calls: dict[str, int] = defaultdict(int)
        self.seconds: dict[str, float] = defaultdict(float)
        self.sizes: dict[str, list[tuple[int, ...]]] = defaultdict(list)
        self._pending: list[tuple[str, Any, Any]] = []

    def __call__(self, name: str, *values: Any) -> None:
        self.timed(name, lambda: self.backend(name, *values))
        self.sizes[name].append(tuple(v for v in values if isinstance(v, int) and not isinstance(v, bool)))

    def timed(self, name: str, fn: Callable[[], Any]) -> Any:
        self.calls[name] += 1
        if not torch.cuda.is_available():
            began = time.perf_counter()
            out = fn()
            self.seconds[name] += time.perf_counter() - began
            return out
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn()
        end.record()
        self._pending.append((name, start, end))
        return out

    def settle(self) -> None:
        if self._pending:
            torch.cuda.synchronize()
        for name, start, end in self._pending:
            self.seconds[name] += start.elapsed_time(end) / 1e3
        self._pending.clear()

    def reset(self) -> None:
        self.settle()
        self.calls.clear(), self.seconds.clear(), self.sizes.clear()


_backend: list[Backend | None] = [None]


def use(backend: Backend | None) -> Backend | None:
    """Make ``backend`` the one every operator calls; returns the previous one."""
    previous, _backend[0] = _backend[0], backend
    return previous


def backend() -> Backend:
    if _backend[0] is None:
        raise RuntimeError("no kernels are loaded: call s2s_ops.load(libraries) or s2s_ops.load_from(folder) first")
    return _backend[0]


def load(libraries: dict[str, str]) -> Kernels:
    """Use the compiled libraries (kernel name -> path of its .so) for the operators."""
    kernels = Kernels(libraries)
    use(kernels)
    return kernels


def load_from(submission: str | Path, names: Sequence[str] | None = None) -> Kernels:
    """Compile your kernels from the exercise folders under ``submission`` (as `grade` compiles
    them, in its build cache) and use them. Compiling is all it does: `grade exercise` checks them."""
    import os

    from grader import spec as specmod
    from grader.build import DEFAULT_ARCH, Toolchain, compile_cuda
    from grader.device import probe

    toolchain, gpu = Toolchain.find(), probe().gpu
    arch = os.environ.get("S2S_ARCH") or (gpu.arch if gpu else DEFAULT_ARCH)
    libraries = {}
    for name in names or SIGNATURES:
        exercise = specmod.find(SIGNATURES[name][0])
        task = exercise.task(name)
        built = compile_cuda(Path(submission) / exercise.folder.name / task.source, task.build.target(arch), toolchain)
        if not built.ok:
            raise KernelFailure(f"{task.source} does not compile: {built.error or built.log[-2000:]}")
        libraries[name] = built.library
    return load(libraries)


def _empty(shape: Sequence[int], like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    return torch.empty(tuple(shape), dtype=dtype or like.dtype, device=like.device)


# ---------------------------------------------------------------------------- linear (02)

@torch.library.custom_op("s2s::linear", mutates_args=())
def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, gelu: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """y = gelu(x weight^T + bias) (y = z without gelu) and z = x weight^T + bias: linear_forward."""
    x, weight, bias = x.contiguous(), weight.contiguous(), bias.contiguous()
    (M, K), N = x.shape, weight.shape[0]
    y, z = _empty((M, N), x), _empty((M, N), x)
    backend()("linear_forward", x, weight, bias, z, y, M, N, K, int(gelu))
    return y, z


@linear.register_fake
def _(x, weight, bias, gelu):
    return x.new_empty(x.shape[0], weight.shape[0]), x.new_empty(x.shape[0], weight.shape[0])


@torch.library.custom_op("s2s::linear_backward", mutates_args=())
def linear_backward(x: torch.Tensor, weight: torch.Tensor, z: torch.Tensor, dy: torch.Tensor,
                    gelu: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dx, dweight, dbias from dy = dL/dy and the forward's z: linear_backward."""
    x, weight, z, dy = x.contiguous(), weight.contiguous(), z.contiguous(), dy.contiguous()
    (M, K), N = x.shape, weight.shape[0]
    dx, dw, db = _empty((M, K), x), _empty((N, K), x), _empty((N,), x)
    backend()("linear_backward", x, weight, z, dy, dx, dw, db, M, N, K, int(gelu))
    return dx, dw, db


@linear_backward.register_fake
def _(x, weight, z, dy, gelu):
    return torch.empty_like(x), torch.empty_like(weight), weight.new_empty(weight.shape[0])


def _linear_setup(ctx, inputs, output):
    x, weight, _bias, gelu = inputs
    _y, z = output
    ctx.save_for_backward(x, weight, z)
    ctx.gelu = gelu
    ctx.mark_non_differentiable(z)


def _linear_grad(ctx, dy, _dz):
    x, weight, z = ctx.saved_tensors
    dx, dw, db = torch.ops.s2s.linear_backward(x, weight, z, dy, ctx.gelu)
    return dx, dw, db, None


linear.register_autograd(_linear_grad, setup_context=_linear_setup)


# ---------------------------------------------------------------------------- LayerNorm (04)

@torch.library.custom_op("s2s::layernorm", mutates_args=())
def layernorm(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LayerNorm over the last dimension (eps 1e-5) and the statistics it saves: layernorm_forward."""
    x, gamma, beta = x.contiguous(), gamma.contiguous(), beta.contiguous()
    rows, cols = x.shape
    y, mean, rstd = _empty((rows, cols), x), _empty((rows,), x), _empty((rows,), x)
    backend()("layernorm_forward", x, gamma, beta, y, mean, rstd, rows, cols)
    return y, mean, rstd


@layernorm.register_fake
def _(x, gamma, beta):
    return torch.empty_like(x), x.new_empty(x.shape[0]), x.new_empty(x.shape[0])


@torch.library.custom_op("s2s::layernorm_backward", mutates_args=())
def layernorm_backward(x: torch.Tensor, gamma: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                       dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dx, dgamma, dbeta: layernorm_backward."""
    x, gamma, mean, rstd, dy = (t.contiguous() for t in (x, gamma, mean, rstd, dy))
    rows, cols = x.shape
    dx, dgamma, dbeta = _empty((rows, cols), x), _empty((cols,), x), _empty((cols,), x)
    backend()("layernorm_backward", x, gamma, mean, rstd, dy, dx, dgamma, dbeta, rows, cols)
    return dx, dgamma, dbeta


@layernorm_backward.register_fake
def _(x, gamma, mean, rstd, dy):
    return torch.empty_like(x), torch.empty_like(gamma), torch.empty_like(gamma)


def _layernorm_setup(ctx, inputs, output):
    x, gamma, _beta = inputs
    _y, mean, rstd = output
    ctx.save_for_backward(x, gamma, mean, rstd)
    ctx.mark_non_differentiable(mean, rstd)


def _layernorm_grad(ctx, dy, _dmean, _drstd):
    x, gamma, mean, rstd = ctx.saved_tensors
    return torch.ops.s2s.layernorm_backward(x, gamma, mean, rstd, dy)


layernorm.register_autograd(_layernorm_grad, setup_context=_layernorm_setup)


# ---------------------------------------------------------------------------- attention (04)

def _attention_shape(q: torch.Tensor) -> tuple[int, int, int]:
    bh, seq, dim = q.shape
    if dim not in (64, 128):
        raise ValueError(f"attention takes heads of 64 or 128 dimensions, not {dim}")
    return bh, seq, dim


@torch.library.custom_op("s2s::attention", mutates_args=())
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """softmax(q k^T / sqrt(dim)) v for each of the bh heads, [bh, seq, dim]: attention."""
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    bh, seq, dim = _attention_shape(q)
    o = torch.empty_like(q)
    backend()("attention", q, k, v, o, bh, seq, dim, int(causal))
    return o


@attention.register_fake
def _(q, k, v, causal):
    return torch.empty_like(q)


@torch.library.custom_op("s2s::attention_backward", mutates_args=())
def attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, do: torch.Tensor,
                       causal: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv from do = dL/do and the forward's output o: attention_backward."""
    q, k, v, o, do = (t.contiguous() for t in (q, k, v, o, do))
    bh, seq, dim = _attention_shape(q)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    backend()("attention_backward", q, k, v, o, do, dq, dk, dv, bh, seq, dim, int(causal))
    return dq, dk, dv


@attention_backward.register_fake
def _(q, k, v, o, do, causal):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _attention_setup(ctx, inputs, output):
    q, k, v, causal = inputs
    ctx.save_for_backward(q, k, v, output)
    ctx.causal = causal


def _attention_grad(ctx, do):
    q, k, v, o = ctx.saved_tensors
    dq, dk, dv = torch.ops.s2s.attention_backward(q, k, v, o, do, ctx.causal)
    return dq, dk, dv, None


attention.register_autograd(_attention_grad, setup_context=_attention_setup)


# ---------------------------------------------------------------------------- cross-entropy (04)

@torch.library.custom_op("s2s::cross_entropy", mutates_args=())
def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's loss, and the gradient of their mean (the kernel computes both): cross_entropy."""
    logits, targets = logits.contiguous(), targets.to(torch.int32).contiguous()   # the kernel reads int32
    rows, cols = logits.shape
    loss, dlogits = _empty((rows,), logits), torch.empty_like(logits)
    backend()("cross_entropy", logits, targets, loss, dlogits, rows, cols)
    return loss, dlogits


@cross_entropy.register_fake
def _(logits, targets):
    return logits.new_empty(logits.shape[0]), torch.empty_like(logits)


def _cross_entropy_setup(ctx, inputs, output):
    _loss, dlogits = output
    ctx.save_for_backward(dlogits)
    ctx.mark_non_differentiable(dlogits)


def _cross_entropy_grad(ctx, dloss, _ddlogits):
    (dlogits,) = ctx.saved_tensors
    # dlogits is d(mean loss)/d logits: row r's part, d loss[r] / d logits[r], divided by rows. The
    # loss of row r arrives with weight dloss[r] (1 / rows for the mean: then this multiplies by 1).
    return dlogits * (dloss * dlogits.shape[0]).unsqueeze(1), None


cross_entropy.register_autograd(_cross_entropy_grad, setup_context=_cross_entropy_setup)


# ---------------------------------------------------------------------------- AdamW (03)

@torch.library.custom_op("s2s::adamw_multi", mutates_args=("params", "exp_avgs", "exp_avg_sqs"))
def adamw_multi(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
                exp_avg_sqs: list[torch.Tensor], lr: float, beta1: float, beta2: float, eps: float,
                weight_decay: float, step: int) -> None:
    """One AdamW step of every tensor of ``params``, in place, in one launch: adamw_multi."""
    if not params:
        return
    backend()("adamw_multi", TensorList(list(params)), TensorList(list(grads)), TensorList(list(exp_avgs)),
              TensorList(list(exp_avg_sqs)), _sizes(params), len(params), lr, beta1, beta2, eps, weight_decay, step)


@adamw_multi.register_fake
def _(params, grads, exp_avgs, exp_avg_sqs, lr, beta1, beta2, eps, weight_decay, step):
    return None


_SIZES: dict[tuple[Any, ...], tuple[torch.Tensor, torch.Tensor]] = {}


def _sizes(params: Sequence[torch.Tensor]) -> torch.Tensor:
    """The tensors' sizes as a device array (int64), made once per list of sizes: a copy from
    pinned memory, which does not wait for the GPU as a copy from pageable memory would."""
    key = (params[0].device, *(p.numel() for p in params))
    if key not in _SIZES:
        host = torch.tensor(key[1:], dtype=torch.int64)
        host = host.pin_memory() if params[0].device.type == "cuda" else host
        _SIZES[key] = (host, host.to(params[0].device, non_blocking=True))
    return _SIZES[key][1]


class AdamW(torch.optim.Optimizer):
    """torch.optim.AdamW's update on your adamw_multi: one launch per parameter group."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102 - torch.optim.Optimizer's
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            for p in params:
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
            step = self.state[params[0]]["step"]
            torch.ops.s2s.adamw_multi(params, [p.grad for p in params], [self.state[p]["exp_avg"] for p in params],
                                      [self.state[p]["exp_avg_sq"] for p in params], group["lr"], group["betas"][0],
                                      group["betas"][1], group["eps"], group["weight_decay"], step)


# ---------------------------------------------------------------------------- FP8 serving (05)

@torch.library.custom_op("s2s::quantize_fp8", mutates_args=())
def quantize_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """e4m3 codes and a float32 scale per row of the bf16 matrix x: quantize_fp8."""
    x = x.contiguous()
    rows, cols = x.shape
    q, scale = _empty((rows, cols), x, torch.float8_e4m3fn), _empty((rows,), x, torch.float32)
    backend()("quantize_fp8", x, q, scale, rows, cols)
    return q, scale


@quantize_fp8.register_fake
def _(x):
    return x.new_empty(x.shape, dtype=torch.float8_e4m3fn), x.new_empty(x.shape[0], dtype=torch.float32)


@torch.library.custom_op("s2s::gemv_fp8", mutates_args=())
def gemv_fp8(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """y = x (weight * scale)^T in bf16 for a few rows of x (16 at a time): gemv_fp8."""
    x, weight, scale = x.contiguous(), weight.contiguous(), scale.contiguous()
    (M, K), N = x.shape, weight.shape[0]
    y = _empty((M, N), x, torch.bfloat16)
    for first in range(0, M, GEMV_ROWS):
        rows = min(GEMV_ROWS, M - first)
        backend()("gemv_fp8", x[first:first + rows], weight, scale, y[first:first + rows], rows, N, K)
    return y


@gemv_fp8.register_fake
def _(x, weight, scale):
    return x.new_empty(x.shape[0], weight.shape[0], dtype=torch.bfloat16)
