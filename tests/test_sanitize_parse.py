"""compute-sanitizer logs, recorded on an H200 (tests/test_gpu_sanitize.py with
S2S_KEEP_SANITIZER_LOG), read into the findings a learner sees."""
from __future__ import annotations

from pathlib import Path

import pytest

from grader.sanitize import parse

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "sanitizer"


def log(name: str) -> str:
    return (FIXTURES / f"h200_{name}.log").read_text()


def test_a_write_past_an_output_gives_kernel_line_and_access() -> None:
    findings = parse(log("write_past_c_memcheck"), "memcheck", {"vector_add.cu": "vector_add"})
    assert list(findings) == ["vector_add"]
    (f,) = findings["vector_add"]
    assert f.tool == "memcheck" and f.location == "vector_add.cu:7"
    assert f.message.startswith("Invalid __global__ write of size 4 bytes at add in vector_add.cu:7")
    assert "is out of bounds and is 1 bytes after the nearest allocation" in f.message
    assert "+0x" not in f.message and "(const float *" not in f.message, "offsets and signatures are noise"
    assert "Host Frame" not in f.message and "worker.py" not in f.message, "the grader's frames are not the learner's"


def test_a_race_met_in_every_case_is_one_finding_with_both_lines() -> None:
    text = log("shared_race_racecheck")
    assert text.count("Error: Race reported") == 4           # once per correctness case in the log
    findings = parse(text, "racecheck", {"reduce_sum.cu": "reduce_sum"})
    (f,) = findings["reduce_sum"]
    assert f.location == "reduce_sum.cu:13"
    assert "Read access at block_sums in reduce_sum.cu:13" in f.message
    assert "Write access at block_sums in reduce_sum.cu:11" in f.message


@pytest.mark.parametrize("name, tool", [("shared_race_memcheck", "memcheck"), ("write_past_c_racecheck", "racecheck")])
def test_a_clean_run_has_no_findings(name: str, tool: str) -> None:
    assert parse(log(name), tool, {"vector_add.cu": "vector_add", "reduce_sum.cu": "reduce_sum"}) == {}


def test_findings_go_to_the_task_whose_file_they_name() -> None:
    findings = parse(log("write_past_c_memcheck"), "memcheck", {"reduce_sum.cu": "reduce_sum"})
    assert findings == {}


def test_a_sanitizer_run_checks_the_small_and_ragged_cases_only() -> None:
    from grader.protocol import Job
    from grader.spec import find
    from grader.worker.loop import sanitizer_cases

    job = Job(mode="sanitize", exercise_folder="", order=[], seed=0, tasks={})
    sgemm = find("02").task("sgemm")
    kept = [c.describe() for c in sanitizer_cases(sgemm, job)]
    assert "M=1000, N=1000, K=1000" not in kept and "M=4096, N=4096, K=4096" not in kept
    assert {"M=1, N=1, K=1", "M=17, N=17, K=17", "M=4097, N=129, K=17", "M=300, N=516, K=1028"} <= set(kept)
    assert len(sanitizer_cases(find("01").task("vector_add"), job)) >= 5
