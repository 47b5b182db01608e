"""A small GPT, its data and recipe, and its PyTorch twin.

A decoder-only Transformer (pre-LayerNorm, causal attention, GELU MLP) reads bytes: its vocabulary
is the 256 byte values. It learns Python's own standard library, the source files that ship with
the interpreter running it (nothing to download), split by file into training and validation with
a fixed seed. One ``GPT`` class is trained twice from the same initial weights, on the same
batches in the same order: once on PyTorch's operations (the twin), once on the learner's kernels
(``s2s_ops``). Only the operations differ: :class:`TorchOps` or :class:`KernelOps`.
"""
from __future__ import annotations

import math
import random
import sysconfig
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Config:
    """The model and its recipe; ``small()`` is the size the tests and a CPU use."""

    layers: int = 6
    width: int = 384
    heads: int = 6                  # width / heads = 64: attention's head size
    context: int = 256
    vocab: int = 256                # bytes
    batch: int = 16                 # sequences of `context` bytes: 4,096 tokens a step
    steps: int = 1500
    lr: float = 1e-3                # peak; linear warmup, then cosine down to lr * min_lr
    warmup: int = 100
    min_lr: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1       # on the matrices and embeddings; none on biases and LayerNorm
    seed: int = 0
    val_share: float = 0.1          # of the files
    val_windows: int = 32           # validation: this many windows of `context` bytes
    decode_batch: int = 16          # sequences decoded together (gemv_fp8 takes up to 16 rows)
    sample_bytes: int = 200

    @classmethod
    def small(cls) -> "Config":
        return cls(layers=2, width=128, heads=2, context=64, batch=8, steps=60, warmup=10, val_windows=8,
                   decode_batch=4, sample_bytes=40)

    @classmethod
    def named(cls, size: str | None, steps: int | None = None) -> "Config":
        sizes = {"full": cls(), "small": cls.small()}
        if size not in (None, *sizes):
            raise ValueError(f"the GPT comes in sizes {', '.join(sizes)}, not {size!r}")
        config = sizes[size or "full"]
        return replace(config, steps=steps, warmup=min(config.warmup, max(1, steps // 10))) if steps else config

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    def lr_at(self, step: int) -> float:
        """The learning rate of step ``step`` (0-based)."""
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        done = (step - self.warmup) / max(1, self.steps - self.warmup)
        return self.lr * (self.min_lr + (1 - self.min_lr) * 0.5 * (1 + math.cos(math.pi * min(1.0, done))))

    def parameters(self) -> int:
        w = self.width
        return 2 * self.vocab * w + self.context * w + self.vocab + 2 * w + self.layers * (12 * w * w + 13 * w)


# ---------------------------------------------------------------------------- the data

@dataclass
class Corpus:
    train: torch.Tensor             # uint8: the training files, one after another
    val: torch.Tensor
    train_files: int
    val_files: int
    where: str


def load_corpus(config: Config) -> Corpus:
    """Python's standard library (.py files, not site-packages), split by file with the seed."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts and "dist-packages" not in p.parts)
    if len(files) < 20:
        raise RuntimeError(f"{root} holds only {len(files)} Python files: too few to train on")
    random.Random(config.seed).shuffle(files)
    n_val = max(1, round(len(files) * config.val_share))

    def join(chosen: list[Path]) -> torch.Tensor:
        data = b"".join(p.read_bytes() + b"\n" for p in chosen)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return Corpus(join(files[n_val:]), join(files[:n_val]), len(files) - n_val, n_val, str(root))


def batch_starts(config: Config, n: int) -> torch.Tensor:
    """Where each sequence of each step starts (steps x batch): one draw from the seed, so both
    trainings see the same batches in the same order."""
    generator = torch.Generator().manual_seed(config.seed)
    return torch.randint(0, n - config.context - 1, (config.steps, config.batch), generator=generator)


def windows(data: torch.Tensor, starts: torch.Tensor, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets (the next byte) of the windows that begin at ``starts``, as int64."""
    index = starts.to(data.device).unsqueeze(1) + torch.arange(context + 1, device=data.device)
    chunk = data[index].long()
    return chunk[:, :-1], chunk[:, 1:]


def val_starts(config: Config, n: int) -> torch.Tensor:
    """The validation windows: evenly spread over the validation files."""
    return torch.linspace(0, n - config.context - 2, config.val_windows).long()


# ---------------------------------------------------------------------------- the operations

class TorchOps:
    """PyTorch's own operations: the twin."""

    name = "PyTorch"

    @staticmethod
    def linear(x, w, b, gelu=False):
        y = F.linear(x, w, b)
        return F.gelu(y) if gelu else y

    @staticmethod
    def layernorm(x, gamma, beta):
        return F.layer_norm(x, (x.shape[-1],), gamma, beta, eps=1e-5)

    @staticmethod
    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    @staticmethod
    def cross_entropy(logits, targets):
        return F.cross_entropy(logits, targets)


class KernelOps:
    """The learner's kernels, through the s2s operators (import s2s_ops first)."""

    name = "your kernels"

    @staticmethod
    def linear(x, w, b, gelu=False):
        return torch.ops.s2s.linear(x, w, b, gelu)[0]

    @staticmethod
    def layernorm(x, gamma, beta):
        return torch.ops.s2s.layernorm(x, gamma, beta)[0]

    @staticmethod
    def attention(q, k, v):
        return torch.ops.s2s.attention(q, k, v, True)

    @staticmethod
    def cross_entropy(logits, targets):
        return torch.ops.s2s.cross_entropy(logits, targets.int())[0].mean()


# ---------------------------------------------------------------------------- the model

class Block(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(c.width), nn.LayerNorm(c.width)
        self.qkv, self.proj = nn.Linear(c.width, 3 * c.width), nn.Linear(c.width, c.width)
        self.fc1, self.fc2 = nn.Linear(c.width, 4 * c.width), nn.Linear(4 * c.width, c.width)
        self.heads = c.heads

    def forward(self, x: torch.Tensor, B: int, T: int, ops: Any) -> torch.Tensor:
        """x: (B * T) x width, the residual stream, one row per token."""
        H, C = self.heads, x.shape[1]
        h = ops.layernorm(x, self.ln1.weight, self.ln1.bias)
        qkv = ops.linear(h, self.qkv.weight, self.qkv.bias)
        # glue: the heads apart, [B * H, T, C / H] each, as attention takes them
        q, k, v = qkv.view(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4).reshape(3, B * H, T, C // H).unbind(0)
        o = ops.attention(q.contiguous(), k.contiguous(), v.contiguous())
        o = o.view(B, H, T, C // H).transpose(1, 2).reshape(B * T, C)
        x = x + ops.linear(o, self.proj.weight, self.proj.bias)
        h = ops.layernorm(x, self.ln2.weight, self.ln2.bias)
        return x + ops.linear(ops.linear(h, self.fc1.weight, self.fc1.bias, True), self.fc2.weight, self.fc2.bias)


class GPT(nn.Module):
    """Embeddings (glue), the blocks, a final LayerNorm and the head: a plain nn.Module whose
    operations are ``ops``'s."""

    def __init__(self, c: Config, ops: Any = TorchOps):
        super().__init__()
        self.config, self.ops = c, ops
        self.wte, self.wpe = nn.Embedding(c.vocab, c.width), nn.Embedding(c.context, c.width)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.ln_f = nn.LayerNorm(c.width)
        self.head = nn.Linear(c.width, c.vocab)
        generator = torch.Generator().manual_seed(c.seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif "ln" in name:
                    p.fill_(1.0)
                else:       # GPT-2's: N(0, 0.02), the residual branches' last layers scaled down
                    std = 0.02 / math.sqrt(2 * c.layers) if name.endswith(("proj.weight", "fc2.weight")) else 0.02
                    p.copy_(torch.randn(p.shape, generator=generator) * std)

    def logits(self, idx: torch.Tensor) -> torch.Tensor:
        B, T = idx.shape
        x = (self.wte(idx) + self.wpe.weight[:T]).reshape(B * T, -1)       # glue: embeddings
        for block in self.blocks:
            x = block(x, B, T, self.ops)
        return self.ops.linear(self.ops.layernorm(x, self.ln_f.weight, self.ln_f.bias), self.head.weight,
                               self.head.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The mean cross-entropy (nats per byte) of predicting ``targets``."""
        return self.ops.cross_entropy(self.logits(idx), targets.reshape(-1))

    def param_groups(self, weight_decay: float) -> list[dict[str, Any]]:
        decay = [p for n, p in self.named_parameters() if p.dim() >= 2]
        rest = [p for n, p in self.named_parameters() if p.dim() < 2]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def twin_of(model: GPT, ops: Any) -> GPT:
    """A model with ``model``'s weights (copied) on other operations."""
    other = GPT(model.config, ops).to(next(model.parameters()).device)
    other.load_state_dict(model.state_dict())
    return other


# ---------------------------------------------------------------------------- training

@dataclass
class Run:
    losses: list[float]
    seconds: float                  # the training steps only
    tokens: int
    val_loss: float = 0.0           # nats per byte
    val_curve: list[tuple[int, float]] | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def train(model: GPT, optimizer: torch.optim.Optimizer, corpus: Corpus, config: Config,
          on_step: Callable[[int, int], None] | None = None, check: Callable[[str], None] | None = None) -> Run:
    """``config.steps`` steps; the losses stay on the device until the end, so nothing waits."""
    device = next(model.parameters()).device
    data = corpus.train.to(device)
    starts = batch_starts(config, len(corpus.train))
    losses = torch.zeros(config.steps, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    warm = min(10, config.steps // 10)          # steps before the clock starts: first launches, allocations
    began = time.perf_counter()
    for step in range(config.steps):
        if step == warm:
            sync()
            began = time.perf_counter()
        x, y = windows(data, starts[step], config.context)
        for group in optimizer.param_groups:
            group["lr"] = config.lr_at(step)
        loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses[step] = loss.detach()
        if on_step and (step + 1) % max(1, config.steps // 10) == 0:
            if check:
                check(f"step {step + 1}")
            on_step(step + 1, config.steps)
    sync()
    seconds = time.perf_counter() - began
    return Run(losses.tolist(), seconds, (config.steps - warm) * config.batch * config.context)


@torch.no_grad()
def validation_loss(model: GPT, corpus: Corpus, config: Config) -> float:
    """Mean cross-entropy (nats per byte) over the validation windows."""
    device = next(model.parameters()).device
    x, y = windows(corpus.val.to(device), val_starts(config, len(corpus.val)), config.context)
    total = 0.0
    for first in range(0, len(x), config.batch):
        total += float(model(x[first:first + config.batch], y[first:first + config.batch])) * len(x[first:first + config.batch])
    return total / len(x)


def bits(nats: float) -> float:
    return nats / math.log(2)


# ---------------------------------------------------------------------------- decoding

class Decoder:
    """Token-by-token decoding with a KV cache, for ``batch`` sequences at once. ``linear(h, i)``
    is the model's i-th linear layer; the attention over the cache is glue (the learner's kernel
    takes as many queries as keys)."""

    def __init__(self, model: GPT, batch: int, linear: Callable, norm: Callable, dtype: torch.dtype):
        c = model.config
        self.model, self.c, self.linear, self.norm, self.dtype = model, c, linear, norm, dtype
        device = next(model.parameters()).device
        self.cache = torch.zeros(c.layers, 2, batch, c.heads, c.context, c.head_dim, dtype=dtype, device=device)
        self.wte = model.wte.weight.detach().to(dtype)
        self.wpe = model.wpe.weight.detach().to(dtype)

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        """The logits of the next byte after ``tokens`` (one per sequence) at position ``pos``."""
        c, B = self.c, tokens.shape[0]
        x = self.wte[tokens] + self.wpe[pos]
        for i, block in enumerate(self.model.blocks):
            h = self.norm(x, block.ln1)
            q, k, v = self.linear(h, block.qkv).view(B, 3, c.heads, c.head_dim).unbind(1)
            self.cache[i, 0, :B, :, pos], self.cache[i, 1, :B, :, pos] = k, v
            o = F.scaled_dot_product_attention(q.unsqueeze(2), self.cache[i, 0, :B, :, :pos + 1],
                                               self.cache[i, 1, :B, :, :pos + 1])
            x = x + self.linear(o.reshape(B, c.width), block.proj)
            x = x + self.linear(F.gelu(self.linear(self.norm(x, block.ln2), block.fc1)), block.fc2)
        return self.linear(self.norm(x, self.model.ln_f), self.model.head).float()


def bf16_decoder(model: GPT, batch: int) -> Decoder:
    """PyTorch's bf16 decoding of the model: its weights in bf16, F.linear and F.layer_norm."""
    weights = {id(m): (m.weight.detach().bfloat16(), m.bias.detach().bfloat16())
               for m in model.modules() if isinstance(m, (nn.Linear, nn.LayerNorm))}

    def linear(h, layer):
        return F.linear(h, *weights[id(layer)])

    def norm(x, layer):
        return F.layer_norm(x, (x.shape[-1],), *weights[id(layer)], eps=1e-5)
    return Decoder(model, batch, linear, norm, torch.bfloat16)


def fp8_decoder(model: GPT, batch: int) -> Decoder:
    """The model served on the learner's kernels: every linear layer's weight quantized once to
    e4m3 with a scale per output row (quantize_fp8, from bf16), multiplied by gemv_fp8; LayerNorm on
    layernorm_forward; the residual stream, bias adds, GELU and the attention over the cache in
    float32 (glue)."""
    weights = {}
    for m in model.modules():
        if isinstance(m, nn.Linear):
            q, scale = torch.ops.s2s.quantize_fp8(m.weight.detach().bfloat16())
            weights[id(m)] = (q, scale, m.bias.detach().float())

    def linear(h, layer):
        q, scale, bias = weights[id(layer)]
        return torch.ops.s2s.gemv_fp8(h.bfloat16(), q, scale).float() + bias

    def norm(x, layer):
        return torch.ops.s2s.layernorm(x, layer.weight.detach(), layer.bias.detach())[0]
    return Decoder(model, batch, linear, norm, torch.float32)


@torch.no_grad()
def decode_validation(make: Callable[[int], Decoder], corpus: Corpus, config: Config) -> tuple[float, float]:
    """Teacher-forced decoding of every validation window, ``decode_batch`` at a time: the mean
    cross-entropy (nats per byte) and the decoding rate (tokens per second)."""
    device = corpus.val.device
    x, y = windows(corpus.val, val_starts(config, len(corpus.val)), config.context)
    x, y = x.to(device), y.to(device)
    total, seconds = 0.0, 0.0
    for first in range(0, len(x), config.decode_batch):
        xs, ys = x[first:first + config.decode_batch], y[first:first + config.decode_batch]
        decoder = make(len(xs))
        logits = torch.empty(len(xs), config.context, config.vocab, device=device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        began = time.perf_counter()
        for pos in range(config.context):
            logits[:, pos] = decoder.step(xs[:, pos], pos)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds += time.perf_counter() - began
        total += float(F.cross_entropy(logits.reshape(-1, config.vocab), ys.reshape(-1))) * len(xs)
    return total / len(x), x.numel() / seconds


@torch.no_grad()
def sample(decoder: Decoder, prompt: bytes, count: int, seed: int, temperature: float = 0.8) -> bytes:
    """``count`` bytes after ``prompt``, drawn from the model's distribution with the seed."""
    device = decoder.wte.device
    generator = torch.Generator(device=device).manual_seed(seed)
    out = list(prompt)
    logits = None
    for pos, byte in enumerate(prompt):
        logits = decoder.step(torch.tensor([byte], device=device), pos)
    for pos in range(len(prompt), min(len(prompt) + count, decoder.c.context)):
        probs = torch.softmax(logits[0] / temperature, dim=-1)
        nxt = int(torch.multinomial(probs, 1, generator=generator))
        out.append(nxt)
        if pos + 1 < decoder.c.context:
            logits = decoder.step(torch.tensor([nxt], device=device), pos)
    return bytes(out)
