"""Whatever a learner hands in, the grader answers with a sentence and a documented exit status,
never a traceback: binary files, other encodings, huge files, empty files, empty folders, a file
where a folder belongs. The CLI and the Python API both, on a machine without a GPU."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.pipeline import GradingError, Options, grade

ROOT = Path(__file__).resolve().parents[1]
STUBS = ROOT / "exercises" / "01_foundations"
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not on PATH")


FOLDER = object()         # vector_add.cu is a folder


def submission(tmp_path: Path, vector_add: bytes | None | object, name: str = "submission") -> Path:
    """Exercise 01's stubs, with vector_add.cu replaced (or left out when None)."""
    folder = tmp_path / name
    folder.mkdir()
    for stub in ("reduce_sum.cu", "transpose.cu"):
        shutil.copy(STUBS / stub, folder / stub)
    if vector_add is FOLDER:
        (folder / "vector_add.cu").mkdir()
    elif vector_add is not None:
        (folder / "vector_add.cu").write_bytes(vector_add)
    return folder


BAD_FILES = {
    "random bytes": (bytes(range(256)) * 40, "is not text"),
    "latin-1 text": ('extern "C" void vector_add() {}\n// café\n'.encode("latin-1"), "is not UTF-8"),
    "a NUL byte": (b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 64, "it holds a NUL byte"),
    "two megabytes": (b"// " + b"a" * (2 << 20) + b"\n", "is 2.0 MB; a kernel source is a few kilobytes"),
    "an empty file": (b"", "defines no function vector_add()"),
    "missing": (None, "vector_add.cu is missing from"),
    "a folder": (FOLDER, "vector_add.cu is a folder, not a file, in"),
}


def run_cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", S2S_CACHE=str(cache), NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "grader.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.parametrize("case", BAD_FILES)
def test_a_bad_file_fails_its_task_with_a_sentence_and_spares_the_others(case, tmp_path):
    data, fragment = BAD_FILES[case]
    folder = submission(tmp_path, data)
    done = run_cli("exercise", "01", "--submission", str(folder), "--json", cache=tmp_path / "cache")
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    tasks = {t["name"]: t for t in result["tasks"]}
    assert tasks["vector_add"]["status"] == "failed" and fragment in tasks["vector_add"]["summary"]
    assert tasks["reduce_sum"]["status"] == tasks["transpose"]["status"] == "not run"   # compiled; no GPU here
    leftovers = [p.name for p in (tmp_path / "cache" / "build").iterdir() if "." in p.name]
    assert leftovers == []                      # no half-built folder left in the cache


def test_a_folder_whose_name_is_not_utf8_is_graded_like_any_other(tmp_path):
    """Folder names are bytes: one that is not UTF-8 (here Latin-1) changes nothing in the report."""
    if sys.getfilesystemencoding().lower() not in ("utf-8", "utf8"):
        pytest.skip("this file system's names are not decoded as UTF-8 here")
    name = os.fsdecode(b"caf\xe9")
    folder = submission(tmp_path, (STUBS / "vector_add.cu").read_bytes(), name)
    # Streams as strict as a desktop's UTF-8 locale makes them.
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", S2S_CACHE=str(tmp_path / "cache"), NO_COLOR="1",
               PYTHONIOENCODING="utf-8:strict")
    for args in (("--json",), ()):
        done = subprocess.run([sys.executable, "-m", "grader.cli", "exercise", "01", "--submission", str(folder),
                               *args], cwd=ROOT, env=env, capture_output=True, timeout=600)
        out, err = (os.fsdecode(stream) for stream in (done.stdout, done.stderr))
        assert "Traceback" not in out + err, err
        assert done.returncode == 3, err            # compiled; no GPU here
        assert "invalid multibyte character" not in out
        if not args:
            assert f"submission: {folder}" in out
    result = json.loads(run_cli("exercise", "01", "--submission", str(folder), "--json",
                                cache=tmp_path / "cache").stdout)
    assert result["submission"] == str(folder)
    assert {t["status"] for t in result["tasks"]} == {"not run"}


@pytest.mark.parametrize("args, fragment", [
    (("exercise", "01", "--submission", "{file}"), "is a file; --submission takes the folder"),
    (("exercise", "01", "--submission", "{missing}"), "does not exist"),
    (("exercise", "99"), "there is no exercise '99'"),
    (("exercise", "01", "--task", "vector_ädd"), "has no task 'vector_ädd'"),
    (("exercise", "01", "--no-such-option"), "No such option"),
])
def test_usage_errors_exit_2_with_a_sentence(args, fragment, tmp_path):
    (tmp_path / "vector_add.cu").write_text("// a file\n")
    args = [a.format(file=tmp_path / "vector_add.cu", missing=tmp_path / "nowhere") for a in args]
    done = run_cli(*args, cache=tmp_path / "cache")
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr
    assert fragment in " ".join((done.stdout + done.stderr).split()), done.stderr


def test_the_python_api_returns_a_result_for_a_bad_file(tmp_path, monkeypatch):
    """In a class, one unreadable file costs that task only, not every task of the student."""
    monkeypatch.setenv("S2S_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    result = grade("01", Options(submission=submission(tmp_path, bytes(range(256)) * 4)))
    assert result.task("vector_add").status == "failed" and "is not text" in result.task("vector_add").summary
    assert result.task("transpose").build.ok
    with pytest.raises(GradingError, match="is a file"):
        grade("01", Options(submission=STUBS / "vector_add.cu"))
