"""A learner's copy of the course: everything a learner works with, no solution and no answer.

``write_learner_copy(DIR, gpu)`` writes

    DIR/exercises/        the stubs, notebooks, baselines, references and specs of every exercise;
                          each exercise's derivations.py checks answers against answer_key.npz
    DIR/grader/           the grader, as in the full repository
    DIR/hardware/         the GPUs' spec sheets and microbenchmarks
    DIR/tests/            the tests that need no solution
    DIR/README.md         the learner's README
    DIR/learner-copy.toml the GPU the answer keys were made for
    DIR/pyproject.toml, DIR/setup.sh

and nothing of solutions/. An answer key is written by running the exercise's notebook with the
hidden answers in its answer cells while grader.derivations.key_recorder watches the instructor's
checkers judge them, for the GPU the instructor names: then every key is checked against the same
answers before the copy is done. Nothing here knows an exercise or a prompt.
"""
from __future__ import annotations

import ast
import contextlib
import datetime
import fnmatch
import io
import json
import re
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grader import spec as specmod
from grader.course import CourseError, defined_names, hidden_answers
from grader.derivations import answer_key, core
from hardware.specs import GpuSpec, default_spec, load_specs, spec_for

KEY_FILE = "answer_key.npz"
README_TEMPLATE = Path(__file__).with_name("learner_readme.md")
COPIED = ("grader", "hardware")                 # folders copied whole (less build products)
FILES = ("pyproject.toml", "setup.sh", ".gitignore")
# A test that reads solutions/ (or the hidden answers), or the full repository's CI, cannot run in
# a learner's copy.
NEEDS_SOLUTIONS = re.compile(r"""["']solutions["']|solutions_dir|\bSOLUTIONS\b|load_answers|answers\.py|["']\.ci["']""")


@dataclass(frozen=True)
class LearnerCopyReport:
    root: Path
    gpu: GpuSpec
    why_gpu: str
    exercises: tuple[str, ...]
    prompts: int
    tests: tuple[str, ...]


# ================================================================== which GPU

def choose_gpu(name: str | None) -> tuple[GpuSpec, str]:
    """The GPU named (a key of hardware/specs.toml or a GPU's name), else this machine's, else the
    default; and why it is that one, in words."""
    if name:
        spec = core.named_spec(name)
        if spec is None:
            known = ", ".join(f"{s.key} ({s.name})" for s in load_specs())
            raise CourseError(f"no spec sheet matches the GPU {name!r}; hardware/specs.toml knows: {known}")
        return spec, "named with --gpu"
    detected = core.detect_gpu_name()
    spec = spec_for(detected) if detected else None
    if spec is not None:
        return spec, f"this machine's GPU, reported as '{detected}'"
    if detected:
        return default_spec(), f"this machine's GPU '{detected}' has no spec sheet, so the course's default GPU"
    return default_spec(), "no GPU on this machine, so the course's default GPU"


# ================================================================== answer keys

def _notebook_cells(exercise: specmod.Exercise) -> list[dict]:
    path = exercise.folder / exercise.notebook
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _run_cell(code: str, namespace: dict) -> None:
    exec(compile(code, "<cell>", "exec"), namespace)


def record_keys(exercise: specmod.Exercise, gpu: GpuSpec, salt: bytes) -> tuple[answer_key.AnswerKey,
                                                                                   answer_key.Recorder]:
    """The answer key of every prompt of ``exercise``: its notebook run with the hidden answers in its
    answer cells, each check watched; then each key is checked against the answer it was made from.
    The recorder keeps the arrays the key names, and the hidden answers it was made from."""
    answers_file = specmod.solutions_dir() / exercise.folder.name / "answers.py"
    if not answers_file.is_file():
        raise CourseError(f"{answers_file} does not exist: the hidden answers of exercise {exercise.id} live there")
    answers = answers_file.read_text()
    recorder = answer_key.Recorder(salt)
    namespace: dict = {}
    with core.using_gpu(gpu, core.THIS_COPY), contextlib.redirect_stdout(io.StringIO()):
        with core.observed_by(recorder):
            for cell in _notebook_cells(exercise):
                tags = cell.get("metadata", {}).get("tags", [])
                if cell["cell_type"] != "code" or "grade" in tags:
                    continue
                code = _source(cell)
                if any(t.startswith("answer:") for t in tags):
                    code = code + "\n" + hidden_answers(answers, defined_names(code), str(answers_file))
                try:
                    _run_cell(code, namespace)
                except answer_key.NoKey as err:
                    raise CourseError(f"exercise {exercise.id}: {err}") from None
        prompts = [p.id for p in exercise.load_derivations().PROMPTS]
        missing = [p for p in prompts if p not in recorder.keys]
        if missing:
            raise CourseError(f"exercise {exercise.id}: the notebook never checks {', '.join(missing)}, so no "
                              "answer key could be written for it")
        key = answer_key.AnswerKey(exercise.id, gpu.key, salt, [recorder.keys[p] for p in prompts],
                                   recorder.packer.arrays)
        for prompt in key.prompts:
            verdict = answer_key.checker(prompt, key)(recorder.answers[prompt.id])
            if not verdict.passed or verdict.message != recorder.messages[prompt.id]:
                raise CourseError(f"exercise {exercise.id}, prompt {prompt.id}: its answer key does not pass the "
                                  f"hidden answer it was made from:\n{verdict.message}")
    return key, recorder


DERIVATIONS = '''"""Self-checks of the derivation prompts of exercise {id}, made for the {gpu}.

This is a learner's copy of the course: it holds no answer. {key} holds, for every prompt, the
inputs its checker gives your functions and salted digests of the right results, each rounded to
the prompt's tolerance; checking an answer compares its digests with them (see
grader/derivations/answer_key.py). Graded points come from the instructor's own checkers.
Written by `grade course learner-copy`.
"""
from pathlib import Path

from grader.derivations.answer_key import load_prompts

PROMPTS = load_prompts(Path(__file__).with_name("{key}"))
'''


# ================================================================== the files

# Never copied: editor state, caches and build products.
COPY_IGNORED = [".ipynb_checkpoints", "__pycache__", "*.pyc", ".pytest_cache", "*.egg-info", ".DS_Store", "*.so",
                "*.o", "a.out"]


def _ignored(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in COPY_IGNORED)


def _copy_tree(source: Path, target: Path, skip: Callable[[Path], bool] = lambda p: False) -> None:
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if any(_ignored(part) for part in rel.parts) or skip(path):
            continue
        if path.is_file():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / rel)


def _imports(text: str) -> set[str]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def _solution_artifact(path: Path) -> bool:
    """A file recorded from the reference solutions says so in its name (a profile of them embeds
    their PTX and machine code): it stays in the full repository."""
    return "solution" in path.name


def learner_tests(tests: Path) -> tuple[list[Path], list[Path]]:
    """The test modules that need no solution, and the support folders they use: a module that names
    solutions/, the hidden answers or a file recorded from the solutions is left out, and so is one
    that imports a module left out. Support folders are copied without such files."""
    modules = {p.stem: p for p in sorted(tests.glob("*.py"))}
    texts = {name: p.read_text(encoding="utf-8") for name, p in modules.items()}
    artifacts = {p.name for p in tests.rglob("*") if p.is_file() and _solution_artifact(p)}
    out = {name for name, text in texts.items()
           if NEEDS_SOLUTIONS.search(text) or any(a in text for a in artifacts)}
    changed = True
    while changed:
        changed = False
        for name, text in texts.items():
            if name not in out and _imports(text) & out:
                out.add(name)
                changed = True
    kept = [modules[name] for name in modules if name not in out]
    used = "\n".join(texts[p.stem] for p in kept)
    imported = set().union(*(_imports(texts[p.stem]) for p in kept))
    support = [p for p in sorted(tests.iterdir()) if p.is_dir() and not _ignored(p.name)
               and (p.name in imported or re.search(rf"""["']{re.escape(p.name)}["']""", used))]
    return kept, support


def _exercise_table(exercises: list[specmod.Exercise]) -> str:
    rows = ["| exercise | folder | tasks |", "| --- | --- | --- |"]
    for ex in exercises:
        tasks = ", ".join(f"`{t.name}`" for t in ex.tasks) or ", ".join(f"`grade model {m}`" for m in ex.models)
        rows.append(f"| {ex.id} {ex.title} | `exercises/{ex.folder.name}` | {tasks} |")
    return "\n".join(rows)


def write_learner_copy(target: Path, gpu_name: str | None = None) -> LearnerCopyReport:
    """Write a learner's copy of this repository's course into ``target`` (see the module's notes): a
    new or empty folder, or an earlier copy, which is rewritten."""
    repo = specmod.repo_root()
    if specmod.learner_copy(repo) is not None:
        raise CourseError(f"{repo} is itself a learner's copy: it holds no answers to make keys from. Make the copy "
                          "from the instructor's repository")
    if not (repo / "solutions").is_dir():
        raise CourseError(f"{repo / 'solutions'} does not exist: the answer keys are made from the hidden answers")
    target = Path(target).resolve()
    if target == repo or repo in target.parents:
        raise CourseError(f"{target} is inside the repository; choose a folder outside it")
    if target.exists() and any(target.iterdir()) and not (target / specmod.LEARNER_COPY_FILE).is_file():
        raise CourseError(f"{target} exists, is not empty and is not a learner's copy: choose a new folder")
    gpu, why = choose_gpu(gpu_name)
    exercises = specmod.units()
    salt = secrets.token_bytes(16)

    keys = [(ex, *record_keys(ex, gpu, salt)) for ex in exercises if ex.derivations_file]

    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    replaced = {ex.folder / ex.derivations_file for ex, _, _ in keys}
    _copy_tree(repo / "exercises", staging / "exercises", skip=lambda p: p in replaced)
    for folder in COPIED:
        _copy_tree(repo / folder, staging / folder)
    for name in FILES:
        if (repo / name).is_file():
            shutil.copy2(repo / name, staging / name)
    for ex, key, recorder in keys:
        folder = staging / "exercises" / ex.folder.name
        answer_key.save(key, folder / KEY_FILE, recorder.packer)
        (folder / ex.derivations_file).write_text(DERIVATIONS.format(id=ex.id, gpu=gpu.name, key=KEY_FILE))
    kept, support = learner_tests(repo / "tests")
    (staging / "tests").mkdir()
    for module in kept:
        shutil.copy2(module, staging / "tests" / module.name)
    for folder in support:
        _copy_tree(folder, staging / "tests" / folder.name, skip=_solution_artifact)
    readme = README_TEMPLATE.read_text(encoding="utf-8")
    (staging / "README.md").write_text(readme.replace("{gpu}", gpu.name).replace("{gpu_key}", gpu.key)
                                       .replace("{exercises}", _exercise_table(exercises)))
    (staging / specmod.LEARNER_COPY_FILE).write_text(
        "# Written by `grade course learner-copy`: a learner's copy of the course, without solutions or answers.\n"
        f"# Its answer keys hold the figures of this GPU ({gpu.name}; {why}).\n"
        f'gpu = "{gpu.key}"\n'
        f'made = "{datetime.date.today().isoformat()}"\n')
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    return LearnerCopyReport(target, gpu, why, tuple(ex.folder.name for ex, _, _ in keys),
                             sum(len(k.prompts) for _, k, _ in keys), tuple(p.name for p in kept))
