"""The capstone's model trained and served on the learner's own kernels, beside its PyTorch twin.

Run in a process of its own (the learner's libraries are loaded into it), by `grade model`:

    python train_kernels.py JOB.json RESULT.json

JOB (a grader.model.TrainJob) names the compiled library of each kernel (capstone.toml lists them) and the folder for the
exported model; with no libraries only the twin is trained, which is what the report shows when
kernels are missing or no GPU is here. RESULT (a grader.model.TrainResult) receives the losses, accuracies and timings.

One training step on the kernels, for a batch X of B digits with labels y:

    linear_forward   Z1 = X W1^T + b1, H = gelu(Z1)          (B x 128)
    linear_forward   L = H W2^T + b2                          (B x 10, the logits)
    softmax          P = softmax(L) by rows
    glue             dL = (P - onehot(y)) / B                 the gradient of the mean cross-entropy
    linear_backward  dH, dW2, db2 from dL                     (no GELU on the second layer)
    linear_backward  dX, dW1, db1 from dH and Z1              (GELU's derivative at Z1)
    adamw_multi      W1, b1, W2, b2 and their moments, one launch
"""
from __future__ import annotations

import json
import sys
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

from grader.model import TrainJob, TrainResult
from model import (CLASSES, CPU_THREADS, FEATURES, HIDDEN, Data, Params, Recipe, accuracy, accuracy_w8a8,
                   batch_order, export_onnx, initial_params, load_data, run_onnx, train_twin)

SERVING_OPS = ("quantize_int8", "gemm_w8a8")     # what logits_w8a8 calls
GLUE = "glue: loss gradient"
LOSS = "glue: the loss, for the curve"


def progress(message: str) -> None:
    """A line `grade model` shows as its progress."""
    print(f"progress: {message}", flush=True)


class KernelFailure(Exception):
    """A learner kernel failed while the model trained: a launch error, a CUDA error, a NaN."""


@dataclass
class TensorList:
    """A list argument (adamw_multi's tensors): the kernel gets the device array of their pointers."""

    tensors: list[torch.Tensor]
    table: torch.Tensor

    @classmethod
    def of(cls, tensors: list[torch.Tensor]) -> "TensorList":
        return cls(tensors, torch.tensor([t.data_ptr() for t in tensors], dtype=torch.int64,
                                         device=tensors[0].device))


class Kernels:
    """The learner's entry points, called with device pointers; each call timed by CUDA events."""

    device = torch.device("cuda")

    def __init__(self, libraries: dict[str, str], exercises: dict[str, str]):
        from grader import spec as specmod
        from grader.worker.entry import Entry

        self.entries = {name: Entry(path, specmod.find(exercises[name]).task(name))
                        for name, path in libraries.items()}
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._pending: list[tuple[str, Any, Any]] = []

    def __call__(self, name: str, *values: Any) -> None:
        self.timed(name, lambda: self.entries[name]([_pointer(v) for v in values]))

    def timed(self, name: str, fn: Callable[[], Any]) -> Any:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn()
        end.record()
        self._pending.append((name, start, end))
        self.calls[name] += 1
        return out

    def settle(self, where: str) -> None:
        """Wait for the device; add up the timed calls; raise on any error the kernels left."""
        try:
            torch.cuda.synchronize()
        except RuntimeError as exc:
            raise KernelFailure(f"a CUDA error during {where}: {exc}") from None
        for name, entry in self.entries.items():
            problem = entry.launch_problem()
            if problem:
                raise KernelFailure(f"{name}: {problem[1]} (during {where})")
        for name, start, end in self._pending:
            self.seconds[name] += start.elapsed_time(end) / 1e3
        self._pending.clear()


def _pointer(value: Any) -> Any:
    if isinstance(value, TensorList):
        return value.table.data_ptr()
    return value.data_ptr() if isinstance(value, torch.Tensor) else value


def train_on_kernels(kernels: Kernels, data: Data, recipe: Recipe, params: Params) -> dict[str, Any]:
    """The recipe's training with the learner's kernels; the same batches, in the same order, as the twin."""
    on = kernels.device
    p = [t.to(on).contiguous() for t in params.clone().tensors()]
    W1, b1, W2, b2 = p
    grads = [torch.zeros_like(t) for t in p]
    dW1, db1, dW2, db2 = grads
    m, v = [torch.zeros_like(t) for t in p], [torch.zeros_like(t) for t in p]
    lists = [TensorList.of(ts) for ts in (p, grads, m, v)]
    sizes = torch.tensor([t.numel() for t in p], dtype=torch.int64, device=on)
    x_train, y_train = data.x_train.to(on), data.y_train.to(on)
    onehot = F.one_hot(y_train, CLASSES).float()
    B = recipe.batch
    Z1, H, dH = (torch.empty(B, HIDDEN, device=on) for _ in range(3))
    L, Y2, P, dL = (torch.empty(B, CLASSES, device=on) for _ in range(4))
    dX = torch.empty(B, FEATURES, device=on)
    losses = torch.zeros(len(batch_order(len(data.y_train), recipe, 0)) * recipe.epochs, device=on)
    epoch_seconds: list[float] = []
    step = 0
    for epoch in range(recipe.epochs):
        began = time.perf_counter()
        for index in batch_order(len(data.y_train), recipe, epoch):
            b = len(index)
            index = index.to(on, non_blocking=True)
            X = x_train[index]                       # data loading: a gather of the batch's rows
            z1, h, dh, l, y2, pr, dl, dx = (t[:b] for t in (Z1, H, dH, L, Y2, P, dL, dX))
            kernels("linear_forward", X, W1, b1, z1, h, b, HIDDEN, FEATURES, 1)
            kernels("linear_forward", h, W2, b2, l, y2, b, CLASSES, HIDDEN, 0)   # Y = Z: no GELU
            kernels("softmax", l, pr, b, CLASSES)

            target = onehot[index]
            kernels.timed(GLUE, lambda: torch.sub(pr, target, out=dl).div_(b))
            kernels.timed(LOSS, lambda: losses.__setitem__(step, -(pr.clamp_min(1e-30).log() * target).sum() / b))
            kernels("linear_backward", h, W2, l, dl, dh, dW2, db2, b, CLASSES, HIDDEN, 0)
            kernels("linear_backward", X, W1, z1, dh, dx, dW1, db1, b, HIDDEN, FEATURES, 1)
            kernels("adamw_multi", *lists, sizes, len(p), recipe.lr, recipe.betas[0], recipe.betas[1],
                    recipe.eps, recipe.weight_decay, step + 1)
            step += 1
        kernels.settle(f"epoch {epoch + 1}")
        epoch_seconds.append(time.perf_counter() - began)
        progress(f"training on your kernels: epoch {epoch + 1}/{recipe.epochs}, "
                 f"loss {float(losses[step - 1]):.4f}")
        if not bool(torch.isfinite(losses[:step]).all()):
            first = int((~torch.isfinite(losses[:step])).nonzero()[0])
            raise KernelFailure(f"the loss became {float(losses[first])} at step {first + 1} (epoch {epoch + 1}): "
                                "a kernel wrote NaN or infinity somewhere in the step")
    trained = Params(W1, b1, W2, b2)
    return {"params": trained, "losses": losses.tolist(), "epoch_seconds": epoch_seconds}


def logits_on_kernels(kernels: Kernels, params: Params, x: torch.Tensor) -> torch.Tensor:
    """The fp32 model's logits through the learner's linear_forward (the test set: one batch)."""
    rows, on = x.shape[0], x.device
    z1, h = torch.empty(rows, HIDDEN, device=on), torch.empty(rows, HIDDEN, device=on)
    logits, same = torch.empty(rows, CLASSES, device=on), torch.empty(rows, CLASSES, device=on)
    kernels("linear_forward", x, params.W1, params.b1, z1, h, rows, HIDDEN, FEATURES, 1)
    kernels("linear_forward", h, params.W2, params.b2, logits, same, rows, CLASSES, HIDDEN, 0)
    kernels.settle("the test set's forward pass")
    return logits


def logits_w8a8(kernels: Kernels, params: Params, x: torch.Tensor) -> torch.Tensor:
    """The model served in INT8 on the learner's 05 kernels: each layer's input quantized per row,
    its weight per output channel (a row of W), one W8A8 product with the bias in its epilogue.
    The GELU between the layers, on the bf16 output of the first, is glue."""
    def quantized(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = torch.empty(t.shape, dtype=torch.int8, device=t.device)
        scale = torch.empty(t.shape[0], device=t.device)
        kernels("quantize_int8", t.contiguous(), q, scale, t.shape[0], t.shape[1])
        return q, scale

    def layer(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        (qa, sa), (qw, sw) = quantized(a), quantized(w)
        y = torch.empty(a.shape[0], w.shape[0], dtype=torch.bfloat16, device=a.device)
        kernels("gemm_w8a8", qa, qw, sa, sw, bias, y, a.shape[0], w.shape[0], a.shape[1])
        return y

    hidden = kernels.timed("glue: GELU", lambda: F.gelu(layer(x, params.W1, params.b1).float()))
    logits = layer(hidden, params.W2, params.b2).float()
    kernels.settle("INT8 serving")
    return logits


def _accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    return float((logits.argmax(dim=1) == y.to(logits.device)).float().mean())


def _twin(data: Data, recipe: Recipe, device: str) -> dict[str, Any]:
    on = lambda t: t.to(device)  # noqa: E731
    moved = Data(on(data.x_train), on(data.y_train), on(data.x_test), on(data.y_test), data.mean, data.std)
    params = Params(*(on(t) for t in initial_params(recipe).tensors()))
    run = train_twin(moved, recipe, params)
    where = "on the GPU" if device == "cuda" else f"on the CPU, {CPU_THREADS} thread{'s' * (CPU_THREADS > 1)}"
    return {"losses": run.losses, "epoch_seconds": run.epoch_seconds, "test_accuracy": run.test_accuracy,
            "device": device, "about": f"torch.optim.AdamW, F.cross_entropy, {where}"}


def _onnx_check(cpu: Params, data: Data, fp32_logits: torch.Tensor, folder: Path) -> dict[str, Any]:
    """Export the trained model (its parameters on the CPU) and run the export with ONNX Runtime on
    the CPU."""
    try:
        import onnx
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        return {"checked": False, "note": f"not checked: {exc.name} is not installed (pip install onnx onnxruntime "
                                          "onnxscript, or the project's 'capstone' extra)"}
    folder.mkdir(parents=True, exist_ok=True)
    path = export_onnx(cpu, folder / "model.onnx", batch=len(data.y_test))
    exported = onnx.load(str(path))
    onnx.checker.check_model(exported)
    got = torch.from_numpy(run_onnx(path, data.x_test))
    want = fp32_logits.detach().cpu()
    return {"checked": True, "path": str(path), "opset": exported.opset_import[0].version,
            "agree": float((got.argmax(1) == want.argmax(1)).float().mean()),
            "max_abs_diff": float((got - want).abs().max()), "accuracy": _accuracy(got, data.y_test)}


def on_kernels(kernels: Kernels, data: Data, recipe: Recipe, out: Path) -> dict[str, Any]:
    """Train, test and serve in INT8 on ``kernels``; export the trained model to ``out``."""
    learner: dict[str, Any] = {}
    try:
        trained = train_on_kernels(kernels, data, recipe, initial_params(recipe))
        params = trained.pop("params")
        learner.update(trained)
        learner["op_seconds"] = dict(kernels.seconds)
        learner["op_calls"] = dict(kernels.calls)
        progress("testing, and serving the model in INT8 on your kernels")
        x_test = data.x_test.to(kernels.device)
        logits = logits_on_kernels(kernels, params, x_test)
        learner["test_accuracy"] = _accuracy(logits, data.y_test)
        cpu = Params(*(t.detach().cpu() for t in params.tensors()))
        learner["torch_accuracy_of_your_weights"] = accuracy(cpu, data.x_test, data.y_test)
        learner["int8_accuracy"] = _accuracy(logits_w8a8(kernels, params, x_test), data.y_test)
        learner["int8_kernels"] = list(SERVING_OPS)
        learner["int8_model_accuracy"] = accuracy_w8a8(cpu, data.x_test, data.y_test)
    except KernelFailure as exc:
        learner["error"] = str(exc)
        return learner
    learner["onnx"] = _onnx_check(cpu, data, logits, out)
    return learner


def describe(recipe: Recipe, data: Data) -> str:
    """The data and the recipe in a line, for the report's header."""
    return (f"{len(data.y_train)} training and {len(data.y_test)} test images of 8 x 8; AdamW (lr {recipe.lr:g}, "
            f"weight decay {recipe.weight_decay:g}), batch {recipe.batch}, {recipe.epochs} epochs, seed {recipe.seed}")


def run(job: TrainJob) -> TrainResult:
    recipe = Recipe()
    data = load_data(recipe)
    out = Path(job.out)
    out.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    result = TrainResult(about=describe(recipe, data),
                         device=torch.cuda.get_device_name() if device == "cuda" else "cpu")
    values = result.values
    values.update({"recipe": {k: getattr(recipe, k) for k in recipe.__dataclass_fields__},
                   "data": {"train": len(data.y_train), "test": len(data.y_test)},
                   "test_set": f"the {len(data.y_test)} test images"})
    progress(f"training the PyTorch twin ({recipe.epochs} epochs on the {'GPU' if device == 'cuda' else 'CPU'})")
    values["twin"] = _twin(data, recipe, device)
    if job.libraries:
        values["learner"] = on_kernels(Kernels(job.libraries, job.exercises), data, recipe, out)
        result.error = values["learner"].get("error", "")
        if job.options.get("tensorrt") and not result.error:
            from tensorrt_engines import engines_report
            values["tensorrt"] = engines_report(out / "model.onnx", data)
    return result


def main(argv: list[str]) -> int:
    job = TrainJob.read(argv[1])
    try:
        result = run(job)
    except Exception:   # noqa: BLE001 - reported to the parent, which shows it as the reason
        result = TrainResult(fatal=traceback.format_exc(limit=8))
    result.write(Path(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
