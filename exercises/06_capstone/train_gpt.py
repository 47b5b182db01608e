"""The small GPT trained on the learner's kernels beside its PyTorch twin, then served in FP8.

Run in a process of its own (the learner's libraries are loaded into it), by `grade model gpt`:

    python train_gpt.py JOB.json RESULT.json

JOB (a grader.model.TrainJob) names the compiled library of each kernel; with none, only the
twin is trained (a kernel is missing, or no GPU is here). RESULT (a grader.model.TrainResult)
receives the losses, validation losses, rates, each operation's time and a sample of text, which
report_gpt.py judges and shows. Options: ``steps`` (train for that many steps) and ``size``
("small": the size the tests use; a CPU uses it unless told).

Both models start from the same weights (one GPT, copied) and read the same batches in the same
order; nothing is random after that (no dropout). In float32 on both sides, TF32 off, their losses
then differ only by the order in which sums are rounded, a few 1e-7 at first.
"""
from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

import gpt
from costs import PER_CALL, optimizer_step
from grader.model import TrainJob, TrainResult

PROFILED_STEPS = 5


def progress(message: str) -> None:
    """A line `grade model` shows as its progress."""
    print(f"progress: {message}", flush=True)


def describe(config: gpt.Config, corpus: gpt.Corpus) -> str:
    return (f"{config.layers} layers, width {config.width}, {config.heads} heads, context {config.context}, "
            f"{config.parameters() / 1e6:.1f} M parameters; bytes of Python's standard library "
            f"({corpus.train_files} files, {len(corpus.train) / 1e6:.1f} MB to train on, {corpus.val_files} files "
            f"to validate on); AdamW (lr {config.lr:g}, warmup and cosine), {config.steps} steps of "
            f"{config.batch} x {config.context} bytes, seed {config.seed}")


def twin_training(initial: gpt.GPT, corpus: gpt.Corpus, config: gpt.Config) -> tuple[gpt.GPT, dict[str, Any]]:
    model = gpt.twin_of(initial, gpt.TorchOps)
    optimizer = torch.optim.AdamW(model.param_groups(config.weight_decay), lr=config.lr, betas=config.betas,
                                  eps=config.eps)
    run = gpt.train(model, optimizer, corpus, config,
                    on_step=lambda s, n: progress(f"training the PyTorch twin: step {s}/{n}"))
    val = gpt.validation_loss(model, corpus, config)
    where = "on the GPU, TF32 off" if torch.cuda.is_available() else f"on the CPU, {torch.get_num_threads()} threads"
    return model, {"losses": run.losses, "val_loss": val, "val_bpb": gpt.bits(val), "seconds": run.seconds,
                   "tokens_per_s": run.tokens_per_s,
                   "about": f"nn.Linear, F.layer_norm, F.scaled_dot_product_attention, F.cross_entropy, "
                            f"torch.optim.AdamW; eager, float32, {where}"}


def profile_ops(initial: gpt.GPT, corpus: gpt.Corpus, config: gpt.Config, kernels: Any) -> dict[str, Any]:
    """A few steps of a copy of the model with every kernel call timed by CUDA events, and each
    step timed as a whole: which share of a step each operation takes, and what is left."""
    import s2s_ops

    timed = s2s_ops.Timed(kernels)
    previous = s2s_ops.use(timed)
    try:
        model = gpt.twin_of(initial, gpt.KernelOps)
        optimizer = s2s_ops.AdamW(model.param_groups(config.weight_decay), lr=config.lr, betas=config.betas,
                                  eps=config.eps)
        data = corpus.train.to("cuda")
        starts = gpt.batch_starts(config, len(corpus.train))
        step_seconds = 0.0
        for step in range(PROFILED_STEPS + 1):
            if step == 1:               # the first step allocates: not counted
                timed.reset()
            torch.cuda.synchronize()
            began = time.perf_counter()
            x, y = gpt.windows(data, starts[step], config.context)
            loss = model(x, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            torch.cuda.synchronize()
            if step:
                step_seconds += time.perf_counter() - began
        timed.settle()
    finally:
        s2s_ops.use(previous)
    ops = []
    for name, seconds in timed.seconds.items():
        if name in PER_CALL:
            costs = [PER_CALL[name](*sizes) for sizes in timed.sizes[name]]
            flops, bytes_ = sum(f for f, _ in costs), sum(b for _, b in costs)
        else:           # adamw_multi: every parameter once a step, however many launches that takes
            flops, bytes_ = (PROFILED_STEPS * c for c in optimizer_step(config.parameters()))
        ops.append({"name": name, "calls": timed.calls[name] / PROFILED_STEPS, "seconds": seconds / PROFILED_STEPS,
                    "flops": flops / PROFILED_STEPS, "bytes": bytes_ / PROFILED_STEPS})
    return {"ops": sorted(ops, key=lambda o: -o["seconds"]), "step_seconds": step_seconds / PROFILED_STEPS}


def learner_training(initial: gpt.GPT, corpus: gpt.Corpus, config: gpt.Config, libraries: dict[str, str]
                     ) -> dict[str, Any]:
    import s2s_ops

    kernels = s2s_ops.load(libraries)
    learner: dict[str, Any] = {}
    try:
        progress("timing each of your kernels over a few training steps")
        learner.update(profile_ops(initial, corpus, config, kernels))
        kernels.check("the timed steps")
        model = gpt.twin_of(initial, gpt.KernelOps)
        optimizer = s2s_ops.AdamW(model.param_groups(config.weight_decay), lr=config.lr, betas=config.betas,
                                  eps=config.eps)
        run = gpt.train(model, optimizer, corpus, config, check=kernels.check,
                        on_step=lambda s, n: progress(f"training on your kernels: step {s}/{n}"))
        kernels.check("training")
        bad = [i for i, x in enumerate(run.losses) if not x == x or x in (float("inf"), float("-inf"))]
        if bad:
            raise s2s_ops.KernelFailure(f"the loss became {run.losses[bad[0]]} at step {bad[0] + 1}: a kernel wrote "
                                        "NaN or infinity somewhere in the step")
        val = gpt.validation_loss(model, corpus, config)
        kernels.check("validation")
        learner.update({"losses": run.losses, "val_loss": val, "val_bpb": gpt.bits(val), "seconds": run.seconds,
                        "tokens_per_s": run.tokens_per_s})
        progress("serving the trained model in FP8 on your quantize_fp8 and gemv_fp8, and in bf16 on PyTorch")
        val_corpus = gpt.Corpus(corpus.train[:0], corpus.val.to("cuda"), 0, 0, corpus.where)
        fp8_loss, fp8_rate = gpt.decode_validation(lambda b: gpt.fp8_decoder(model, b), val_corpus, config)
        kernels.check("FP8 decoding")
        bf16_loss, bf16_rate = gpt.decode_validation(lambda b: gpt.bf16_decoder(model, b), val_corpus, config)
        learner["fp8"] = {"val_loss": fp8_loss, "val_bpb": gpt.bits(fp8_loss), "tokens_per_s": fp8_rate}
        learner["bf16"] = {"val_loss": bf16_loss, "val_bpb": gpt.bits(bf16_loss), "tokens_per_s": bf16_rate}
        text = gpt.sample(gpt.fp8_decoder(model, 1), b"def ", config.sample_bytes, config.seed)
        kernels.check("sampling")
        learner["sample"] = text.decode("utf-8", errors="replace")
        learner["sample_by"] = "your FP8 model (quantize_fp8, gemv_fp8), temperature 0.8"
    except s2s_ops.KernelFailure as exc:
        learner["error"] = str(exc)
    return learner


def run(job: TrainJob) -> TrainResult:
    gpu = job.gpu and torch.cuda.is_available()
    size = job.options.get("size") or (None if gpu else "small")
    try:
        config = gpt.Config.named(size, job.options.get("steps"))
    except ValueError as exc:
        return TrainResult(fatal=str(exc))
    corpus = gpt.load_corpus(config)
    result = TrainResult(about=describe(config, corpus),
                         device=torch.cuda.get_device_name() if gpu else "cpu")
    if gpu:
        torch.backends.cuda.matmul.allow_tf32 = False       # float32 on both sides: see the docstring
        torch.backends.cudnn.allow_tf32 = False
    elif not job.options.get("size"):
        result.notice = (f"Without a GPU only the PyTorch twin trains, on the CPU, at the small size "
                         f"({config.layers} layers, width {config.width}, {config.steps} steps).")
    device = "cuda" if gpu else "cpu"
    values = result.values
    values["config"] = {k: getattr(config, k) for k in config.__dataclass_fields__}
    initial = gpt.GPT(config).to(device)
    progress(f"training the PyTorch twin ({config.steps} steps on the {'GPU' if gpu else 'CPU'})")
    twin, values["twin"] = twin_training(initial, corpus, config)
    if job.libraries and gpu:
        sys.path.insert(0, str(Path(__file__).parent))
        values["learner"] = learner_training(initial, corpus, config, job.libraries)
        result.error = values["learner"].get("error", "")
    else:
        text = gpt.sample(gpt.bf16_decoder(twin, 1), b"def ", config.sample_bytes, config.seed)
        values["twin"]["sample"] = text.decode("utf-8", errors="replace")
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
