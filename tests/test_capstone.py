"""The capstone's CPU side: the data split, the PyTorch twin and its recipe, the INT8 model it is
served as, the ONNX export that TensorRT would build engines from, the training on kernels (run
here with the exercises' references standing in for the learner's kernels), the bars, the report,
and `grade model` without a GPU."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
import torch

pytest.importorskip("sklearn", reason="scikit-learn is not installed: pip install -e '.[capstone]'")

ROOT = Path(__file__).resolve().parents[1]
CAPSTONE = ROOT / "exercises" / "06_capstone"
sys.path.insert(0, str(CAPSTONE))

import model  # noqa: E402
import train_kernels  # noqa: E402
import bars as mlp_report  # noqa: E402
from bars import accuracy_rows, bars, op_rows  # noqa: E402

from grader import spec as specmod  # noqa: E402
from grader.model import ExitCode, ModelResult, TrainResult, load_capstone, render_html  # noqa: E402
from grader.tolerance import split  # noqa: E402

CONFIG = load_capstone("mlp")


class ReferenceKernels(train_kernels.Kernels):
    """The exercises' float64 references called where the learner's kernels would be, with the
    same arguments in the same order, on the CPU: the training's wiring, checked without a GPU."""

    device = torch.device("cpu")

    def __init__(self, broken: str | None = None):
        self.tasks = {}
        for k in CONFIG["kernels"]:
            exercise = specmod.find(k["exercise"])
            task = exercise.task(k["task"])
            self.tasks[k["task"]] = (task, exercise.reference_function(task))
        self.broken = broken
        self.seconds, self.calls = defaultdict(float), defaultdict(int)

    def __call__(self, name, *values):
        task, fn = self.tasks[name]

        def call():
            given = dict(zip((a.name for a in task.args), values))
            args = []
            for a in task.reference_args:
                v = given[a.name]
                if isinstance(v, train_kernels.TensorList):
                    args.append([t.double() for t in v.tensors])
                elif isinstance(v, torch.Tensor):
                    args.append(v if a.sizes_of else v.double())
                else:
                    args.append(v)
            got = fn(*args)
            for a, value in zip(task.results, got if isinstance(got, tuple) else (got,)):
                target = given[a.name]
                pairs = zip(target.tensors, value) if isinstance(target, train_kernels.TensorList) else [(target, value)]
                for t, r in pairs:
                    t.copy_(split(r)[0].reshape(t.shape))
            if name == self.broken:            # a softmax whose rows sum to 2
                given["y"].mul_(2)
        self.timed(name, call)

    def timed(self, name, fn):
        began = time.perf_counter()
        out = fn()
        self.seconds[name] += time.perf_counter() - began
        self.calls[name] += 1
        return out

    def settle(self, where):
        pass


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


def test_the_twin_trains_on_one_thread_on_the_cpu(data, monkeypatch):
    """A tiny model: more threads only wait for each other, and its time per epoch swings."""
    seen = []
    real = model._train_twin
    monkeypatch.setattr(model, "_train_twin", lambda *a: seen.append(torch.get_num_threads()) or real(*a))
    before = torch.get_num_threads()
    model.train_twin(data, model.Recipe(epochs=1))
    assert seen == [model.CPU_THREADS] == [1]
    assert torch.get_num_threads() == before


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


# ---------------------------------------------------------------------------- training on kernels

@pytest.fixture(scope="module")
def on_references(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("capstone")
    learner = train_kernels.on_kernels(ReferenceKernels(), data, model.Recipe(), out)
    return learner, out


def _run(learner, twin):
    return {"recipe": {"lr": 1e-3, "weight_decay": 1e-2, "batch": 64, "epochs": 50, "seed": 0},
            "data": {"train": 1437, "test": 360}, "device": "cpu", "learner": learner,
            "twin": {"losses": twin.losses, "epoch_seconds": twin.epoch_seconds,
                     "test_accuracy": twin.test_accuracy, "device": "cpu"}}


def test_training_on_the_references_follows_the_twin_and_passes_every_bar(on_references, twin):
    learner, _ = on_references
    assert "error" not in learner, learner.get("error")
    assert learner["op_calls"] == {"linear_forward": 2300, "softmax": 1150, "glue: loss gradient": 1150,
                                   "glue: the loss, for the curve": 1150, "linear_backward": 2300,
                                   "adamw_multi": 1150}
    worst = max(abs(a - b) / b for a, b in zip(learner["losses"][:20], twin.losses[:20]))
    assert worst < 1e-5, worst          # float64 references against float32 PyTorch: far inside 1e-3
    verdicts = bars(_run(learner, twin), CONFIG)
    assert [b.passed for b in verdicts] == [True, True, True, True], verdicts
    assert learner["onnx"]["agree"] == 1.0 or not learner["onnx"]["checked"]


def test_a_softmax_that_does_not_normalise_misses_the_loss_bar(data, twin, tmp_path):
    learner = train_kernels.on_kernels(ReferenceKernels(broken="softmax"), data, model.Recipe(epochs=1), tmp_path)
    verdicts = {b.what: b for b in bars(_run(learner, twin), CONFIG)}
    loss = verdicts["loss of the first 20 steps"]
    assert loss.passed is False and float(loss.got) > 0.1


def test_the_report_shows_accuracy_bars_and_where_the_time_went(on_references, twin):
    from rich.console import Console

    from grader.model import KernelCheck, plot_png, render_rich
    learner, out = on_references
    run = _run(learner, twin)
    (plot,) = mlp_report.plots(run, CONFIG)
    (out / plot.file).write_bytes(plot_png(plot))
    kernels = [KernelCheck(k["exercise"], k["task"], k["role"], "ready", "correct") for k in CONFIG["kernels"]]
    result = ModelResult("solutions", kernels, TrainResult(values=run), bars(run, CONFIG),
                         tables=mlp_report.tables(run, CONFIG), out=str(out), plots=[plot.file])
    assert result.exit_code == ExitCode.PASSED
    console = Console(record=True, width=160, file=io.StringIO())
    console.print(render_rich(result))
    text = console.export_text()
    assert "Passed: a model trained and served on nothing but your kernels matches PyTorch." in text
    assert "your kernels (fp32)" in text and "PyTorch twin (fp32)" in text and "INT8 W8A8" in text
    assert "97.5%" in text and "MISSED" not in text
    names = [row[0] for row in op_rows(run)]
    assert set(names[:-1]) == {"linear_forward", "softmax", "glue: loss gradient", "glue: the loss, for the curve",
                               "linear_backward", "adamw_multi"}
    assert names[-1].startswith("launches, Python")
    assert [row[0] for row in accuracy_rows(run)][:3] == ["your kernels (fp32)", "PyTorch twin (fp32)",
                                                             "your kernels, INT8 W8A8"]
    html = render_html(result)
    assert html.count("<img src=\"data:image/png;base64,") == 1 and "Your kernels" in html
    assert json.loads(result.to_json())["exit_code"] == 0


def test_missing_kernels_are_named_and_nothing_stands_in(twin):
    from grader.model import KernelCheck, headline
    kernels = [KernelCheck(k["exercise"], k["task"], k["role"], "missing" if k["task"] == "softmax" else "ready",
                           "softmax.cu has no kernel yet" if k["task"] == "softmax" else "correct")
               for k in CONFIG["kernels"]]
    run = {"twin": {"losses": twin.losses, "epoch_seconds": twin.epoch_seconds, "test_accuracy": twin.test_accuracy}}
    result = ModelResult("exercises", kernels, TrainResult(values=run), bars(run, CONFIG))
    assert result.exit_code == ExitCode.FAILED
    assert headline(result).startswith("These kernels are missing or not yet correct, and nothing stands in "
                                       "for them: softmax (04).")
    assert all(b.passed is None for b in result.bars)


def _grade_model(*args, cwd):
    return subprocess.run([sys.executable, "-m", "grader.cli", "model", *args], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)


@pytest.mark.skipif(__import__("grader.device", fromlist=["probe"]).probe().gpu is not None,
                    reason="this checks the report without a GPU; tests/test_gpu_capstone.py runs it on one")
def test_grade_model_without_a_gpu_names_the_stubs_and_shows_the_twin(tmp_path):
    proc = _grade_model("--out", str(tmp_path / "report"), cwd=tmp_path)
    assert proc.returncode == ExitCode.FAILED, proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "compiling linear_forward, linear_backward (exercise 02); checking needs an NVIDIA GPU" in proc.stderr
    assert "checking linear_forward" not in proc.stderr
    assert "torch.optim.AdamW, F.cross_entropy, on the CPU, 1 thread" in proc.stdout
    assert "Capstone: a digits classifier (64 -> 128 -> 10, GELU) trained on your kernels" in proc.stdout
    assert "Accuracy on the 360 test images" in proc.stdout
    assert "These kernels are missing or not yet correct, and nothing stands in for them: linear_forward (02), " \
           "softmax (04), linear_backward (02), adamw_multi (03), quantize_int8 (05), gemm_w8a8 (05)." in \
           " ".join(proc.stdout.split())
    assert proc.stdout.count("MISSING: ") == 6 and "has no kernel yet (the stub as handed out)" in proc.stdout
    assert "PyTorch twin (fp32)" in proc.stdout and "97.5%" in proc.stdout
    assert (tmp_path / "report" / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    proc = _grade_model("--submission", str(ROOT / "solutions"), "--out", str(tmp_path / "r2"), "--json",
                        cwd=tmp_path)
    assert proc.returncode == ExitCode.NOT_GRADED, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert {k["status"] for k in result["kernels"]} == {"not run"}
    assert result["notice"].startswith("Your kernels compiled; checking them and training on them needs an NVIDIA GPU")
    assert result["run"]["values"]["twin"]["test_accuracy"] >= 0.97


def test_the_capstone_is_found_by_its_toml_and_its_bars_live_beside_it():
    from grader.model import capstone_folder, judge
    assert capstone_folder() == CAPSTONE
    for name in ("mlp", "gpt"):
        model = load_capstone(name)
        assert {model["train"], model["report"]} <= {p.name for p in CAPSTONE.iterdir()}
        assert judge({}, model) and all(b.passed is None for b in judge({}, model))
    grader_text = "".join(p.read_text() for p in (ROOT / "grader").glob("*.py"))
    for word in (CAPSTONE.name, "digits", "64 -> 128", "twin_points", "loss_rtol", "int8_points", "gpt", "GPT",
                 "Transformer", "mlp", "val_rtol", "fp8_rtol", "bits per byte", "epoch mean"):
        assert word not in grader_text, word


def test_the_notebook_shows_the_report_once(twin, tmp_path):
    """In a notebook's kernel rich writes what it prints into the notebook too: the HTML report
    must not add a second copy."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed: pip install -e '.[course]'")
    pytest.importorskip("ipykernel", reason="ipykernel is not installed: pip install -e '.[course]'")
    run = {"twin": {"losses": twin.losses[:40], "epoch_seconds": twin.epoch_seconds[:2], "test_accuracy": 0.975,
                    "about": "torch.optim.AdamW, F.cross_entropy, on the CPU, 1 thread"}}
    (tmp_path / "run.json").write_text(json.dumps(run))
    code = ("import json\nfrom grader.model import KernelCheck, ModelResult, TrainResult, judge, load_capstone, report_module\n"
            "capstone = load_capstone('mlp')\nrun = json.load(open('run.json'))\n"
            "kernels = [KernelCheck(k['exercise'], k['task'], k['role'], 'missing', 'no kernel yet') "
            "for k in capstone['kernels']]\n"
            "report = ModelResult('exercises', kernels, TrainResult(values=run), judge(run, capstone), "
            "tables=report_module(capstone).tables(run, capstone), model=capstone['model'])\n"
            "report")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    env_path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    os.environ["PYTHONPATH"], saved = env_path, os.environ.get("PYTHONPATH")
    try:
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved
    shown = [o for o in nb.cells[0].outputs if "Your kernels" in json.dumps(o.get("data", {})) + o.get("text", "")]
    assert len(shown) == 1, [o.output_type for o in nb.cells[0].outputs]
    assert "text/html" in shown[0].data and "on the CPU, 1 thread" in shown[0].data["text/html"]


@pytest.mark.parametrize("where, fragment", [
    ("a file", "is a file; --out takes a folder"),
    ("below a file", "cannot write the report into"),
    pytest.param("a read-only folder", "cannot write the report into", marks=pytest.mark.skipif(
        os.geteuid() == 0, reason="root may write into a read-only folder")),
])
def test_grade_model_says_when_out_cannot_take_the_report(where, fragment, tmp_path):
    (tmp_path / "file").write_text("not a folder\n")
    (tmp_path / "locked").mkdir(mode=0o500)
    out = {"a file": tmp_path / "file", "below a file": tmp_path / "file" / "report",
           "a read-only folder": tmp_path / "locked" / "report"}[where]
    began = time.monotonic()
    proc = _grade_model("--out", str(out), cwd=tmp_path)
    assert proc.returncode == ExitCode.USAGE, proc.stderr[-2000:]
    assert fragment in " ".join(proc.stderr.split()) and "Traceback" not in proc.stdout + proc.stderr
    assert time.monotonic() - began < 30          # said before any kernel is compiled or any model trained


def test_grade_model_rejects_a_submission_that_is_not_a_folder(tmp_path):
    proc = _grade_model("--submission", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert proc.returncode == ExitCode.USAGE
    assert "the submission folder" in proc.stderr and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr
