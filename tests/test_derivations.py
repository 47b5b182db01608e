"""What every exercise's derivation prompts promise, read from the exercise folder: the notebook asks
the prompts in the order the checkers list them, the untouched notebook runs and every check says it
is not answered yet, the hidden answers written into the notebook's answer cells pass every check
with full points, and the notebook holds templates, not those answers.

What is particular to one exercise (its slips and their hints) is in tests/test_derivations_NN.py.
"""
from __future__ import annotations

import ast
import builtins
import re

import pytest
from derivation_helpers import cells_tagged, load_answers, no_gpu, read_notebook, run_notebook, source  # noqa: F401

from grader.derivations import CheckResult, prompts
from grader.spec import solutions_dir, units

EXERCISES = [ex for ex in units() if ex.derivations_file]     # the capstone too


def _notebook(exercise) -> dict:
    return read_notebook(exercise.folder / exercise.notebook)


def _answers_path(exercise):
    return solutions_dir() / exercise.slug / "answers.py"


def _defined(code: str) -> list[str]:
    """The top-level names an answer cell defines (its functions and its assignments)."""
    names = []
    for node in ast.parse(code).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return names


def test_every_exercise_with_prompts_is_here() -> None:
    assert [ex.id for ex in EXERCISES] == ["01", "02", "03", "04", "05", "06"]


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda ex: ex.id)
def test_the_notebook_asks_the_prompts_in_their_order(exercise) -> None:
    notebook = _notebook(exercise)
    ids = [p.id for p in prompts(exercise.id)]
    assert list(cells_tagged(notebook, "check:")) == ids
    assert list(cells_tagged(notebook, "answer:")) == ids
    assert all(p.title and p.max_points > 0 for p in prompts(exercise.id))
    for prompt, cell in cells_tagged(notebook, "check:").items():
        assert re.search(rf'check\("{exercise.id}", "{prompt}"', source(cell)), source(cell)


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda ex: ex.id)
def test_the_untouched_notebook_runs_and_every_check_says_not_answered(exercise) -> None:
    results = run_notebook(_notebook(exercise))
    assert list(results) == [p.id for p in prompts(exercise.id)]
    for prompt, result in results.items():
        assert isinstance(result, CheckResult), prompt
        assert not result.passed and result.points == 0, prompt
        assert re.search(r"[Nn]ot (answered|written) yet", result.message), f"{prompt}: {result.message}"


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda ex: ex.id)
def test_the_hidden_answers_in_the_notebook_pass_every_check(exercise, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each answer cell replaced by the names it defines, taken from the hidden answers.py."""
    answers = load_answers(_answers_path(exercise))
    monkeypatch.setattr(builtins, "_hidden_answers", answers, raising=False)   # seen by every cell

    def answered(prompt: str, code: str) -> str:
        names = _defined(code)
        assert names, f"{prompt}: the answer cell defines nothing"
        missing = [n for n in names if not hasattr(answers, n)]
        assert not missing, f"{prompt}: answers.py lacks {missing}"
        return "\n".join(f"{n} = _hidden_answers.{n}" for n in names)

    results = run_notebook(_notebook(exercise), answered)
    for prompt, result in results.items():
        assert result.passed and result.points == result.max_points, f"{prompt}: {result.message}"
        assert "\u2718" not in result.message, f"{prompt}: a passing check marks nothing wrong"
    assert sum(r.max_points for r in results.values()) == sum(p.max_points for p in prompts(exercise.id))


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda ex: ex.id)
def test_the_notebook_holds_templates_not_answers(exercise) -> None:
    notebook = _notebook(exercise)
    everything = " ".join(" ".join(source(c) for c in notebook["cells"]).split())
    text = _answers_path(exercise).read_text()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef):
            for statement in node.body:
                if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)):
                    snippet = " ".join(ast.get_source_segment(text, statement).split())
                    assert snippet not in everything, snippet
