"""Exercise specifications: every exercise.toml loads, and agrees with its stub, baseline,
hidden solution and float64 reference. Plus the small expression language of the
shape and roofline formulas, and the messages for broken exercise.toml files.
"""
from __future__ import annotations

import keyword
import math
import re
from pathlib import Path

import pytest
import torch

from grader import spec
from grader.tolerance import split
from grader.inspect_source import check
from grader.spec import Expr, SpecError, Task

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = spec.discover()
TASKS = [(ex, task) for ex in EXERCISES for task in ex.tasks]
TASK_IDS = [f"{ex.id}-{task.name}" for ex, task in TASKS]
# The reference is run at the smallest sizes only: float64 on a CPU.
SMALL_ELEMENTS = 1 << 16


def test_exercises_are_discovered():
    folders = sorted(p.parent.name for p in (ROOT / "exercises").glob("*/exercise.toml"))
    assert [ex.slug for ex in EXERCISES] == folders
    assert "01_foundations" in folders
    for ex in EXERCISES:
        assert ex.id == ex.slug.split("_", 1)[0]
        assert ex.tasks


def test_find_accepts_number_name_and_path():
    ex = spec.find("01")
    assert spec.find("1").folder == ex.folder
    assert spec.find("01_foundations").folder == ex.folder
    assert spec.find(str(ex.folder)).folder == ex.folder


def test_find_unknown_exercise_lists_the_known_ones():
    with pytest.raises(SpecError) as err:
        spec.find("99")
    assert "there is no exercise '99'" in str(err.value)
    for ex in EXERCISES:
        assert ex.slug in str(err.value)


# --------------------------------------------------------------------------- sources agree with the spec

def sources(ex: spec.Exercise, task: Task) -> dict[str, Path]:
    return {"stub": ex.folder / task.source,
            "baseline": ex.folder / task.baseline,
            "solution": ROOT / "solutions" / ex.slug / task.source}


@pytest.mark.parametrize("ex, task", TASKS, ids=TASK_IDS)
def test_sources_exist_and_match_the_prototype(ex, task):
    for kind, path in sources(ex, task).items():
        assert path.is_file(), f"{kind} {path} is missing"
        findings = check(path, task)
        assert findings == [], f"{kind} {path.name}: " + "; ".join(f"line {f.line}: {f.message}" for f in findings)


@pytest.mark.parametrize("ex, task", TASKS, ids=TASK_IDS)
def test_prototype_appears_in_the_stub(ex, task):
    """The stub shows the learner the exact declaration the grader calls."""
    stub = " ".join((ex.folder / task.source).read_text().split())
    assert task.prototype().rstrip(";") + " {" in stub


def with_local_headers(path: Path) -> str:
    """A source and the headers next to it that it includes (#include "..."), as one text."""
    text = path.read_text()
    for name in re.findall(r'^\s*#\s*include\s*"([^"]+)"', text, re.MULTILINE):
        if (path.parent / name).is_file():
            text += "\n" + with_local_headers(path.parent / name)
    return text


@pytest.mark.parametrize("ex, task", TASKS, ids=TASK_IDS)
def test_stub_is_not_the_solution(ex, task):
    paths = sources(ex, task)
    assert paths["stub"].read_text() != paths["solution"].read_text()
    assert "__global__" in with_local_headers(paths["solution"]), "the solution (or a header it includes) defines a kernel"


def test_prototype_spells_c_types():
    task = spec.find("01").task("transpose")
    assert task.prototype() == 'extern "C" void transpose(const float* in, float* out, int rows, int cols);'


# --------------------------------------------------------------------------- reference agrees with the spec

@pytest.mark.parametrize("ex, task", TASKS, ids=TASK_IDS)
def test_reference_parameters_are_the_arguments_but_the_outputs(ex, task):
    fn = ex.reference_function(task)
    want = [a.name + "_" if keyword.iskeyword(a.name) else a.name for a in task.reference_args]
    assert spec.reference_parameters(fn) == want


def test_keyword_parameter_gets_trailing_underscore():
    ex = spec.find("01")
    assert spec.reference_parameters(ex.reference_function(ex.task("transpose")))[0] == "in_"


def small_cases(task: Task) -> list[spec.Case]:
    return [c for c in task.cases if sum(a.numel(c) for a in task.tensors) <= SMALL_ELEMENTS]


def reference_inputs(task: Task, case: spec.Case, gen: torch.Generator, functions=None) -> list:
    """What the grader passes a reference: float64 tensors (lists of them), element counts, scalars;
    integers with a range drawn in it, derived inputs computed by their function of ``functions``."""
    scalars = task.scalar_values(case, 0)
    values = dict(scalars)
    for a in task.reference_args:
        if a.role == "scalar" or a.derive:
            continue
        if a.sizes_of:
            values[a.name] = torch.tensor([math.prod(s) for s in case.lists[a.sizes_of]], dtype=torch.int64)
            continue
        if a.range is not None:
            low, high = a.bounds(scalars)
            tensors = [torch.randint(low, high, s, generator=gen).to(torch.float64) for s in a.shapes(case)]
        else:
            tensors = [torch.randn(s, generator=gen, dtype=torch.float64).abs() for s in a.shapes(case)]
        values[a.name] = tensors if a.list else tensors[0]
    for a in task.reference_args:
        if a.derive:
            fn = getattr(functions, a.derive)
            values[a.name] = fn(**{p: values[p] for p in spec.reference_parameters(fn)})
    return [values[a.name] for a in task.reference_args]


@pytest.mark.parametrize("ex, task", TASKS, ids=TASK_IDS)
def test_derived_inputs_name_functions_of_the_reference_module(ex, task):
    """A derived input's function exists and takes only the task's other inputs and scalars."""
    module = ex.load_reference()
    names = {a.name for a in task.args if not a.derive and a.role in ("in", "scalar")}
    for a in task.args:
        if a.derive:
            fn = getattr(module, a.derive, None)
            assert fn is not None, f"{a.name}: reference.py has no {a.derive}()"
            assert set(spec.reference_parameters(fn)) <= names, (a.name, a.derive)


@pytest.mark.parametrize("ex, task", TASKS, ids=TASK_IDS)
def test_reference_output_shapes_match_the_spec(ex, task):
    fn = ex.reference_function(task)
    cases = small_cases(task)
    assert cases, "every task needs cases small enough to check on a CPU"
    gen = torch.Generator().manual_seed(0)
    for case in cases:
        with torch.no_grad():
            got = fn(*reference_inputs(task, case, gen, ex.load_reference()))
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(task.results)
        for out, arg in zip(got, task.results):
            outs = list(out) if arg.list else [out]
            # A value with a per-element allowance (grader.tolerance.Within): both must fit the spec.
            outs = [t for o in outs for t in split(o) if t is not None]
            assert [tuple(o.shape) for o in outs] == arg.shapes(case) * (len(outs) // len(arg.shapes(case))), \
                f"{arg.name} at {case.describe()}"
            assert all(o.dtype == torch.float64 and bool(torch.isfinite(o).all()) for o in outs)


def test_ex01_references_compute_the_right_thing():
    ex = spec.find("01")
    ref = ex.load_reference()
    a, b = torch.arange(5, dtype=torch.float64), torch.ones(5, dtype=torch.float64)
    assert ref.vector_add(a, b, 5).tolist() == [1, 2, 3, 4, 5]
    assert ref.reduce_sum(a, 5).tolist() == [10]
    m = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    assert ref.transpose(m, 2, 3).tolist() == [[0, 3], [1, 4], [2, 5]]


# --------------------------------------------------------------------------- cases and benchmark

@pytest.mark.parametrize("ex, task", TASKS, ids=TASK_IDS)
def test_every_benchmark_is_one_of_the_cases(ex, task):
    """Every size that is timed is checked too; scalars that every call sets (an optimizer's
    step) are the calls' business, not the cases'."""
    per_call = set.intersection(*(set(call) for call in task.calls))
    for bench in task.benchmarks:
        values = {k: v for k, v in bench.values.items() if k not in per_call}
        assert (values, bench.lists) in [(c.values, c.lists) for c in task.cases]


def sizes(task: Task, case: spec.Case) -> list[int]:
    """The integer sizes of a case: its int scalars and every dimension of its lists."""
    ints = [v for a in task.scalars if a.dtype != "float32" and a.name in case.values for v in [case.values[a.name]]]
    return ints + [d for shapes in case.lists.values() for s in shapes for d in s]


@pytest.mark.parametrize("ex, task", TASKS, ids=TASK_IDS)
def test_cases_include_the_smallest_and_odd_sizes(ex, task):
    assert any(1 in sizes(task, c) for c in task.cases), "a case with some size 1"
    assert any(any(v % 2 == 1 and v > 1 for v in sizes(task, c)) for c in task.cases), "an odd size > 1"


@pytest.mark.parametrize("ex, task", TASKS, ids=TASK_IDS)
def test_formulas_evaluate_at_every_benchmark(ex, task):
    for bench in task.benchmarks:
        flops, nbytes = task.work(bench)
        assert flops >= 0 and nbytes > 0
        # The byte formula is the least traffic: every input read once, every output written once,
        # state updated in place read once and written once. A task may need more, never less: a
        # norm must be complete before the first element is scaled, so clipping reads twice.
        moved = sum(a.nbytes(bench) * (2 if a.role == "inout" else 1) for a in task.tensors if not a.sizes_of)
        assert moved * 0.99 <= nbytes <= moved * 1.5, bench.describe()


def test_ex01_benchmark_is_large_enough_to_measure_bandwidth():
    for task in spec.find("01").tasks:
        elements = sum(a.numel(task.benchmarks[0]) for a in task.inputs)
        assert elements >= 2 ** 26, task.name


# --------------------------------------------------------------------------- expressions

@pytest.mark.parametrize("text, env, expected", [
    ("12 * n", {"n": 5}, 60),
    ("(n + 3) // 4 - n % 4 + 2 ** k", {"n": 10, "k": 3}, 3 - 2 + 8),
    ("n / 4", {"n": 10}, 2.5),
    ("-n + 1", {"n": 3}, -2),
    ("2 * s * (s + 1) if causal else 4 * s * s", {"s": 3, "causal": 1}, 24),
    ("2 * s * (s + 1) if causal else 4 * s * s", {"s": 3, "causal": 0}, 36),
    ("1 if n > 4 else 0", {"n": 5}, 1),
    ("1 if n == 4 else 0", {"n": 5}, 0),
    ("min(a, b) + max(a, b, 7)", {"a": 2, "b": 5}, 9),
    ("ceil_div(n, 32)", {"n": 33}, 2),
    ("1.5 * n", {"n": 2}, 3.0),
])
def test_expr_evaluates(text, env, expected):
    assert Expr(text)(env) == expected


def test_expr_names_are_the_scalars_it_uses():
    assert Expr("min(rows, 4) * cols if causal else 0").names() == {"rows", "cols", "causal"}


@pytest.mark.parametrize("text, fragment", [
    ("n.bit_length()", "is not allowed"),
    ("__import__('os').system('true')", "is not allowed"),
    ("open('x')", "is not allowed"),
    ("abs(n)", "is not allowed"),
    ("[n]", "is not allowed"),
    ("lambda: n", "is not allowed"),
    ("m * 2", "'m', which is not a scalar of this task"),
    ("'n'", "is not allowed"),
    ("min(a=n)", "is not allowed"),
])
def test_expr_rejects_unsafe_or_unknown(text, fragment):
    with pytest.raises(SpecError) as err:
        Expr(text)({"n": 3})
    assert fragment in str(err.value)
    assert repr(text) in str(err.value)


# --------------------------------------------------------------------------- broken exercise.toml

GOOD_TASK = """
[[tasks]]
name = "scale"
source = "scale.cu"
baseline = "baselines/scale.cu"
flops = "n"
bytes = "8 * n"
min_speedup = 2.0
args = [
  { name = "x", role = "in", dtype = "float32", shape = ["n"] },
  { name = "y", role = "out", dtype = "float32", shape = ["n"] },
  { name = "n", role = "scalar", dtype = "int32" },
]
cases = [{ n = 1 }, { n = 33 }]
benchmark = { n = 33 }
"""
HEADER = 'id = "99"\ntitle = "Scratch"\n'


def write_exercise(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "99_scratch"
    folder.mkdir()
    (folder / "exercise.toml").write_text(text)
    return folder


def test_minimal_exercise_loads_with_defaults(tmp_path):
    ex = spec.load(write_exercise(tmp_path, HEADER + GOOD_TASK))
    task = ex.task("scale")
    assert (ex.id, ex.title, task.symbol, task.reference) == ("99", "Scratch", "scale", "scale")
    assert (task.rtol, task.atol, task.compute, task.condition) == (1e-5, 0.0, "fp32", "none")
    assert task.points.total == 2
    assert task.prototype() == 'extern "C" void scale(const float* x, float* y, int n);'


@pytest.mark.parametrize("change, fragment", [
    (lambda t: t.replace('title = "Scratch"\n', ""), "missing required field 'title'"),
    (lambda t: t.replace('baseline = "baselines/scale.cu"\n', ""), "missing required field 'baseline'"),
    (lambda t: t.replace("min_speedup = 2.0", "min_speedup = 0"), "min_speedup must be positive"),
    (lambda t: t.replace('role = "out"', 'role = "output"'), "argument 'y' has role 'output'"),
    (lambda t: t.replace('dtype = "int32"', 'dtype = "int16"'), "argument 'n' has dtype 'int16'"),
    (lambda t: t.replace('name = "n", role = "scalar", dtype = "int32"', 'name = "n", role = "scalar", dtype = "float64"'),
     "scalar 'n' must be one of"),
    (lambda t: t.replace('shape = ["n"] },\n  { name = "y"', 'shape = ["m"] },\n  { name = "y"'),
     "shape of 'x' uses ['m']"),
    (lambda t: t.replace('bytes = "8 * n"', 'bytes = "8 * size"'), "formula '8 * size' uses ['size']"),
    (lambda t: t.replace("{ n = 33 }]", "{ m = 33 }]"), "missing ['n']; unknown ['m']"),
    (lambda t: t.replace('flops = "n"', 'flops = "n"\ncompute = "fp64"'), "compute must be one of"),
    (lambda t: t.replace('flops = "n"', 'flops = "n"\ncondition = "rel"'), "condition must be 'none' or 'abs'"),
    (lambda t: t.replace('  { name = "y", role = "out", dtype = "float32", shape = ["n"] },\n', ""),
     "a task needs at least one 'out' or 'inout' argument"),
    (lambda t: t.replace("{ n = 33 }]", "{ n = 1.5 }]"), "n = 1.5, but n is an integer (int32)"),
    (lambda t: t.replace("{ n = 33 }]", "{ n = 4294967296 }]"), "n = 4294967296 does not fit in int32"),
    (lambda t: t.replace("{ n = 33 }]", '{ n = "33" }]'), "n is a int32 scalar: give a number"),
    (lambda t: t.replace('role = "in", dtype = "float32"', 'role = "in", dtype = "float32", fill = "gauss"'),
     "argument 'x' has fill 'gauss'"),
    (lambda t: t.replace('{ name = "x", role = "in", dtype = "float32", shape = ["n"] }',
                         '{ name = "x", role = "in", dtype = "float32", list = "ts", shape = ["n"] }'),
     "argument 'x' needs exactly one of 'shape'"),
    (lambda t: t.replace('{ name = "x", role = "in", dtype = "float32", shape = ["n"] }',
                         '{ name = "x", role = "in", dtype = "float32", shape = ["n"], rtol = 0.1 }'),
     "argument 'x' is an input; tolerances belong to outputs"),
    (lambda t: t.replace('{ name = "n", role = "scalar", dtype = "int32" }',
                         '{ name = "n", role = "scalar", dtype = "int32", length_of = "ts" }'),
     "refers to the list 'ts', but no argument has list = 'ts'"),
    (lambda t: t.replace("benchmark = { n = 33 }", "benchmark = []"), "'benchmark' is empty"),
    (lambda t: t.replace("benchmark = { n = 33 }", "benchmark = [{ n = 33 }, { k = 2 }]"),
     "benchmark: case {'k': 2} must set exactly"),
    (lambda t: t.replace("min_speedup = 2.0", 'min_speedup = 2.0\nbuild = { flags = ["O3"] }'),
     "build.flags must be a list of nvcc options"),
    (lambda t: t.replace("min_speedup = 2.0", 'min_speedup = 2.0\nbuild = { arch = { sm_90 = "hopper" } }'),
     "build.arch maps a GPU's architecture"),
    (lambda t: t.replace("min_speedup = 2.0", 'min_speedup = 2.0\nbuild = { target = "sm_90a" }'),
     "build has unknown keys ['target']"),
    (lambda t: t.replace("min_speedup = 2.0", "min_speedup = 2.0\ncalls = [{ m = 1 }]"),
     "calls[0] sets 'm', which is not a scalar a case sets"),
    (lambda t: t.replace("{ n = 33 }]", "{ n = 33, fill = { y = \"zeros\" } }]"),
     "fill must map input or inout arguments (['x'])"),
    (lambda t: t.replace('{ name = "y", role = "out", dtype = "float32", shape = ["n"] }',
                         '{ name = "y", role = "out", dtype = "float32", shape = ["n"], colour = 1 }'),
     "argument 'y' has unknown keys ['colour']"),
    (lambda t: t.replace("cases = [{ n = 1 }, { n = 33 }]", "cases = []"), "'cases' is empty"),
    (lambda t: t + GOOD_TASK, "task names must be unique"),
    (lambda t: t.split("[[tasks]]")[0], "at least one [[tasks]] entry"),
    (lambda t: t.replace("[[tasks]]", "[[tasks]\n"), "exercise.toml"),
])
def test_broken_exercise_toml_names_the_field(tmp_path, change, fragment):
    text = change(HEADER + GOOD_TASK)
    assert text != HEADER + GOOD_TASK
    folder = write_exercise(tmp_path, text)
    with pytest.raises(SpecError) as err:
        spec.load(folder)
    message = str(err.value)
    assert fragment in message
    assert str(folder / "exercise.toml") in message


def test_errors_inside_a_task_name_the_task(tmp_path):
    folder = write_exercise(tmp_path, HEADER + GOOD_TASK.replace("min_speedup = 2.0", "min_speedup = -1"))
    with pytest.raises(SpecError, match=r"\[task scale\]"):
        spec.load(folder)


def test_missing_exercise_toml(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        spec.load(tmp_path)


def test_unknown_task_lists_the_tasks():
    with pytest.raises(SpecError) as err:
        spec.find("01").task("matmul")
    assert "has no task 'matmul'" in str(err.value)
    assert "vector_add, reduce_sum, transpose" in str(err.value)


def test_shapes_and_work_of_a_case():
    task = spec.find("01").task("transpose")
    case = spec.Case({"rows": 3, "cols": 5})
    assert [a.shapes(case) for a in task.inputs + task.outputs] == [[(3, 5)], [(5, 3)]]
    assert task.work(case) == (0.0, 8.0 * 15)
    assert task.outputs[0].numel(case) == 15 and task.outputs[0].nbytes(case) == 60


# --------------------------------------------------------------------------- the spec's vocabulary

STATEFUL = HEADER + """
[[tasks]]
name = "step"
source = "step.cu"
baseline = "baselines/step.cu"
flops = "3 * numel(params)"
bytes = "16 * numel(params)"
min_speedup = 2.0
build = { flags = ["-DFAST=1"], arch = { sm_90 = "sm_90a" } }
calls = [{ t = 1 }, { t = 2 }, { t = 10000 }]
args = [
  { name = "p", role = "inout", dtype = "float32", list = "params" },
  { name = "g", role = "in", dtype = "float32", list = "params" },
  { name = "v", role = "inout", dtype = "float32", list = "params", fill = "positive", rtol = 1e-4 },
  { name = "sizes", role = "in", dtype = "int64", sizes_of = "params" },
  { name = "count", role = "scalar", dtype = "int32", length_of = "params" },
  { name = "lr", role = "scalar", dtype = "float32" },
  { name = "t", role = "scalar", dtype = "int64" },
]
cases = [
  { params = [[1]], lr = 0.001 },
  { params = [[3, 5], { shapes = [[7], [2, 2]], repeat = 3 }], lr = 0.5, fill = { g = "zeros" } },
]
benchmark = [{ params = [[1]], lr = 0.001, t = 7 }, { params = [[3, 5], [7]], lr = 0.5, t = 7 }]
"""


def test_an_inout_list_task_with_typed_scalars_loads(tmp_path):
    task = spec.load(write_exercise(tmp_path, STATEFUL)).task("step")
    assert task.prototype() == ('extern "C" void step(float* const* p, const float* const* g, float* const* v, '
                                'const int64_t* sizes, int count, float lr, int64_t t);')
    assert [a.name for a in task.reference_args] == ["p", "g", "v", "sizes", "count", "lr", "t"]
    assert [a.name for a in task.results] == ["p", "v"]
    second = task.cases[1]
    assert second.lists["params"] == ((3, 5),) + ((7,), (2, 2)) * 3
    assert second.fills == {"g": "zeros"}
    # lr is a float32 scalar: it keeps its fraction, rounded as the kernel will see it.
    assert task.cases[0].values["lr"] == spec.float32(0.001) != 0
    assert task.scalar_values(second, 2) == {"count": 7, "lr": 0.5, "t": 10000}
    assert [c.values.get("t") for c in task.cases] == [None, None]
    assert task.work(task.benchmarks[1]) == (3.0 * 22, 16.0 * 22)
    assert [a.shapes(task.benchmarks[1]) for a in task.args if a.name in ("g", "sizes")] == [[(3, 5), (7,)], [(2,)]]
    assert (task.build.flags, task.build.target("sm_90"), task.build.target("sm_80")) == (("-DFAST=1",), "sm_90a", "sm_80")
    v = next(a for a in task.args if a.name == "v")
    assert (v.fill, v.rtol, v.atol) == ("positive", 1e-4, None)


def test_every_dtype_has_its_c_type(tmp_path):
    text = (GOOD_TASK.replace('name = "x", role = "in", dtype = "float32"', 'name = "x", role = "in", dtype = "bfloat16"')
            .replace('name = "y", role = "out", dtype = "float32"', 'name = "y", role = "out", dtype = "float8_e4m3fn"'))
    task = spec.load(write_exercise(tmp_path, HEADER + text)).task("scale")
    assert task.prototype() == 'extern "C" void scale(const __nv_bfloat16* x, __nv_fp8_e4m3* y, int n);'
    assert {d.name: d.c_type for d in spec.DTYPES.values()} == {
        "float32": "float", "float64": "double", "float16": "__half", "bfloat16": "__nv_bfloat16",
        "float8_e4m3fn": "__nv_fp8_e4m3", "float8_e5m2": "__nv_fp8_e5m2", "int8": "int8_t", "uint8": "uint8_t",
        "int32": "int", "int64": "int64_t"}


def test_a_case_without_a_scalar_that_every_call_sets_still_needs_it_in_a_benchmark(tmp_path):
    text = STATEFUL.replace("{ params = [[1]], lr = 0.001, t = 7 }, ", "{ params = [[1]], lr = 0.001 }, ")
    with pytest.raises(SpecError, match=r"benchmark: case .* missing \['t'\]"):
        spec.load(write_exercise(tmp_path, text))


@pytest.mark.parametrize("bad, fragment", [
    ("[[0]]", "a tensor shape is a list of positive integers"),
    ("[]", "an empty list of tensors"),
    ("[{ shapes = [[1]], repeat = 0 }]", "repeat in params must be a positive integer"),
    ("[{ shape = [[1]] }]", "a group in params is { shapes"),
])
def test_bad_lists_of_shapes_are_named(tmp_path, bad, fragment):
    text = STATEFUL.replace("{ params = [[1]], lr = 0.001 },", f"{{ params = {bad}, lr = 0.001 }},")
    folder = write_exercise(tmp_path, text)
    with pytest.raises(SpecError) as err:
        spec.load(folder)
    assert fragment in str(err.value) and "[task step] cases" in str(err.value)


def test_float32_scalars_must_be_finite_float32(tmp_path):
    with pytest.raises(SpecError, match="lr = 1e\\+39 is not a finite float32"):
        spec.load(write_exercise(tmp_path, STATEFUL.replace("lr = 0.5, fill", "lr = 1e39, fill")))


def test_expressions_count_the_elements_of_a_list():
    env = {"params": [[3, 5], [7]], "n": 2}
    assert Expr("numel(params)")(env) == 22
    assert Expr("len(params) * n")(env) == 4
    with pytest.raises(SpecError, match="numel\\(\\) takes a list of tensors"):
        Expr("numel(n)")(env)
