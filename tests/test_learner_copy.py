"""A learner's copy of the course, as `grade course learner-copy` writes it: no solution and no
answer in it, and derivation checks that still tell right from wrong on the spot, with the figures
of the GPU it was made for.

The copy is made for this machine (no --gpu), for an H100 and for an H200 (a copy is made once per
GPU: here, without a GPU, this machine's copy is the H200's). Then:

* no line of any reference solution is in it beyond the stubs' signatures and the public
  baselines, and no function body of the hidden answers;
* no hidden answer of any prompt is in it, in any number format its checker accepts (see
  ``accepted_formats``);
* every notebook runs headless in a Jupyter kernel that imports the copy's grader: with the hidden
  answers in its answer cells every check passes, and with wrong answers every check fails.
"""
from __future__ import annotations

import ast
import json
import math
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient", reason="nbclient runs the notebooks headless: pip install -e '.[course]'")

from course_helpers import course_cli  # noqa: E402

from grader import spec  # noqa: E402
from grader.course import defined_names, function_bodies, hidden_answers  # noqa: E402
from grader.derivations import answer_key, core  # noqa: E402
from grader.learner_copy import choose_gpu, learner_tests, record_keys  # noqa: E402
from grader.result import ExitCode  # noqa: E402
from hardware.specs import GpuSpec, load_specs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = [ex for ex in spec.units() if ex.derivations_file]       # the capstone too


def _spec(key: str) -> GpuSpec:
    return next(s for s in load_specs() if s.key == key)


@dataclass
class Copy:
    gpu: GpuSpec
    root: Path
    said: str


def _make(target: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(course_cli("learner-copy", str(target), *args), cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False)


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> dict[str, Copy]:
    """One copy per GPU: this machine's (made without --gpu), the H100's and the H200's."""
    made: dict[str, Copy] = {}
    machine, _ = choose_gpu(None)
    for key, args in ((machine.key, ()), ("h100-sxm", ("--gpu", "H100")), ("h200-sxm", ("--gpu", "h200-sxm"))):
        if key in made:
            continue
        target = tmp_path_factory.mktemp(key) / "course"
        done = _make(target, *args)
        assert done.returncode == 0, done.stdout + done.stderr
        made[key] = Copy(_spec(key), target, done.stdout)
    assert sorted(made) == ["h100-sxm", "h200-sxm"]
    return made


# ================================================================== what is in it

def test_the_copy_holds_the_course_and_says_what_it_is(copies):
    for copy in copies.values():
        root = copy.root
        assert not (root / "solutions").exists()
        assert sorted(p.name for p in root.iterdir()) == [
            ".gitignore", "README.md", "exercises", "grader", "hardware", "learner-copy.toml", "pyproject.toml",
            "setup.sh", "tests"]
        assert f"made for the {copy.gpu.name}" in " ".join(copy.said.split())
        assert spec.learner_copy(root).gpu == copy.gpu
        readme = (root / "README.md").read_text()
        assert copy.gpu.name in readme and "oracle" in readme and "Graded points come" in readme
        for ex in spec.discover():
            mine = root / "exercises" / ex.folder.name
            for task in ex.tasks:
                assert (mine / task.source).read_bytes() == (ex.folder / task.source).read_bytes()
                assert (mine / task.baseline).read_bytes() == (ex.folder / task.baseline).read_bytes()
            for name in ("exercise.toml", "reference.py", ex.notebook):
                assert (mine / name).read_bytes() == (ex.folder / name).read_bytes(), name
            if ex.derivations_file:
                generated = (mine / ex.derivations_file).read_text()
                assert "load_prompts" in generated and (mine / "answer_key.npz").is_file()
                assert generated != (ex.folder / ex.derivations_file).read_text()


def test_the_copy_keeps_exactly_the_tests_that_need_no_solution(copies):
    root = next(iter(copies.values())).root
    kept = sorted(p.name for p in (root / "tests").glob("*.py"))
    for name in kept:
        assert not _reads_solutions(ast.parse((root / "tests" / name).read_text())), f"{name} reads solutions/"
    assert "test_course.py" not in kept and "test_notebooks.py" not in kept and "conftest.py" in kept
    assert "test_inspect.py" in kept and "test_tolerance.py" in kept
    expected, _ = learner_tests(ROOT / "tests")
    assert kept == sorted(p.name for p in expected)
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                               cwd=root, capture_output=True, text=True, timeout=600,
                               env={**_env(root), "PYTHONDONTWRITEBYTECODE": "1"})
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    assert " tests collected" in collected.stdout or " test collected" in collected.stdout


def _reads_solutions(tree: ast.AST) -> bool:
    """Whether a module names the folder solutions/ (a path part "solutions", or solutions_dir)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value == "solutions":
            return True
        if (isinstance(node, ast.Name) and node.id == "solutions_dir") or (
                isinstance(node, ast.alias) and node.name == "solutions_dir"):
            return True
    return False


# ================================================================== no solution

def _texts(root: Path) -> dict[Path, str]:
    out = {}
    for path in root.rglob("*"):
        if path.is_file():
            try:
                out[path] = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue            # answer_key.npz, profiles: binary
    return out


def _code_lines_of_notebooks() -> set[str]:
    """What every notebook's code cells say: answer templates (signatures) and the givens."""
    lines = set()
    for ex in spec.units():
        path = ex.folder / (ex.notebook or "")
        if path.is_file():
            for cell in json.loads(path.read_text())["cells"]:
                if cell["cell_type"] == "code":
                    lines |= {line.strip() for line in "".join(cell["source"]).splitlines()}
    return lines


def _infrastructure() -> str:
    """The grader, the microbenchmarks and the test kernels: what they share with a solution is an
    idiom (``constexpr int kThreads = 256;``, a warp's shuffle loop, an mma.sync operand list)."""
    return "\n".join(path.read_text() for folder in ("grader", "hardware", "tests")
                     for path in sorted((ROOT / folder).rglob("*"))
                     if path.is_file() and path.suffix in (".py", ".cu", ".cuh"))


def secret_lines(solution: Path) -> list[str]:
    """The lines of a reference solution or of the hidden answers that would give them away: every
    line of 20 characters or more that is not an #include, an import, a signature, part of the
    task's stub or of any public baseline, or an idiom of the grader and its test kernels."""
    where = solution.relative_to(ROOT / "solutions")
    exercise = ROOT / "exercises" / where.parts[0]
    public = "\n".join(p.read_text() for p in sorted((ROOT / "exercises").glob("*/baselines/*")))
    if solution.suffix == ".py":
        public += "\n" + "\n".join(sorted(_code_lines_of_notebooks()))
    elif (exercise / solution.name).is_file():
        public += "\n" + (exercise / solution.name).read_text()
    if "steps" in where.parts:      # a step of a ladder: the steps every ladder gives are public
        public += "\n" + "\n".join(p.read_text() for p in sorted((ROOT / "exercises").glob("*/steps/*/*.cu")))
    idioms = _infrastructure()
    found = []
    for line in solution.read_text().splitlines():
        line = line.strip()
        if len(line) < 20 or line in public or line in idioms or line.startswith(
                ("#include", "import ", "from ", "def ", '"""')):
            continue
        found.append(line)
    return found


def test_no_line_of_any_solution_is_in_the_copy(copies):
    root = copies["h100-sxm"].root
    texts = _texts(root)
    blob = "\n".join(texts.values())
    flat = " ".join(blob.split())
    checked = 0
    leaked = []
    for solution in sorted(p for p in (ROOT / "solutions").rglob("*") if p.is_file()):
        for line in secret_lines(solution):
            checked += 1
            if line in blob:
                where = next(p for p, t in texts.items() if line in t)
                leaked.append(f"{solution.relative_to(ROOT)}: {line!r} in {where.relative_to(root)}")
        if solution.name == "answers.py":
            for body in function_bodies(solution.read_text()):
                checked += 1
                if " ".join(body.split()) in flat:
                    leaked.append(f"{solution.relative_to(ROOT)}: a function body: {body[:80]!r}")
    assert checked > 500
    assert not leaked, "\n".join(leaked)


def test_no_compiled_solution_is_in_the_copy(copies):
    """A binary file could carry the solutions compiled (a profile embeds the PTX and machine code of
    the kernels it measured): none is in the copy but the answer keys, and no file is named after
    the solutions."""
    root = copies["h100-sxm"].root
    for path in root.rglob("*"):
        if path.is_file():
            assert "solution" not in path.name, path
            data = path.read_bytes()
            try:
                data.decode("utf-8")
                continue            # text: the line-by-line test above reads it
            except UnicodeDecodeError:
                assert path.name == "answer_key.npz" or (b".target sm_" not in data and b".nv.info" not in data), path


# ================================================================== no answer

def accepted_formats(value: float, rtol: float, atol: float) -> set[str]:
    """How the value can be written so that its checker accepts it: in full, rounded to any number
    of digits within the tolerance, with or without thousands separators, in scientific notation
    (1.23e+05, 1.23e5, 1.23 x 10^5), and as a power of two (2^-6, 2**-6) where it is one."""
    low, high = value - abs(value) * rtol - atol, value + abs(value) * rtol + atol
    candidates = {repr(value)}
    for digits in range(1, 10):
        candidates |= {f"{value:.{digits}g}", f"{value:.{digits - 1}e}", f"{value:.{digits}f}",
                       f"{value:,.{digits}f}"}
    if abs(value) < 1e16 and abs(value - round(value)) <= max(abs(value) * rtol, atol):
        candidates |= {str(int(round(value))), f"{int(round(value)):,}"}
    out = set()
    for text in candidates:
        if low <= float(text.replace(",", "")) <= high:
            out.add(text)
            if "e" in text:
                mantissa, exponent = text.split("e")
                out |= {f"{mantissa}e{int(exponent)}", f"{mantissa} x 10^{int(exponent)}"}
    if value > 0 and math.log2(value).is_integer():
        k = int(math.log2(value))
        out |= {f"2^{k}", f"2**{k}", f"2^({k})", f"2**({k})"}
    return out


def _digits(text: str) -> int:
    """Significant digits of a written number (2**-6 counts as its value does)."""
    if text.startswith("2"):
        match = re.fullmatch(r"2(?:\^|\*\*)\(?(-?\d+)\)?", text)
        if match:
            return len(repr(2.0 ** int(match.group(1))).replace(".", "").replace("-", "").strip("0"))
    mantissa = re.split(r"e| x 10", text)[0]
    return len(re.sub(r"[^0-9]", "", mantissa).strip("0"))


def _is_a_size(text: str) -> bool:
    """A power of two or three times one, from 64 up: every shape in the course is such a size (and
    2^26 = 67,108,864 is as often a length as it is an answer), so they are not searched for."""
    try:
        number = float(text.replace(",", ""))
    except ValueError:
        match = re.fullmatch(r"2(?:\^|\*\*)\(?(\d+)\)?", text)
        return bool(match) and int(match.group(1)) >= 6
    if number < 64 or not number.is_integer():
        return False
    n = int(number)
    return n & (n - 1) == 0 or (n % 3 == 0 and (n // 3) & (n // 3 - 1) == 0)


UNIT_WORDS_IGNORED = {"per", "max", "min", "the", "of", "fp32", "bf16", "1x1", "8x8", "us", "ms", "gb", "kib"}

# A number as prose writes it: 2^-6 or 2**(-6), else digits with thousands separators, a decimal
# part and an exponent (1.5e+03, 1.5 x 10^3), never a piece of a longer number or name, nor an
# operand of inline PTX (%112).
NUMBER = re.compile(r"(?<![\w.^*%])-?(?:2(?:\^|\*\*)\(?-?\d+\)?"
                    r"|\d(?:[\d,]*\d)?(?:\.\d+)?(?:[eE][-+]?\d+| x 10\^-?\d+)?)(?![\w^])")
NEXT_WORD = re.compile(r"\s+([A-Za-z]+)")


@dataclass
class Numbers:
    """The numbers a file writes, each where it first is; and those followed by a word (16 warps),
    unless they are a dimension of a shape (a 16 x 32 tile)."""

    text: str
    alone: dict[str, int]
    before_a_word: dict[tuple[str, str], int]

    @classmethod
    def of(cls, text: str) -> Numbers:
        alone, before = {}, {}
        for found in NUMBER.finditer(text):
            alone.setdefault(found.group(), found.start())
            word = NEXT_WORD.match(text, found.end())
            if word and text[max(0, found.start() - 2):found.start()] not in ("x ", "\u00d7 "):
                before.setdefault((found.group(), word.group(1).lower()), found.start())
        return cls(text, alone, before)

    def line(self, at: int) -> int:
        return self.text.count("\n", 0, at) + 1


def _tolerance(leaf: answer_key.Leaf) -> tuple[float, float]:
    if leaf.grid.kind == "log":
        return math.expm1(leaf.grid.width / 2), 0.0
    if leaf.grid.kind == "lin":
        return 0.0, leaf.grid.width / 2
    return 0.0, 0.0


def hidden_numbers(gpu: GpuSpec) -> list[tuple[str, str, float, float, float]]:
    """Every number a prompt asks for, with the GPU's figures: (exercise folder, question, value,
    rtol, atol), the tolerance its checker allows."""
    out = []
    for ex in EXERCISES:
        key, recorder = record_keys(ex, gpu, b"\0" * 16)
        for prompt in key.prompts:
            answer = recorder.answers[prompt.id]
            for part in prompt.parts:
                values = answer
                for name in part.path:
                    values = values[name]
                if isinstance(part, answer_key.NumbersPart):
                    items = [(q.key, values[q.key], q.leaf) for q in part.questions]
                else:
                    items = [(f"{row}.{field}", values[row][field], leaf)
                             for row, _, cells in part.rows for field, leaf in cells.items()]
                for name, value, leaf in items:
                    out.append((ex.folder.name, f"{prompt.id}.{name}", float(value), *_tolerance(leaf)))
    return out


def test_no_hidden_answer_is_in_the_copy_in_any_format_its_checker_accepts(copies):
    """Numbers of three significant digits or more are searched for everywhere; shorter ones, which
    prose is full of, next to a word of their question (16 warps) in their own exercise's folder.
    Figures of the GPU's spec sheet, which some prompts ask to look up, live in hardware/specs.toml
    and its test by design."""
    leaks = []
    for copy in copies.values():
        files = {p.relative_to(copy.root): Numbers.of(t) for p, t in _texts(copy.root).items()}
        sheet = {float(getattr(copy.gpu, name)) for name in ("sms", "boost_clock_mhz", "smem_per_sm_kb",
                                                             "regs_per_sm", "max_warps_per_sm",
                                                             "max_threads_per_block", "memory_bandwidth_gbs")}
        numbers = hidden_numbers(copy.gpu)
        assert len(numbers) > 100
        for folder, question, value, rtol, atol in numbers:
            words = {w.lower() for w in re.split(r"[._]", question.split(".", 1)[1]) if len(w) > 2
                     and w.lower() not in UNIT_WORDS_IGNORED}
            for text in sorted(accepted_formats(value, rtol, atol)):
                if _is_a_size(text):
                    continue
                for rel, found in files.items():
                    if _digits(text) >= 3:
                        if rel.name == "recorded.json":
                            continue          # measurements of the GPU, each under a key that names it
                        if value in sheet and (rel.parts[0] == "hardware" or rel.name == "test_hardware_specs.py"):
                            continue
                        at = found.alone.get(text)
                    elif rel.parts[:2] == ("exercises", folder):
                        at = next((found.before_a_word[text, w] for w in words if (text, w) in found.before_a_word),
                                  None)
                    else:
                        continue
                    if at is not None:
                        leaks.append(f"{copy.gpu.key}: {question} = {value:g} written {text!r} in {rel}:{found.line(at)}")
    assert not leaks, "\n".join(leaks)


def test_the_answer_keys_hold_digests_not_answers(copies):
    """What a key holds in readable form: inputs, shapes, tolerances, labels and hints. Its digests
    and phases are not the answers' bytes: a key made with another salt shares no digest."""
    copy = copies["h100-sxm"]
    for ex in EXERCISES:
        first = answer_key.load(copy.root / "exercises" / ex.folder.name / "answer_key.npz")
        again, _ = record_keys(ex, copy.gpu, b"another salt....")
        digests = {leaf.digest for p in again.prompts for leaf in _leaves(p)}
        mine = [leaf for p in first.prompts for leaf in _leaves(p)]
        assert mine and not digests & {leaf.digest for leaf in mine}
        assert all(leaf.phase is not None for leaf in mine if leaf.grid.kind != "exact")


def _leaves(prompt: answer_key.PromptKey) -> list[answer_key.Leaf]:
    def walk(output):
        return [x for o in output["seq"] for x in walk(o)] if isinstance(output, dict) else [output]
    leaves = [leaf for call in prompt.calls for leaf in walk(call.output)]
    for part in prompt.parts:
        if isinstance(part, answer_key.NumbersPart):
            leaves += [q.leaf for q in part.questions]
        else:
            leaves += [leaf for _, _, cells in part.rows for leaf in cells.values()]
    return leaves


# ================================================================== the notebooks, headless

SETUP = '''
def _wrong(value):
    """The same answer, every number and every result of every function off by far more than any tolerance."""
    import numpy as np
    if isinstance(value, dict):
        return {k: _wrong(v) for k, v in value.items()}
    if callable(value):
        return lambda *args, **kwargs: _wrong(value(*args, **kwargs))
    if isinstance(value, (tuple, list)):
        return type(value)(_wrong(v) for v in value)
    if isinstance(value, np.ndarray):
        return (value * 1.5 + 1).astype(value.dtype)
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        return value * 1.5 + 1
    return value


def _check_wrong(exercise, prompt, answer):
    from grader.derivations import check
    return check(exercise, prompt, _wrong(answer))
'''


def _env(root: Path) -> dict[str, str]:
    import os
    env = os.environ.copy()
    env.update(S2S_ROOT=str(root), PYTHONPATH=str(root), CUDA_VISIBLE_DEVICES="", S2S_FORKSERVER="0")
    env.pop(core.GPU_VARIABLE, None)
    return env


def _result(cell) -> str:
    shown = [o["data"]["text/plain"] for o in cell.outputs if o.output_type == "execute_result"]
    assert shown, cell.outputs
    return shown[-1]


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.folder.name)
@pytest.mark.parametrize("gpu", ["h100-sxm", "h200-sxm"])
def test_every_notebook_runs_headless_and_its_checks_tell_right_from_wrong(copies, gpu, exercise, tmp_path,
                                                                          monkeypatch):
    """Each notebook of the copy, in a Jupyter kernel that imports the copy's grader: the hidden
    answers in its answer cells pass every check, a wrong version of each fails it, and the
    grading cell runs (without a GPU it compiles the stubs and says what needs a GPU)."""
    from nbclient import NotebookClient

    copy = copies[gpu]
    folder = copy.root / "exercises" / exercise.folder.name
    answers = (ROOT / "solutions" / exercise.folder.name / "answers.py").read_text()
    nb = nbformat.read(folder / exercise.notebook, as_version=4)
    cells, checks = [nbformat.v4.new_code_cell(SETUP)], []
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        if cell.cell_type == "code" and any(t.startswith("answer:") for t in tags):
            cell.source = cell.source + "\n" + hidden_answers(answers, defined_names(cell.source))
        cells.append(cell)
        prompt = next((t.split(":", 1)[1] for t in tags if t.startswith("check:")), None)
        if prompt:
            wrong = nbformat.v4.new_code_cell(re.sub(r"^check\(", "_check_wrong(", cell.source.strip()))
            checks.append((prompt, cell, wrong))
            cells.append(wrong)
    nb.cells = cells
    for key, value in _env(copy.root).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("S2S_CACHE", str(tmp_path.parent / "s2s-cache"))
    monkeypatch.delenv(core.GPU_VARIABLE, raising=False)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()

    assert [p for p, _, _ in checks] == [p.id for p in exercise.load_derivations().PROMPTS]
    for prompt, right, wrong in checks:
        assert "passed=True" in _result(right) and "self_check=True" in _result(right), (prompt, _result(right))
        assert "passed=False" in _result(wrong), (prompt, _result(wrong))
    shown = "\n".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.output_type == "stream")
    if "reference_gpu" in "".join(c.source for c in nb.cells):
        assert f"{copy.gpu.name} (the GPU this copy of the course was made for)" in shown
    grading = next(c for c in nb.cells if "grade" in c.metadata.get("tags", []))
    assert not [o for o in grading.outputs if o.output_type == "error"], grading.outputs
    for leftover in folder.rglob("*"):
        assert leftover.suffix not in (".so", ".o"), leftover


# ================================================================== the keys' buckets, one by one

def _key_of(checker, answer, prompt="p", function_tolerance=None):
    """The key a Recorder writes while ``checker`` judges ``answer``, and the copy's checker made from it."""
    recorder = answer_key.Recorder(b"salt" * 4)
    prompt = core.Prompt(prompt, "a prompt", 1.0, checker, function_tolerance)
    with core.observed_by(recorder):
        result = core.run_prompt("99", prompt, answer)
    assert result.passed, result.message
    key = answer_key.AnswerKey("99", "h200-sxm", b"salt" * 4, [recorder.keys[prompt.id]], recorder.packer.arrays)
    return answer_key.checker(key.prompts[0], key), result.message


def _numbers(rtol=0.0, atol=0.0, truth=2424.24):
    def check(answer):
        return core.check_numbers(answer, (core.NumericQuestion("x", "a number", truth, rtol=rtol, atol=atol,
                                                                hint="think"),))
    return check


@pytest.mark.parametrize("truth", [2424.24, -0.0731, 7.5e-9])
def test_a_number_passes_within_its_relative_tolerance_and_fails_beyond_it(truth):
    check, message = _key_of(_numbers(rtol=0.02, truth=truth), {"x": truth})
    assert check({"x": truth}).passed and check({"x": truth}).message == message
    for inside in (0.999, 1.0195, 0.981, 1 + 1e-12):
        assert check({"x": truth * inside}).passed, inside
    for outside in (1.021, 0.979, -1.0, 1.5):
        verdict = check({"x": truth * outside})
        assert not verdict.passed and "must be within 2%" in verdict.message and "Hint: think" in verdict.message
    assert not check({"x": None}).passed and "not answered yet" in check({"x": None}).message
    assert "missing" in check({}).message


def test_absolute_and_exact_tolerances():
    check, _ = _key_of(_numbers(atol=0.01, truth=88.7228), {"x": 88.7228})
    assert check({"x": 88.715}).passed and check({"x": 88.73}).passed
    assert not check({"x": 88.70}).passed and not check({"x": 88.75}).passed
    check, _ = _key_of(_numbers(truth=16), {"x": 16})
    assert check({"x": 16}).passed and check({"x": 16.0}).passed and check({"x": np.int64(16)}).passed
    assert not check({"x": 16.000001}).passed and not check({"x": 17}).passed
    check, _ = _key_of(_numbers(rtol=0.02, truth=0.0), {"x": 0.0})
    assert check({"x": 0}).passed and check({"x": -0.0}).passed and not check({"x": 1e-30}).passed


def _functions(calls):
    def check(answer):
        refused = core.missing_functions(answer, ("f",))
        if refused:
            return refused
        for args in calls:
            called = core.call_learner("f", answer["f"], args, f"x of shape {np.shape(args[0])}")
            if called.problem:
                return core.Verdict(False, called.problem)
            if not np.allclose(called.value, np.exp(args[0]) * 2, rtol=1e-9):
                return core.Verdict(False, "wrong")
        return core.Verdict(True, "f is right: exp doubled. (the explanation a right answer earns)")
    return check


def test_a_function_is_called_with_the_checkers_inputs_and_its_results_compared_element_by_element():
    rng = np.random.default_rng(0)
    calls = [(rng.standard_normal((3, 4)),), (np.array([0.0, -700.0, 1e-30]),), (rng.standard_normal(1000),)]
    check, message = _key_of(_functions(calls), {"f": lambda x: np.exp(x) * 2})
    verdict = check({"f": lambda x: 2 * np.exp(x)})
    assert verdict.passed and verdict.message == message, verdict.message
    assert check({"f": lambda x: np.exp(x) * 2 * (1 + 1e-12)}).passed
    off = check({"f": lambda x: np.exp(x) * 2 * (1 + 1e-5)})
    assert not off.passed and "f: for x of shape (3, 4), its result has wrong values." in off.message
    assert "exp doubled" not in off.message, "the explanation is sealed until the answer is right"
    shape = check({"f": lambda x: np.exp(x).T * 2})
    assert "its result has shape (4, 3); it must have shape (3, 4)" in shape.message
    assert "lacks 'f'" in check({}).message
    assert "raised ZeroDivisionError" in check({"f": lambda x: 1 / 0}).message


def test_a_result_may_hold_infinities_where_the_truth_does():
    def log(x):
        with np.errstate(divide="ignore"):
            return np.log(x)

    def check(answer):
        refused = core.missing_functions(answer, ("f",))
        if refused:
            return refused
        called = core.call_learner("f", answer["f"], (np.array([0.0, 1.0, 2.0]),), "x = [0, 1, 2]")
        right = called.problem is None and np.allclose(called.value, [-np.inf, 0.0, math.log(2)])
        return core.Verdict(right, "ok" if right else "no")
    key_check, _ = _key_of(check, {"f": log})
    assert key_check({"f": log}).passed
    assert not key_check({"f": lambda x: np.array([-1e300, 0.0, math.log(2)])}).passed
    assert not key_check({"f": lambda x: np.array([np.inf, 0.0, math.log(2)])}).passed
    assert not key_check({"f": lambda x: np.array([-np.inf, np.nan, math.log(2)])}).passed


def test_a_state_passed_back_in_is_the_learners_own_previous_result():
    def check(answer):
        state = (0.0, 0.0)
        for x in (1.0, 5.0, -2.0):
            called = core.call_learner("step", answer["step"], (state, x), f"the score {x}")
            if called.problem:
                return core.Verdict(False, called.problem)
            state = called.value
        return core.Verdict(state == (5.0, 2), "ok")
    right = lambda s, x: (max(s[0], x), s[1] + 1 if x > -1 else s[1])  # noqa: E731
    key_check, _ = _key_of(check, {"step": right})
    seen = []

    def spy(s, x):
        seen.append(s)
        return right(s, x)
    assert key_check({"step": spy}).passed
    assert seen == [(0.0, 0.0), (1.0, 1), (5.0, 2)], "each call got the learner's own state back"
    wrong = key_check({"step": lambda s, x: (max(s[0], x), s[1] + 1)})
    assert "the 3rd call of a sequence that passes your previous result back in" in wrong.message


def test_a_checker_that_compares_part_of_the_answer_by_itself_gets_no_key():
    def check(answer):
        numbers = core.check_numbers(answer, (core.NumericQuestion("x", "x", 1.0, hint="h"),))
        return core.Verdict(numbers.passed and answer["y"] == 2, "ok")
    recorder = answer_key.Recorder(b"salt" * 4)
    with core.observed_by(recorder), pytest.raises(answer_key.NoKey, match="judges 'y' without"):
        core.run_prompt("99", core.Prompt("p", "t", 1.0, check), {"x": 1.0, "y": 2})


def test_a_table_rule_is_read_off_its_accepts_function():
    assert answer_key.probe_tolerance(lambda got, t: core.close(got, t, 0.02), 512.0, "t") == pytest.approx(
        (0.02, 0.0), rel=1e-6)
    assert answer_key.probe_tolerance(lambda got, t: abs(got - t) <= 0.5, 512.0, "t") == pytest.approx(
        (0.0, 0.5), rel=1e-6)
    assert answer_key.probe_tolerance(lambda got, t: got == t, 3.0, "t") == (0.0, 0.0)
    with pytest.raises(answer_key.NoKey, match="neither a relative nor an absolute"):
        answer_key.probe_tolerance(lambda got, t: abs(got - t) <= 0.01 * t * t, 3.0, "t")


# ================================================================== what refuses a learner's copy

def test_a_copy_cannot_make_a_copy_or_a_course(copies, tmp_path):
    root = copies["h100-sxm"].root
    env = {**_env(root), "PYTHONPATH": str(root)}
    for args, said in ((["learner-copy", str(tmp_path / "again")], "is itself a learner's copy"),
                       (["build", str(tmp_path / "course")], "is a learner's copy of the course")):
        done = subprocess.run([sys.executable, "-m", "grader.course_cli", *args], cwd=root, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == ExitCode.USAGE, done.stdout + done.stderr
        assert said in " ".join((done.stdout + done.stderr).split())


def test_an_unknown_gpu_is_a_usage_error(tmp_path):
    done = _make(tmp_path / "copy", "--gpu", "Voodoo 5")
    assert done.returncode == ExitCode.USAGE
    said = " ".join((done.stdout + done.stderr).split())
    assert "no spec sheet matches the GPU 'Voodoo 5'" in said and "h100-sxm" in said
    assert not (tmp_path / "copy").exists()


def test_the_copy_is_written_whole_or_not_at_all(tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    done = _make(tmp_path / "busy")
    assert done.returncode == ExitCode.USAGE and "is not empty and is not a learner's copy" in " ".join(
        (done.stdout + done.stderr).split())
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"


def test_a_learner_copy_gpu_is_what_its_checks_describe(copies, monkeypatch):
    root = copies["h100-sxm"].root
    monkeypatch.setenv("S2S_ROOT", str(root))
    monkeypatch.setenv(core.GPU_VARIABLE, "H200")
    gpu = core.reference_gpu()
    assert gpu.spec.key == "h100-sxm" and gpu.describe().endswith("(the GPU this copy of the course was made for)")


def test_the_hidden_answers_follow_the_gpu_they_are_checked_on(monkeypatch):
    """No H200 constant in the hidden answers: made under any GPU of hardware/specs.toml, they pass its
    checks (an H100 gets its own figures, a T4, whose tensor cores take no bf16, its fp16 ones)."""
    from derivation_helpers import load_answers
    for key in [s.key for s in load_specs()]:
        with core.using_gpu(_spec(key), "named"):
            for ex in EXERCISES:
                module = load_answers(ROOT / "solutions" / ex.folder.name / "answers.py", _spec(key))
                for prompt in ("hardware_101", "roofline_01", "layer_flops", "tile_intensity", "occupancy",
                               "optimizer_traffic", "fp8_formats"):
                    if hasattr(module, prompt):
                        result = core.run_prompt(ex.id, next(p for p in ex.load_derivations().PROMPTS
                                                             if p.id == prompt), getattr(module, prompt))
                        assert result.passed, (key, prompt, result.message)


# ================================================================== a class that works in the copy

def test_a_class_works_in_the_copy_and_the_instructor_grades_what_it_saw(copies, tmp_path):
    """What tests/test_gpu_class_grading.py does on a GPU, here without one: learners run the released
    notebook with the published copy as their grader, hand it in, and the instructor autogrades (the
    derivations only): every derivation cell scores exactly where the copy said it passed."""
    from course_helpers import ASSIGNMENT, course_env, hand_in_a_class

    from grader import course

    copy = copies[choose_gpu(None)[0].key].root
    env = course_env(tmp_path / "cache")
    root = tmp_path / "course"
    seen = hand_in_a_class(root, env, ("solution", "stub"), tmp_path, learner_copy=copy)
    assert all(v for c, v in seen["solution"].items() if c.startswith("check_")), seen
    assert not any(v for c, v in seen["stub"].items() if c.startswith("check_")), seen
    assert not any(v for c, v in seen["solution"].items() if c.startswith("kernel_")), "no GPU here"
    graded = subprocess.run(course_cli("autograde", str(root), ASSIGNMENT, "--derivations-only"), cwd=root,
                            env=env, capture_output=True, text=True, timeout=600, check=False)
    assert graded.returncode == 0, graded.stdout[-3000:] + graded.stderr[-3000:]
    for result in course.scores(root, ASSIGNMENT):
        kind = result.student.split("_", 1)[1]
        assert {c.name: c.score == c.max_score for c in result.cells} == seen[kind], result.student
