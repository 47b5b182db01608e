"""The `grade` command on a machine without a usable GPU, as a learner runs it.

Each test starts the real CLI in a child process with CUDA_VISIBLE_DEVICES="", so it
behaves the same on a laptop without a driver and on a GPU machine: it compiles,
reports the build, says in one sentence that the rest needs an NVIDIA GPU, and exits 3.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest

from grader import spec
from grader.pipeline import GradingError

ROOT = Path(__file__).resolve().parents[1]
EXERCISE = ROOT / "exercises" / "01_foundations"
SOLUTIONS = ROOT / "solutions" / "01_foundations"
SCHEMA = json.loads((ROOT / "grader" / "result.schema.json").read_text())
EX01 = spec.find("01")
TASKS = [t.name for t in EX01.tasks]
MAX_POINTS = sum(t.points.total for t in EX01.tasks)
# The sentence every no-GPU grading ends with; what follows it (the reason) depends on the machine.
NO_GPU = "Correctness, timing and hardware counters need an NVIDIA GPU, and none was found on this machine"

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None,
                                reason="nvcc (the CUDA toolkit) is not on PATH, so nothing can be compiled here")


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        """stdout and stderr with whitespace collapsed and box-drawing gone, as one searchable line."""
        return " ".join(re.sub(r"[│╭╮╰╯─┃]", " ", self.stdout + "\n" + self.stderr).split())


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """Shared with test_build.py when both run: each file is compiled once per test run."""
    return tmp_path_factory.getbasetemp() / "s2s-cache"


def run(*args: str, cache: Path, code: str | None = None) -> Run:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", S2S_CACHE=str(cache), COLUMNS="160", NO_COLOR="1")
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "grader.cli", *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def no_traceback(r: Run) -> None:
    assert "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr


def copy_stubs(folder: Path, names: list[str] = TASKS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(EXERCISE / f"{name}.cu", folder / f"{name}.cu")
    return folder


# --------------------------------------------------------------------------- grading without a GPU

@needs_nvcc
def test_exercise_compiles_reports_and_says_a_gpu_is_needed(cache):
    r = run("exercise", "01", cache=cache)
    no_traceback(r)
    assert r.code == 3
    text = r.text
    assert "Exercise 01: Foundations" in text
    for task in TASKS:
        assert f"{task}: not run" in text
    assert "no kernel yet" in text                    # the stubs launch nothing yet
    assert "compiled; running it needs an NVIDIA GPU" in text
    assert text.count(NO_GPU) == 1
    assert f"0/{MAX_POINTS:g} points: not fully graded" in text


@needs_nvcc
def test_compile_report_shows_registers_spills_and_shared_memory(cache, tmp_path):
    submission = tmp_path / "mine"
    shutil.copytree(SOLUTIONS, submission, ignore=shutil.ignore_patterns("*.py"))
    r = run("exercise", "01", "--submission", str(submission), cache=cache)
    no_traceback(r)
    assert r.code == 3
    assert len(re.findall(r"\d+ regs, 0 B spilled, \d+ B smem", r.text)) == len(TASKS)
    assert re.search(r"\d+ regs, 0 B spilled, [1-9]\d* B smem", r.text)   # the tiled transpose stages in smem
    assert NO_GPU in r.text


@needs_nvcc
def test_json_output_validates_and_has_build_info(cache):
    r = run("exercise", "01", "--json", cache=cache)
    no_traceback(r)
    assert r.code == 3
    data = json.loads(r.stdout)                      # stdout is the JSON and nothing else
    jsonschema.validate(data, SCHEMA, cls=jsonschema.Draft202012Validator)
    assert data["exit_code"] == 3
    assert data["device"] is None
    assert NO_GPU in data["notice"]
    assert [t["name"] for t in data["tasks"]] == TASKS
    for t in data["tasks"]:
        assert t["status"] == "not run"
        assert t["build"]["ok"] is True
        assert t["build"]["arch"] == "sm_90"
        assert t["build"]["source"] == f"{t['name']}.cu"
        task = EX01.task(t["name"])
        assert t["points"]["total"] == 0 and t["points"]["max"] == task.points.total
        assert t["cases_total"] == len(task.cases)


@needs_nvcc
def test_one_task(cache):
    r = run("exercise", "01", "--task", "transpose", "--json", cache=cache)
    assert r.code == 3
    data = json.loads(r.stdout)
    assert [t["name"] for t in data["tasks"]] == ["transpose"]
    assert data["max_points"] == EX01.task("transpose").points.total


@needs_nvcc
def test_compile_error_in_submission_shows_file_and_line(cache, tmp_path):
    submission = copy_stubs(tmp_path / "mine")
    source = (submission / "transpose.cu").read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if "TODO" in text)
    source[line - 1] = "    int oops = ;"
    (submission / "transpose.cu").write_text("\n".join(source) + "\n")
    r = run("exercise", "01", "--submission", str(submission), cache=cache)
    no_traceback(r)
    assert r.code == 1
    assert f"transpose.cu({line}): error" in r.text
    assert "transpose: failed" in r.text
    assert "vector_add: not run" in r.text            # the other tasks still compiled
    assert "some tasks failed" in r.text
    data = json.loads(run("exercise", "01", "--submission", str(submission), "--json", cache=cache).stdout)
    transpose = data["tasks"][2]
    assert transpose["error"]["kind"] == "compile error"
    assert transpose["build"]["ok"] is False


@needs_nvcc
def test_missing_file_fails_with_a_clear_message(cache, tmp_path):
    submission = copy_stubs(tmp_path / "mine", ["reduce_sum", "transpose"])
    r = run("exercise", "01", "--submission", str(submission), cache=cache)
    no_traceback(r)
    assert r.code == 1
    assert f"vector_add.cu is missing from {submission}" in r.text
    assert "vector_add: failed" in r.text


@needs_nvcc
def test_missing_extern_c_is_explained(cache, tmp_path):
    submission = copy_stubs(tmp_path / "mine")
    stub = submission / "vector_add.cu"
    stub.write_text(stub.read_text().replace('extern "C" void vector_add', "void vector_add"))
    r = run("exercise", "01", "--submission", str(submission), "--task", "vector_add", cache=cache)
    no_traceback(r)
    assert r.code == 1
    assert 'vector_add is not declared extern "C"' in r.text


# --------------------------------------------------------------------------- usage errors (no nvcc needed)

def test_unknown_exercise_lists_the_exercises(cache):
    r = run("exercise", "99", cache=cache)
    no_traceback(r)
    assert r.code == 2
    assert "there is no exercise '99'" in r.text
    assert "01_foundations" in r.text


def test_the_capstone_is_not_an_exercise_and_the_error_says_which_command_grades_it(cache):
    for name in ("06", "06_capstone"):
        r = run("exercise", name, cache=cache)
        no_traceback(r)
        assert r.code == 2
        assert f"there is no exercise '{name}'" in r.text
        assert "06_capstone is the capstone: `grade model` trains and grades it." in r.text
    assert "grade model" not in run("exercise", "99", cache=cache).text


def test_unknown_task_names_the_valid_ones(cache):
    r = run("exercise", "01", "--task", "matmul", cache=cache)
    no_traceback(r)
    assert r.code == 2
    assert "has no task 'matmul'" in r.text
    assert "vector_add, reduce_sum, transpose" in r.text


def test_missing_submission_folder_is_a_usage_error(cache, tmp_path):
    r = run("exercise", "01", "--submission", str(tmp_path / "nowhere"), cache=cache)
    no_traceback(r)
    assert r.code == 2
    assert "does not exist" in r.text


def test_unknown_option_is_a_usage_error(cache):
    r = run("exercise", "01", "--fast", cache=cache)
    assert r.code == 2
    assert "--fast" in r.text


def test_help(cache):
    r = run("--help", cache=cache)
    assert r.code == 0
    for command in ("exercise", "list", "hardware"):
        assert command in r.text
    r = run("exercise", "--help", cache=cache)
    assert r.code == 0
    for option in ("--submission", "--task", "--json", "--no-profile"):
        assert option in r.text


@pytest.mark.parametrize("command", [(), ("exercise",), ("model",), ("list",), ("hardware",), ("course",),
                                     ("course", "build"), ("course", "autograde"), ("course", "example"),
                                     ("course", "learner-copy")])
def test_usage_names_every_argument_and_value_plainly(cache, command):
    r = run(*command, "--help", cache=cache)
    assert r.code == 0, r.stderr
    usage = next(line for line in r.stdout.splitlines() if line.startswith("Usage: grade"))
    assert "{" not in usage and "}" not in usage, usage
    for leftover in ("<list[", "range>", "<str>", "<path>", "<int>", "<float>"):
        options = r.stdout[r.stdout.find("Options:"):]
        assert leftover not in options, options
    wanted = {("exercise",): "Usage: grade exercise [OPTIONS] EXERCISE", ("course", "build"): "[OPTIONS] DIR",
              ("course", "autograde"): "[OPTIONS] DIR ASSIGNMENT",
              ("course", "learner-copy"): "[OPTIONS] DIR"}.get(command)
    assert wanted is None or usage.endswith(wanted), usage


def test_piped_course_build_cuts_nothing(tmp_path):
    pytest.importorskip("nbformat")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update(NO_COLOR="1")
    proc = subprocess.run([sys.executable, "-m", "grader.cli", "course", "build", str(tmp_path / "course")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout, proc.stdout
    for exercise in spec.discover():
        row = next(line for line in proc.stdout.splitlines() if f" {exercise.folder.name} " in line)
        assert ", ".join(t.source for t in exercise.tasks) in row, row


@needs_nvcc
def test_list_shows_exercises_tasks_and_last_result(tmp_path):
    cache = tmp_path / "fresh-cache"
    r = run("list", cache=cache)
    no_traceback(r)
    assert r.code == 0
    assert "01 Foundations" in r.text
    needs = {t.name: f"{t.source} {t.min_speedup:g}x the baseline" for t in EX01.tasks}
    for task in TASKS:
        assert f"{task} {needs[task]} not graded yet" in r.text
    run("exercise", "01", "--task", "vector_add", cache=cache)
    r = run("list", cache=cache)
    assert r.code == 0
    points = f"0/{EX01.task('vector_add').points.total:g}"
    assert re.search(re.escape(f"vector_add {needs['vector_add']} not run ({points}), ") + r"\d{4}-\d\d-\d\d", r.text)
    assert f"transpose {needs['transpose']} not graded yet" in r.text


# --------------------------------------------------------------------------- Python API

@needs_nvcc
def test_python_api_returns_a_result_with_html(cache):
    pytest.importorskip("IPython", reason="IPython (a notebook's kernel) is not installed: pip install -e '.[course]'")
    code = ("import json, grader\n"
            "from IPython.core.interactiveshell import InteractiveShell\n"
            "shell = InteractiveShell.instance()  # as in a notebook's kernel\n"
            "r = grader.grade('01', progress=False)\n"
            "html = shell.display_formatter.format(r)[0]['text/html']\n"
            "print(json.dumps({'type': type(r).__name__, 'html': html, 'points': r.points,"
            " 'max': r.max_points, 'code': int(r.exit_code)}))\n")
    r = run(cache=cache, code=code)
    no_traceback(r)
    assert r.code == 0
    out = json.loads(r.stdout)
    assert out["type"] == "GradeResult"
    assert (out["points"], out["max"], out["code"]) == (0, MAX_POINTS, 3)
    assert NO_GPU in out["html"]
    assert '<div class="s2s">' in out["html"]


def test_python_api_unknown_exercise_raises():
    import grader
    with pytest.raises(GradingError, match="there is no exercise '99'"):
        grader.grade("99", progress=False)


@needs_nvcc
def test_a_report_written_to_a_file_or_pipe_cuts_no_task_name(cache):
    """Without a terminal rich would assume 80 columns and cut 'attention_bf16' short."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update(CUDA_VISIBLE_DEVICES="", S2S_CACHE=str(cache), NO_COLOR="1")
    proc = subprocess.run([sys.executable, "-m", "grader.cli", "exercise", "04"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    rows = [line for line in proc.stdout.splitlines() if "attention_bf16" in line]
    assert rows and "…" not in proc.stdout, proc.stdout
    assert any(re.search(r"│ attention_bf16 +│ no kernel yet", row) for row in rows), proc.stdout


def test_version(cache):
    r = run("--version", cache=cache)
    assert r.code == 0 and re.fullmatch(r"grade \(Silicon-to-Synapse\) \S+\n", r.stdout), r.stdout
