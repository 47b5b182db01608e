"""The adversarial catalogue on any machine, GPU or not.

Every entry of tests/adversarial/catalogue.toml is well formed and names a real exercise,
task and folder; every submission that is not meant to fail compiling compiles for sm_90;
and the cases the grader catches before running anything (library calls, process and timer
tricks, the Python C API, host threads, a wrong signature, a missing symbol, a compile
error or a compile that never ends) are rejected by a real grading, with the message the
catalogue promises, on a machine without a GPU. What only a GPU can reveal is left to
test_gpu_adversarial.py.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from adversarial.catalogue import CATEGORIES, HERE, VERDICTS, Attack, grouped_exercise, load, plan, problems, task_name
from grader.build import Toolchain, compile_cuda
from grader.pipeline import Options, grade
from grader.result import ExitCode
from grader.spec import SpecError, find

ATTACKS = load()
STATIC = [a for a in ATTACKS if a.static]
SOURCES = sorted({a.source for a in ATTACKS if a.compiles})

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None,
                                reason="nvcc (the CUDA toolkit) is not on PATH, so nothing can be compiled here")


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """Shared with the other compiling tests of the run: each file is compiled once."""
    return tmp_path_factory.getbasetemp() / "s2s-cache"


@pytest.fixture(autouse=True)
def _own_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S2S_CACHE", str(cache))


# --------------------------------------------------------------------------- the catalogue itself

def test_case_names_are_unique() -> None:
    names = [a.name for a in ATTACKS]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.name)
def test_entry_names_a_real_task_and_a_verdict_the_grader_gives(attack: Attack) -> None:
    try:
        task = find(attack.exercise).task(attack.task)
    except SpecError as exc:
        pytest.fail(f"{attack.name}: {exc}")
    assert attack.category in CATEGORIES
    assert attack.shown_in in VERDICTS, f"{attack.name}: unknown field {attack.shown_in!r}"
    assert set(attack.expects) <= VERDICTS[attack.shown_in], \
        f"{attack.name}: {attack.shown_in} never holds {attack.expects!r}"
    assert (attack.category == "correct") == (attack.shown_in == "timing.passed"), \
        "only a correct kernel fails on the speed bar alone, and it fails nowhere else"
    assert attack.flaw.strip() and attack.summary.strip()
    assert attack.source.is_file(), f"{attack.name}: {attack.source} is missing"
    assert attack.source.name == task.source


def test_every_folder_is_a_case_and_holds_only_task_sources() -> None:
    folders = {p for p in HERE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == {a.folder for a in ATTACKS}, "folders without a catalogue entry, or entries without a folder"
    for folder in folders:
        attacks = [a for a in ATTACKS if a.folder == folder]
        sources = {p.name for p in folder.iterdir()}
        assert sources == {a.source.name for a in attacks}, \
            f"{folder.name} must hold exactly the sources of the tasks it attacks"


def test_the_gpu_test_grades_every_case_once_in_a_few_gradings() -> None:
    groups = plan(ATTACKS)
    graded = [a.name for g in groups for a in g.attacks]
    assert sorted(graded) == sorted(a.name for a in ATTACKS), "a case graded twice or never"
    assert len(groups) <= len([a for a in ATTACKS if a.alone]) + 6
    for g in groups:
        assert len({a.exercise for a in g.attacks}) == 1 and len({tuple(a.limits().items()) for a in g.attacks}) == 1
        assert g.alone == (len(g.attacks) == 1 and g.attacks[0].alone) or len(g.attacks) > 1


@pytest.mark.parametrize("group", [g for g in plan(ATTACKS) if not g.alone], ids=lambda g: g.id)
def test_a_group_is_an_exercise_with_a_task_per_case(group, tmp_path) -> None:
    """The copy of the exercise the GPU test grades: one task per case, reading the case's file
    with the attacked task's reference, baseline and sizes; the real tasks after them, on the
    hidden solutions, when a case stops the worker."""
    folder, submission = grouped_exercise(group, tmp_path)
    spec, original = find(str(folder)), find(group.exercise)
    expected = [task_name(a) for a in group.attacks]
    if group.stops_the_worker:
        expected += [t.name for t in original.tasks]
    assert [t.name for t in spec.tasks] == expected
    for attack in group.attacks:
        task, attacked = spec.task(task_name(attack)), original.task(attack.task)
        assert (submission / task.source).read_bytes() == attack.source.read_bytes()
        assert (task.symbol, task.reference, task.baseline, task.cases) == \
            (attacked.symbol, attacked.reference, attacked.baseline, attacked.cases)


def test_the_catalogue_covers_both_kinds_of_failure_and_a_correct_slow_kernel_per_task() -> None:
    assert {a.category for a in ATTACKS} == set(CATEGORIES)
    slow = {a.task for a in ATTACKS if a.category == "correct" and a.exercise == "01"}
    assert slow == {t.name for t in find("01").tasks}


# --------------------------------------------------------------------------- with nvcc

@needs_nvcc
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_submission_compiles_for_sm_90(source: Path) -> None:
    """So that whatever the GPU grading reports is about the flaw, not the build."""
    build = compile_cuda(source, "sm_90", Toolchain.find(), display_root=source.parent)
    assert build.ok, build.log or build.error
    assert "warning" not in build.log.lower(), build.log


@needs_nvcc
@pytest.mark.parametrize("attack", STATIC, ids=lambda a: a.name)
def test_caught_before_it_runs(attack: Attack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rejected by the same grading a learner runs, on the source and build alone."""
    for name, value in attack.limits().items():
        monkeypatch.setenv(name, value)
    if "missing symbol" in attack.expects and shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed: without it a missing symbol shows only when the GPU worker loads "
                    "the library")
    result = grade(attack.exercise, Options(submission=attack.folder, tasks=(attack.task,), profile=False))
    task = result.task(attack.task)
    found = problems(attack, task)
    assert not found, f"{attack.name} ({attack.flaw}):\n" + "\n".join(found)
    assert task.cases == [], "nothing may run once the source or the build is rejected"
    assert result.exit_code == ExitCode.FAILED
