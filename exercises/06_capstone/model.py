"""The capstone's model, data and recipe, and its PyTorch twin.

A multilayer perceptron, 64 -> 128 -> 10 with GELU, learns scikit-learn's handwritten digits (1,797
images of 8 x 8 pixels, bundled with scikit-learn: nothing to download). The course trains it twice
from the same initial weights, on the same batches in the same order, with the same
hyperparameters: once with PyTorch (the twin, this file), once with nothing but the learner's own
kernels. Their accuracy and loss curves are then compared side by side, and the trained model is
served in INT8 (W8A8: activations quantized per row, weights per output channel).

Everything here runs on the CPU in float32.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

FEATURES, HIDDEN, CLASSES = 64, 128, 10
# On the CPU the twin trains on one thread. Its matrices are tiny (a batch of 64 by 128 features):
# splitting each operation over threads costs more than it saves, and where the cores are shared
# the other threads' waits make the time per epoch swing from 7 to 400 ms between identical runs
# (measured on two cores); on one thread it stays near the lower figure.
CPU_THREADS = 1


@dataclass(frozen=True)
class Recipe:
    """How the model is trained: AdamW, batches of 64, 50 epochs, one seed for everything."""

    lr: float = 1e-3
    weight_decay: float = 1e-2
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    batch: int = 64
    epochs: int = 50
    seed: int = 0
    test_share: float = 0.2


@dataclass(frozen=True)
class Data:
    """Standardised digits, split 80/20 with each class in the same proportion in both parts."""

    x_train: torch.Tensor       # float32, train x 64
    y_train: torch.Tensor       # int64
    x_test: torch.Tensor
    y_test: torch.Tensor
    mean: torch.Tensor          # what standardised the pixels: the training set's statistics
    std: torch.Tensor


def load_data(recipe: Recipe = Recipe()) -> Data:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.data.astype(np.float64), digits.target, test_size=recipe.test_share, stratify=digits.target,
        random_state=recipe.seed)
    mean = x_train.mean(axis=0)
    std = x_train.std(axis=0)
    std[std == 0] = 1.0             # pixels that are blank in every training image stay 0
    as32 = lambda a: torch.tensor(a, dtype=torch.float32)   # noqa: E731
    return Data(as32((x_train - mean) / std), torch.tensor(y_train), as32((x_test - mean) / std),
                torch.tensor(y_test), as32(mean), as32(std))


@dataclass
class Params:
    """The model's four tensors, in PyTorch's layout (a weight is out_features x in_features)."""

    W1: torch.Tensor
    b1: torch.Tensor
    W2: torch.Tensor
    b2: torch.Tensor

    def tensors(self) -> list[torch.Tensor]:
        return [self.W1, self.b1, self.W2, self.b2]

    def clone(self) -> "Params":
        return Params(*(t.detach().clone() for t in self.tensors()))


def initial_params(recipe: Recipe = Recipe()) -> Params:
    """nn.Linear's own initialisation, drawn from the recipe's seed."""
    torch.manual_seed(recipe.seed)
    first, second = torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Linear(HIDDEN, CLASSES)
    return Params(first.weight.detach().clone(), first.bias.detach().clone(), second.weight.detach().clone(),
                  second.bias.detach().clone())


def batch_order(n: int, recipe: Recipe, epoch: int) -> list[torch.Tensor]:
    """The indices of each batch of one epoch: a permutation drawn from the seed and the epoch, so
    that both trainings see the same batches in the same order."""
    generator = torch.Generator().manual_seed(recipe.seed * 1000 + epoch)
    order = torch.randperm(n, generator=generator)
    return list(order.split(recipe.batch))


def forward(params: Params, x: torch.Tensor) -> torch.Tensor:
    """The logits: Linear, GELU (erf form), Linear."""
    return F.linear(F.gelu(F.linear(x, params.W1, params.b1)), params.W2, params.b2)


def accuracy(params: Params, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((forward(params, x).argmax(dim=1) == y).float().mean())


@dataclass
class Training:
    """What a training run reports."""

    params: Params
    losses: list[float] = field(default_factory=list)          # the mean loss of every step
    epoch_seconds: list[float] = field(default_factory=list)
    test_accuracy: float = 0.0


def train_twin(data: Data, recipe: Recipe = Recipe(), params: Params | None = None) -> Training:
    """The PyTorch twin: cross-entropy, torch.optim.AdamW, the recipe's batches; on CPU_THREADS
    threads where it trains on the CPU."""
    params = (params or initial_params(recipe)).clone()
    if params.W1.device.type != "cpu":
        return _train_twin(data, recipe, params)
    threads = torch.get_num_threads()
    torch.set_num_threads(CPU_THREADS)
    try:
        return _train_twin(data, recipe, params)
    finally:
        torch.set_num_threads(threads)


def _train_twin(data: Data, recipe: Recipe, params: Params) -> Training:
    tensors = [t.requires_grad_(True) for t in params.tensors()]
    optimizer = torch.optim.AdamW(tensors, lr=recipe.lr, betas=recipe.betas, eps=recipe.eps,
                                  weight_decay=recipe.weight_decay, foreach=False)
    run = Training(params)
    for epoch in range(recipe.epochs):
        began = time.perf_counter()
        for index in batch_order(len(data.y_train), recipe, epoch):
            loss = F.cross_entropy(forward(params, data.x_train[index]), data.y_train[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            run.losses.append(float(loss.detach()))
        run.epoch_seconds.append(time.perf_counter() - began)
    for t in tensors:
        t.requires_grad_(False)
    run.test_accuracy = accuracy(params, data.x_test, data.y_test)
    return run


# ---------------------------------------------------------------------------- INT8 serving

def fake_quantize_rows(t: torch.Tensor) -> torch.Tensor:
    """Symmetric INT8 per row (scale = max |row| / 127, 1 for a row of zeros), read back as float:
    what quantize_int8 computes, for activations (a row per example) and weights (a row per output)."""
    amax = t.abs().amax(dim=1, keepdim=True)
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
    return torch.round(t / scale).clamp(-127, 127) * scale


def forward_w8a8(params: Params, x: torch.Tensor) -> torch.Tensor:
    """Both layers as W8A8 linear layers: the model as gemm_w8a8 serves it (bf16 outputs aside)."""
    hidden = F.gelu(F.linear(fake_quantize_rows(x), fake_quantize_rows(params.W1), params.b1))
    return F.linear(fake_quantize_rows(hidden), fake_quantize_rows(params.W2), params.b2)


def accuracy_w8a8(params: Params, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((forward_w8a8(params, x).argmax(dim=1) == y).float().mean())


# ---------------------------------------------------------------------------- deployment

ONNX_OPSET = 18          # within what TensorRT's ONNX parser reads


def export_onnx(params: Params, path: Path, batch: int) -> Path:
    """The trained fp32 model as ONNX with a static input shape (batch x 64): what TensorRT builds
    its FP16 and INT8 engines from."""
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.GELU(), torch.nn.Linear(HIDDEN, CLASSES))
    with torch.no_grad():
        for layer, (w, b) in zip((model[0], model[2]), ((params.W1, params.b1), (params.W2, params.b2))):
            layer.weight.copy_(w)
            layer.bias.copy_(b)
    model.eval()
    torch.onnx.export(model, (torch.zeros(batch, FEATURES),), str(path), input_names=["pixels"],
                      output_names=["logits"], opset_version=ONNX_OPSET, dynamo=True,
                      external_data=False, verbose=False)
    return path


def run_onnx(path: Path, x: torch.Tensor) -> np.ndarray:
    """The logits from ONNX Runtime on the CPU."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"pixels": x.numpy()})[0]
