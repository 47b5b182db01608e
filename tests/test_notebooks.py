"""What every exercise's notebook must be, checked for each exercise folder: valid and without
outputs, one answer cell and one check cell per derivation prompt, links to the stubs and their
speed bars, the grading cell last, every check failing cleanly on the untouched templates, and
every point for the hidden answers. An exercise's own test file checks what its prompts ask."""
from __future__ import annotations

import re

import pytest
from derivation_helpers import (
    assert_valid_notebook_with_clear_outputs,
    cells_tagged,
    no_gpu,  # noqa: F401 (autouse: the GPU cell sees no GPU)
    read_notebook,
    run_notebook,
    source,
)

from grader import spec
from grader.derivations import CheckResult, prompts

EXERCISES = spec.discover()
pytestmark = pytest.mark.parametrize("ex", EXERCISES, ids=[ex.id for ex in EXERCISES])


def _notebook(ex: spec.Exercise) -> dict:
    return read_notebook(ex.folder / ex.notebook)


def _markdown(ex: spec.Exercise) -> str:
    return "\n".join(source(c) for c in _notebook(ex)["cells"] if c["cell_type"] == "markdown")


def test_notebook_is_valid_nbformat_4_with_clear_outputs(ex):
    assert_valid_notebook_with_clear_outputs(ex.folder / ex.notebook)


def test_every_prompt_has_one_answer_cell_and_one_check_cell(ex):
    registered = [p.id for p in prompts(ex.id)]
    assert registered, f"exercise {ex.id} has no derivation prompts"
    nb = _notebook(ex)
    tags = [t for c in nb["cells"] for t in c["metadata"].get("tags", []) if t.startswith(("answer:", "check:"))]
    assert len(tags) == len(set(tags)), f"a tag on two cells: {sorted(t for t in tags if tags.count(t) > 1)}"
    assert list(cells_tagged(nb, "answer:")) == registered
    assert list(cells_tagged(nb, "check:")) == registered
    for prompt, cell in cells_tagged(nb, "check:").items():
        assert re.fullmatch(rf'check\("{ex.id}",\s*"{prompt}"(,.*)?\)', source(cell).strip(), re.S), prompt
    code = "\n".join(source(c) for c in nb["cells"] if c["cell_type"] == "code")
    assert sorted(re.findall(rf'check\(\s*"{ex.id}",\s*"(\w+)"', code)) == sorted(registered)


def test_notebook_ends_with_the_grading_cell(ex):
    last = _notebook(ex)["cells"][-1]
    assert last["cell_type"] == "code" and "grade" in last["metadata"]["tags"]
    assert source(last) == f'from grader import grade\ngrade("{ex.id}")'


def test_notebook_links_every_stub(ex):
    text = _markdown(ex)
    for task in ex.tasks:
        assert f"[{task.source}]({task.source})" in text, task.name


def test_notebook_states_every_speed_bar_and_links_baselines_and_reference(ex):
    text = _markdown(ex)
    stated = [t.name for t in ex.tasks if f"at least {t.min_speedup:g}\u00d7 the naive" in text]
    assert stated == [t.name for t in ex.tasks]
    assert "[baselines/](baselines/)" in text and "[reference.py](reference.py)" in text


def test_the_untouched_notebook_runs_and_every_check_fails_cleanly(ex, capsys):
    results = run_notebook(_notebook(ex))
    assert set(results) == {p.id for p in prompts(ex.id)}
    for prompt, result in results.items():
        assert isinstance(result, CheckResult), prompt
        assert not result.passed and result.points == 0, prompt
    assert "(no GPU on this machine, so the course's default GPU)" in capsys.readouterr().out


def test_the_notebook_with_the_hidden_answers_gets_every_point(ex):
    """The answers as an nbgrader solution cell carries them: the template first, then the hidden
    region."""
    pytest.importorskip("nbformat")
    from grader.course import defined_names, hidden_answers

    answers = (spec.solutions_dir() / ex.slug / "answers.py").read_text()
    results = run_notebook(_notebook(ex), lambda prompt, stub: stub + "\n" + hidden_answers(answers,
                                                                                          defined_names(stub)))
    assert set(results) == {p.id for p in prompts(ex.id)}
    assert all(r.passed and r.points == r.max_points for r in results.values()), results
