"""Rendering a grading result: the terminal table, the notebook HTML, JSON and the exit codes.

The results are built by hand, one for each thing a learner can run into, so that
these tests need neither a GPU nor nvcc.
"""
from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

import jsonschema
import pytest
from rich.console import Console

from grader.build import BuildResult, KernelResources
from grader.pipeline import describe_failure
from grader.report import detail_lines, kernel_lines, render_html, render_rich
from grader.result import (CaseResult, Device, ExitCode, GradeResult, KernelProfile, Measurement, Mismatch, Points,
                           Problem, Profile, Roofline, TaskResult, Timing)

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "grader" / "result.schema.json"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def text_of(result: GradeResult) -> str:
    console = Console(record=True, width=120, file=open("/dev/null", "w"))
    console.print(render_rich(result))
    return console.export_text()


def html_text(result: GradeResult) -> str:
    """The HTML report with its entities decoded, as the learner reads it in the notebook."""
    return flat(html.unescape(render_html(result)))


def flat(text: str) -> str:
    """Whitespace collapsed, and the panel borders gone, so wrapped sentences can be searched."""
    return " ".join(re.sub(r"[│╭╮╰╯─┃]", " ", text).split())


# --------------------------------------------------------------------------- hand-made results

def good_build(source: str) -> BuildResult:
    return BuildResult(source, True, f"/cache/{source}.so",
                       [KernelResources("vadd_vec4", 40, 0, 0, 0, 0), KernelResources("vadd_tail", 16, 0, 0, 0, 0)],
                       "", 1.2, False, "sm_90")


def passed_task() -> TaskResult:
    roofline = Roofline(bound="memory", achieved_gbs=3928.0, achieved_tflops=0.33, floor_s=192.5e-6,
                        percent=93.9, bandwidth_gbs=4183.0, compute_tflops=67.0,
                        source="copy bandwidth measured now")
    size = Measurement(label="n=67108864", case={"n": 67108864}, reps=40, learner_s=205e-6, baseline_s=1.23e-3,
                       speedup=1.23e-3 / 205e-6, learner_spread=0.01, baseline_spread=0.02,
                       flops=67108864.0, bytes=12 * 67108864.0, vendor_s=2.1e-4, vendor_ratio=2.1e-4 / 205e-6,
                       learner_wall_s=2.3e-4, roofline=roofline)
    timing = Timing([size], speedup=size.speedup, min_speedup=2.0, vendor_ratio=size.vendor_ratio)
    kernel = KernelProfile(name="vadd_vec4", duration_us=192.2, memory_pct=85.0, compute_pct=6.9, dram_gbs=4088.0,
                           achieved_occupancy_pct=50.8, theoretical_occupancy_pct=62.5, occupancy_limiter="registers",
                           registers=48, block="256", grid="16384", global_load_efficiency_pct=100.0,
                           global_store_efficiency_pct=100.0, bank_conflicts=0.0,
                           dram_bytes=785634560.0, fp32_flops=67108864.0, tensor_pipe_pct=0.0,
                           top_stalls=[("waiting on global/local memory (long scoreboard)", 83.8)],
                           advice=["Theoretical Occupancy: limited by the number of required registers."])
    cases = [CaseResult(label=f"n={n}", case={"n": n}, passed=True, seconds=0.001) for n in (1, 31, 67108864)]
    return TaskResult("vector_add", "vector_add.cu", "passed", "correct (3/3) and 6.0x the baseline (needs 2x)",
                      build=good_build("vector_add.cu"), cases=cases, cases_total=3, correct=True, timing=timing,
                      profile=Profile(True, "", [kernel]), points=Points(2, 1, 2, 1))


def gemm_task() -> TaskResult:
    """A compute-bound task timed at three sizes: the speed bar applies to their geometric mean."""
    sizes = []
    for label, learner, baseline, tflops, percent in (("M=N=K=4096", 3.0e-3, 0.6, 45.8, 90.0),
                                                     ("M=N=K=8192", 23.0e-3, 5.2, 47.8, 94.0),
                                                     ("M=8192, N=3072, K=768", 0.9e-3, 0.1, 42.9, 84.3)):
        roofline = Roofline(bound="compute", achieved_gbs=100.0, achieved_tflops=tflops, floor_s=learner * percent / 100,
                            percent=percent, bandwidth_gbs=4183.0, compute_tflops=50.9, source="measured")
        sizes.append(Measurement(label=label, case={}, reps=20, learner_s=learner, baseline_s=baseline,
                                 speedup=baseline / learner, learner_spread=0.01, baseline_spread=0.01, flops=1.0,
                                 bytes=1.0, vendor_s=learner * 0.95, vendor_ratio=0.95, roofline=roofline))
    mean = (200 * (5.2 / 23e-3) * (0.1 / 0.9e-3)) ** (1 / 3)
    timing = Timing(sizes, speedup=mean, min_speedup=40.0, vendor_ratio=0.95)
    return TaskResult("sgemm", "sgemm.cu", "passed", f"correct (9/9) and {mean:.1f}x the baseline", build=good_build("sgemm.cu"),
                      cases=[CaseResult("M=N=K=1", {}, True)], cases_total=1, correct=True, timing=timing,
                      points=Points(2, 2, 2, 2))


def failing_task(name: str, mismatch: Mismatch, label: str, case: dict) -> TaskResult:
    failing = CaseResult(label=label, case=case, passed=False, seconds=0.002, mismatch=mismatch)
    cases = [CaseResult(label="rows=1, cols=1", case={"rows": 1, "cols": 1}, passed=True), failing]
    return TaskResult(name, f"{name}.cu", "failed", f"wrong result for {label}: " + describe_failure(failing),
                      build=good_build(f"{name}.cu"), cases=cases, cases_total=8, correct=False,
                      points=Points(0, 0, 2, 1))


def not_written_task() -> TaskResult:
    return failing_task("transpose", Mismatch("out", [32, 16], 0.25, 1.2e-37, 999, 1025 * 999, "not written", 0.0),
                        "rows=1025, cols=999", {"rows": 1025, "cols": 999})


def wrong_value_task() -> TaskResult:
    return failing_task("reduce_sum", Mismatch("out", [0], 123.456, 120.5, 1, 1, "wrong value", 0.0123),
                        "n=65537", {"n": 65537})


def compile_error_task(message: str = "bad.cu(3): error: expected a \";\"") -> TaskResult:
    build = BuildResult("bad.cu", False, None, [], message, 0.8, False, "sm_90", message)
    return TaskResult("softmax", "bad.cu", "failed", f"does not compile: {message}", build=build,
                      error=Problem("compile error", message), cases_total=12,
                      points=Points(0, 0, 2, 1))


def timeout_task() -> TaskResult:
    msg = ("stopped after 60 s while checking case 3/8 (n=33): an endless loop in a kernel or in host code, "
           "or a kernel far too slow for this size")
    return TaskResult("attention", "attention.cu", "failed", msg, build=good_build("attention.cu"),
                      error=Problem("timeout", msg), cases_total=12, correct=False,
                      points=Points(0, 0, 3, 2))


def not_run_task() -> TaskResult:
    return TaskResult("attention_bf16", "attention_bf16.cu", "not run", "compiled; running it needs an NVIDIA GPU",
                      build=good_build("attention_bf16.cu"), cases_total=13, points=Points(0, 0, 3, 3))


def result_of(*tasks: TaskResult, notice: str = "", device: Device | None = Device("NVIDIA H200", "sm_90", 4183.0)
              ) -> GradeResult:
    return GradeResult(exercise="01", title="Foundations: memory-bound kernels", submission="/home/me/ex01",
                       tasks=list(tasks), device=device, notice=notice, started="2026-12-02T15:00:00+00:00",
                       seconds=12.5)


# --------------------------------------------------------------------------- passed task

def test_passed_task_shows_speedup_requirement_roofline_points_and_counters():
    result = result_of(passed_task())
    for shown in (flat(text_of(result)), html_text(result)):
        assert "6.00x (needs 2x)" in shown
        assert "94% (3928 GB/s)" in shown                     # roofline cell
        assert "94% of the roofline" in shown                 # roofline line
        assert "3/3" in shown
        assert "3/3 points" in shown
        assert "205.0 µs" in shown
        assert "2 kernels, 40 regs, 0 B spilled" in shown
        assert "vadd_vec4<<<16384, 256>>>: 192.2 µs, DRAM 4088 GB/s" in shown
        assert "occupancy 51% achieved of 62% theoretical (limited by registers)" in shown
        assert "ncu: Theoretical Occupancy" in shown
        assert "PyTorch's own implementation takes 210.0 µs" in shown
        assert "GPU: NVIDIA H200 (sm_90)" in shown


def test_passed_result_exit_code_and_verdict():
    result = result_of(passed_task())
    assert result.exit_code == ExitCode.PASSED == 0
    assert result.passed
    assert result.points == 3 and result.max_points == 3
    assert "3/3 points: all tasks passed" in flat(text_of(result))


# --------------------------------------------------------------------------- failures

def test_not_written_output_shows_case_index_and_poison_explanation():
    result = result_of(not_written_task())
    for shown in (flat(text_of(result)), html_text(result)):
        assert "rows=1025, cols=999" in shown
        assert "out[32][16] was never written" in shown
        assert "poison value" in shown
        assert "999 of 1023975 elements are wrong" in shown


def test_wrong_value_shows_expected_got_error_and_tolerance():
    result = result_of(wrong_value_task())
    for shown in (flat(text_of(result)), html_text(result)):
        assert "wrong result for n=65537" in shown
        assert "out[0] = 120.5, expected 123.456" in shown
        assert "error 2.96" in shown and "tolerance 0.0123" in shown
        assert "0/3" in shown                                  # points of the task
    assert result.exit_code == ExitCode.FAILED


def test_compile_error_names_file_and_line():
    result = result_of(compile_error_task())
    text = flat(text_of(result))
    assert "compile error" in text
    assert 'does not compile: bad.cu(3): error: expected a ";"' in text
    assert 'bad.cu(3): error: expected a "' in html_text(result)
    assert result.exit_code == ExitCode.FAILED


def test_a_compile_error_is_shown_once():
    log = ('bad.cu(3): error: expected a ";"\n    int y = 1\n             ^\n'
           '1 error detected in the compilation of "bad.cu".')
    task = compile_error_task('bad.cu(3): error: expected a ";"')
    task.error = Problem("compile error", log)
    result = result_of(task)
    for shown in (text_of(result), html.unescape(render_html(result))):
        assert shown.count('expected a ";"') == 1, shown
        assert "int y = 1" in shown and '1 error detected in the compilation of "bad.cu".' in shown


def test_a_rejected_source_shows_each_finding_once():
    findings = ["bad.cu:1: uses cuBLAS (#include <cublas_v2.h>, cublasSgemm()); this task is about writing the "
                "kernel yourself, so library implementations are not accepted",
                "bad.cu:9: starts a host thread: work it does after your function returns is invisible to the timer"]
    task = TaskResult("softmax", "bad.cu", "failed", findings[0], error=Problem("rejected", "\n".join(findings)),
                      points=Points(0, 0, 2, 1))
    result = result_of(task)
    for shown in (flat(text_of(result)), html_text(result)):
        assert shown.count("uses cuBLAS") == 1 and shown.count("starts a host thread") == 1, shown


def test_timeout_is_a_failure_with_its_reason():
    result = result_of(timeout_task())
    text = flat(text_of(result))
    assert "attention: failed" in text
    assert "stopped after 60 s while checking case 3/8 (n=33)" in text
    assert result.exit_code == ExitCode.FAILED


def test_not_run_task_without_gpu_is_not_graded():
    notice = "Correctness, timing and hardware counters need an NVIDIA GPU, and none was found on this machine."
    result = result_of(not_run_task(), notice=notice, device=None)
    assert result.exit_code == ExitCode.NOT_GRADED == 3
    text = flat(text_of(result))
    assert "attention_bf16: not run" in text
    assert notice in text
    assert "0/6 points: not fully graded" in text
    assert notice in html_text(result)


def test_a_failure_outweighs_tasks_that_could_not_run():
    notice = "Correctness, timing and hardware counters need an NVIDIA GPU, and none was found on this machine."
    result = result_of(not_run_task(), compile_error_task(), notice=notice, device=None)
    assert result.exit_code == ExitCode.FAILED


def test_usage_exit_code_is_distinct():
    assert {int(c) for c in ExitCode} == {0, 1, 2, 3}


def test_profile_unavailable_message_is_shown():
    task = passed_task()
    task.profile = Profile(False, "Nsight Compute (ncu) was not found on PATH, so there are no hardware counters.")
    assert "Nsight Compute: Nsight Compute (ncu) was not found on PATH" in flat(text_of(result_of(task)))


# --------------------------------------------------------------------------- HTML safety

def test_html_escapes_learner_text():
    evil = 'bad.cu(3): error: identifier "<script>alert(1)</script>" is undefined'
    task = compile_error_task(evil)
    result = result_of(task)
    result.output = "<img src=x onerror=alert(2)>"
    page = render_html(result)
    assert "<script>" not in page
    assert "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(2)&gt;" in page


def test_a_notebook_shows_the_html_report():
    """The result model knows no views: the notebook registers the HTML report with IPython."""
    pytest.importorskip("IPython", reason="IPython (a notebook's kernel) is not installed: pip install -e '.[course]'")
    from IPython.core.interactiveshell import InteractiveShell

    from grader.report import register_notebook_display
    shell = InteractiveShell.instance()
    try:
        register_notebook_display()
        result = result_of(passed_task())
        shown, _ = shell.display_formatter.format(result)
        assert shown["text/html"] == render_html(result)
    finally:
        InteractiveShell.clear_instance()


def test_several_benchmark_sizes_show_each_and_the_geometric_mean():
    result = result_of(gemm_task())
    mean = gemm_task().timing.speedup
    for shown in (flat(text_of(result)), html_text(result)):
        assert f"{mean:.2f}x geo-mean (needs 40x)" in shown
        assert "3 sizes" in shown
        assert "89% geo-mean" in shown                         # of 90, 94 and 84.3 percent
        assert "at M=N=K=8192: 23.00 ms, 226.09x the baseline, 94% of the roofline (47.8 TFLOP/s), " \
               "0.95x PyTorch's speed" in shown
        assert "at M=8192, N=3072, K=768: 900.0 µs" in shown
    data = json.loads(result.to_json())
    assert [s["label"] for s in data["tasks"][0]["timing"]["sizes"]] == ["M=N=K=4096", "M=N=K=8192",
                                                                       "M=8192, N=3072, K=768"]
    assert data["tasks"][0]["timing"]["roofline_percent"] == pytest.approx(89.35, abs=0.01)


def test_state_left_unchanged_is_named():
    task = failing_task("adamw", Mismatch("p[3]", [17], 0.25, 0.5, 40, 768, "not updated", 1e-6),
                        "params: 148 tensors; call 2 of 4 (step=2)", {})
    for shown in (flat(text_of(result_of(task))), html_text(result_of(task))):
        assert "p[3][17] = 0.5 is what it held before the call; expected 0.25: the state was not updated" in shown


# --------------------------------------------------------------------------- JSON

def everything() -> GradeResult:
    task = not_written_task()
    task.cases[-1].error = Problem("out of bounds", "memory just outside 'out' was overwritten")
    return result_of(passed_task(), task, wrong_value_task(), compile_error_task(), timeout_task(), not_run_task(),
                     gemm_task())


def test_json_validates_against_schema(validator):
    data = json.loads(everything().to_json())
    validator.validate(data)
    assert data["exit_code"] == 1
    assert data["points"] == 3 + 4 and data["max_points"] == 3 + 3 + 3 + 3 + 5 + 6 + 4


def test_json_round_trips():
    result = everything()
    data = json.loads(result.to_json())
    assert json.loads(json.dumps(data)) == data
    assert data == json.loads(json.dumps(result.to_dict()))
    first = data["tasks"][0]
    assert first["points"] == {"correct": 2, "speed": 1, "max_correct": 2, "max_speed": 1, "total": 3, "max": 3}
    assert first["timing"]["passed"] is True
    assert first["cases_passed"] == 3
    assert first["profile"]["kernels"][0]["top_stalls"] == [["waiting on global/local memory (long scoreboard)", 83.8]]
    assert data["tasks"][1]["cases"][1]["mismatch"]["index"] == [32, 16]


def test_schema_rejects_what_the_grader_never_writes(validator):
    data = json.loads(everything().to_json())
    data["tasks"][0]["status"] = "ok"
    assert not validator.is_valid(data)
    data = json.loads(everything().to_json())
    data["tasks"][1]["cases"][1]["mismatch"]["reason"] = "different"
    assert not validator.is_valid(data)
    data = json.loads(everything().to_json())
    del data["tasks"][0]["points"]
    assert not validator.is_valid(data)
    data = json.loads(everything().to_json())
    data["tasks"][0]["unexpected"] = 1
    assert not validator.is_valid(data)


def test_schema_lists_every_result_field(validator):
    """A field added to the result classes must be documented in the schema."""
    schema = validator.schema
    data = everything().to_dict()
    assert set(data) == set(schema["properties"])
    defs = schema["$defs"]
    task = data["tasks"][0]
    assert set(task) == set(defs["task"]["properties"])
    assert set(task["build"]) == set(defs["build"]["properties"])
    assert set(task["build"]["kernels"][0]) == set(defs["kernel_resources"]["properties"])
    assert set(task["timing"]) == set(defs["timing"]["properties"])
    assert set(task["timing"]["sizes"][0]) == set(defs["measurement"]["properties"])
    assert set(task["timing"]["sizes"][0]["roofline"]) == set(defs["roofline"]["properties"])
    assert set(data["tasks"][3]["error"]) == set(defs["error"]["properties"])
    assert set(task["profile"]) == set(defs["profile"]["properties"])
    assert set(task["profile"]["kernels"][0]) == set(defs["kernel_profile"]["properties"])
    assert set(task["points"]) == set(defs["points"]["properties"])
    assert set(task["cases"][0]) == set(defs["case_result"]["properties"])
    assert set(data["tasks"][1]["cases"][1]["mismatch"]) == set(defs["mismatch"]["properties"])
    assert set(data["device"]) == set(defs["device"]["properties"])
    task["sanitizer"] = [{"tool": "memcheck", "message": "Invalid __global__ write of size 4 bytes",
                          "location": "vector_add.cu:12"}]
    validator.validate(json.loads(json.dumps(data)))


def test_schema_error_kinds_cover_every_kind_the_grader_writes(validator):
    grader = Path(__file__).resolve().parents[1] / "grader"
    source = "\n".join(p.read_text() for p in grader.rglob("*.py"))
    kinds = set(re.findall(r'Problem\(\s*"([^"]+)"', source))
    kinds |= set(re.findall(r'failure\(\w+,\s*"([^"]+)"', source))
    kinds |= set(re.findall(r'return "([a-z ]+)", \(?f?"', source))
    assert {"compile error", "timeout", "crash", "out of bounds"} <= kinds   # the scan itself works
    documented = set(validator.schema["$defs"]["error"]["properties"]["kind"]["enum"])
    assert kinds <= documented, f"undocumented error kinds: {sorted(kinds - documented)}"


@pytest.mark.parametrize("value, written", [(math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf")])
def test_json_of_a_not_finite_output_is_standard_json(validator, value, written):
    """Browsers and jq reject NaN and Infinity in JSON: a non-finite value is written as a string."""
    task = failing_task("vector_add", Mismatch("c", [7], 1.5, value, 3, 31, "not finite", 1e-6),
                        "n=31", {"n": 31})

    def reject(constant: str):
        raise ValueError(f"non-standard JSON constant {constant}")

    data = json.loads(result_of(task).to_json(), parse_constant=reject)
    mismatch = data["tasks"][0]["cases"][1]["mismatch"]
    assert (mismatch["expected"], mismatch["got"]) == (1.5, written)
    validator.validate(data)


def test_kernel_lines_without_optional_counters():
    k = KernelProfile(name="k", duration_us=3.25, memory_pct=None, compute_pct=None, dram_gbs=None,
                      achieved_occupancy_pct=None, theoretical_occupancy_pct=None, occupancy_limiter=None,
                      registers=None, block=None, grid=None, global_load_efficiency_pct=None,
                      global_store_efficiency_pct=None, bank_conflicts=None)
    assert kernel_lines(k) == ["k: 3.2 µs"]


@pytest.mark.parametrize("count, shown, more", [(1, 0, None), (3, 2, None), (8, 5, "... 2 more")])
def test_sanitizer_findings_after_the_first_are_listed_up_to_five(count: int, shown: int, more: str | None) -> None:
    """The summary names the first finding; the details list the next five, then how many are left."""
    findings = [{"tool": "racecheck", "location": f"reduce_sum.cu:{10 + i}", "message": f"Race number {i}"}
                for i in range(count)]
    task = TaskResult("reduce_sum", "reduce_sum.cu", "failed",
                      f"compute-sanitizer racecheck found {count} problems; the first at reduce_sum.cu:10: Race number 0",
                      sanitizer=findings, points=Points(0, 0, 2, 1))
    lines = detail_lines(task)
    assert sum("Race number 0" in line for line in lines) == 1
    listed = [line for line in lines if line.startswith("racecheck at ")]
    assert listed == [f"racecheck at reduce_sum.cu:{10 + i}: Race number {i}" for i in range(1, shown + 1)]
    assert (more is None) == (not any(line.startswith("... ") for line in lines))
    if more:
        assert any(line.startswith(more) for line in lines)


def test_the_report_says_when_the_grader_clock_overruled_the_events():
    task = passed_task()
    size = task.timing.sizes[0]
    size.learner_events_s, size.learner_s, size.clock = 150e-6, 205e-6, "grader"
    for shown in (flat(text_of(result_of(task))), html_text(result_of(task))):
        assert "The grader's own clock measured 205.0 µs where the CUDA events in your process said 150.0 µs" in shown
    size.clock = "events"
    assert "grader's own clock" not in flat(text_of(result_of(task)))


@pytest.mark.parametrize("isolation, shown", [
    ("a separate process, Landlock ABI 7 (signals and abstract sockets scoped) + seccomp", False),
    ("a separate process, not confined (this kernel has no Landlock)", True),
    ("the learner's code runs inside the checker, because a separate process could not share its memory here", True),
])
def test_the_report_warns_where_the_learners_code_was_not_kept_apart(isolation: str, shown: bool):
    result = result_of(passed_task())
    result.isolation = isolation
    for text in (flat(text_of(result)), html_text(result)):
        assert ("Isolation: " + isolation.split(",")[0] in text) is shown
