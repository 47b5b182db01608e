"""TensorRT engines built from the exported model, for comparison with the learner's INT8 path.

Where NVIDIA TensorRT is installed (`pip install tensorrt-cu13`, which downloads TensorRT's
libraries from NVIDIA's index), `grade model --tensorrt` builds an FP16 and an INT8 engine from
model.onnx (INT8 calibrated on the training set, TensorRT's entropy calibrator) and reports their
test accuracy and the latency of one batch of the test set. Without TensorRT the report says so.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from model import CLASSES

INSTALL = "pip install tensorrt-cu13 (its libraries come from NVIDIA's own package index at install time)"


def engines_report(onnx_path: Path, data: Any) -> dict[str, Any]:
    try:
        import tensorrt as trt
    except ImportError:
        return {"note": f"not installed here; {INSTALL}", "engines": []}
    engines = []
    for precision in ("FP16", "INT8"):
        try:
            engine = _build(trt, onnx_path, precision, data.x_train)
            accuracy, latency = _evaluate(trt, engine, data.x_test, data.y_test)
            engines.append({"precision": precision, "accuracy": accuracy, "latency_us": latency * 1e6})
        except Exception as exc:  # noqa: BLE001 - one engine's failure is reported, the other still built
            engines.append({"precision": precision, "error": f"{type(exc).__name__}: {exc}"})
    return {"note": f"TensorRT {trt.__version__}", "engines": engines}


def _build(trt: Any, onnx_path: Path, precision: str, calibration: torch.Tensor) -> Any:
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx_path.read_bytes()):
        raise RuntimeError("; ".join(str(parser.get_error(i)) for i in range(parser.num_errors)))
    config = builder.create_builder_config()
    config.set_flag(trt.BuilderFlag.FP16)
    if precision == "INT8":
        config.set_flag(trt.BuilderFlag.INT8)
        batch = int(network.get_input(0).shape[0])
        config.int8_calibrator = _calibrator(trt, calibration, batch)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError("TensorRT could not build the engine")
    return trt.Runtime(logger).deserialize_cuda_engine(serialized)


def _calibrator(trt: Any, x: torch.Tensor, batch: int) -> Any:
    class Calibrator(trt.IInt8EntropyCalibrator2):
        def __init__(self) -> None:
            super().__init__()
            rows = (len(x) // batch) * batch
            self.batches = list(x[:rows].cuda().split(batch))
            self.index = 0

        def get_batch_size(self) -> int:
            return batch

        def get_batch(self, names: list[str]) -> list[int] | None:
            if self.index >= len(self.batches):
                return None
            self.index += 1
            return [int(self.batches[self.index - 1].data_ptr())]

        def read_calibration_cache(self) -> None:
            return None

        def write_calibration_cache(self, cache: Any) -> None:
            return None
    return Calibrator()


def _evaluate(trt: Any, engine: Any, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    context = engine.create_execution_context()
    inputs = x.cuda().contiguous()
    logits = torch.empty(len(x), CLASSES, device="cuda")
    context.set_tensor_address(engine.get_tensor_name(0), inputs.data_ptr())
    context.set_tensor_address(engine.get_tensor_name(1), logits.data_ptr())
    stream = torch.cuda.current_stream()
    times = []
    for _ in range(20):
        torch.cuda.synchronize()
        began = time.perf_counter()
        context.execute_async_v3(stream.cuda_stream)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - began)
    accuracy = float((logits.argmax(1).cpu() == y).float().mean())
    return accuracy, sorted(times)[len(times) // 2]
