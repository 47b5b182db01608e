"""The capstone's CPU side: the data split, the PyTorch twin and its recipe, the INT8 model it is
served as, and the ONNX export that TensorRT would build engines from."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("sklearn", reason="scikit-learn is not installed: pip install -e '.[capstone]'")

ROOT = Path(__file__).resolve().parents[1]


def _load_model():
    spec = importlib.util.spec_from_file_location("_s2s_capstone_model", ROOT / "exercises" / "06_capstone" / "model.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


model = _load_model()


@pytest.fixture(scope="module")
def data():
    return model.load_data()


@pytest.fixture(scope="module")
def twin(data):
    return model.train_twin(data)


def test_the_split_is_80_20_and_stratified(data):
    assert (len(data.y_train), len(data.y_test)) == (1437, 360)
    train, test = torch.bincount(data.y_train, minlength=10), torch.bincount(data.y_test, minlength=10)
    share = test.float() / (train + test).float()
    assert bool(((share - 0.2).abs() < 0.02).all()), share


def test_pixels_are_standardised_with_the_training_statistics(data):
    assert data.x_train.mean(dim=0).abs().max() < 1e-5
    spread = data.x_train.std(dim=0, unbiased=False)
    assert bool((((spread - 1).abs() < 1e-4) | (spread == 0)).all())        # blank pixels stay 0
    assert data.x_test.mean().abs() < 0.1 and data.x_test.dtype == torch.float32


def test_both_trainings_see_the_same_batches_and_start_from_the_same_weights():
    recipe = model.Recipe()
    first, again = model.batch_order(1437, recipe, 3), model.batch_order(1437, recipe, 3)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert [len(b) for b in first] == [64] * 22 + [29]
    assert not torch.equal(torch.cat(first), torch.cat(model.batch_order(1437, recipe, 4)))
    p, q = model.initial_params(recipe), model.initial_params(recipe)
    assert all(torch.equal(a, b) for a, b in zip(p.tensors(), q.tensors()))
    assert [tuple(t.shape) for t in p.tensors()] == [(128, 64), (128,), (10, 128), (10,)]


def test_the_twin_reaches_the_bar_and_is_deterministic(data, twin):
    assert twin.test_accuracy >= 0.97
    assert len(twin.losses) == 50 * 23 and len(twin.epoch_seconds) == 50
    assert twin.losses[0] > 2.0 and sum(twin.losses[-23:]) / 23 < 0.05
    again = model.train_twin(data, model.Recipe(epochs=1))
    once = model.train_twin(data, model.Recipe(epochs=1))
    assert again.losses == once.losses


def test_int8_serving_stays_within_half_a_point(data, twin):
    fp32 = model.accuracy(twin.params, data.x_test, data.y_test)
    int8 = model.accuracy_w8a8(twin.params, data.x_test, data.y_test)
    assert abs(fp32 - int8) <= 0.005, (fp32, int8)
    w = twin.params.W1
    q = model.fake_quantize_rows(w)
    assert ((q - w).abs() <= w.abs().amax(dim=1, keepdim=True) / 254 + 1e-7).all()


def test_the_onnx_export_is_static_checked_and_predicts_like_the_model(data, twin, tmp_path):
    onnx = pytest.importorskip("onnx", reason="onnx is not installed: pip install -e '.[capstone]'")
    pytest.importorskip("onnxruntime", reason="onnxruntime is not installed: pip install -e '.[capstone]'")
    batch = len(data.y_test)
    path = model.export_onnx(twin.params, tmp_path / "digits.onnx", batch)
    graph = onnx.load(str(path))
    onnx.checker.check_model(graph)
    dims = [d.dim_value for d in graph.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [batch, 64]                                       # static: what TensorRT builds from
    assert max(o.version for o in graph.opset_import if o.domain in ("", "ai.onnx")) <= model.ONNX_OPSET
    logits = torch.tensor(model.run_onnx(path, data.x_test))
    with torch.no_grad():
        ours = model.forward(twin.params, data.x_test)
    assert torch.allclose(logits, ours, atol=1e-4)
    assert torch.equal(logits.argmax(dim=1), ours.argmax(dim=1))
