"""The learner's last result per exercise, submission folder and task, for `grade list`.

A grading of some tasks (``--task``, or `grade model`'s correctness checks) updates the records of
those tasks only: each task keeps its own last result and the time it was graded.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from grader.build import cache_dir

RECORD_VERSION = 2


def _path(exercise: str, submission: str) -> Path:
    # os.fsencode: a folder's name need not be UTF-8 (it comes back from the OS as surrogates).
    key = hashlib.sha256(os.fsencode(str(Path(submission).resolve()))).hexdigest()[:12]
    return cache_dir() / "results" / f"{exercise}-{key}.json"


def save(result: Any) -> None:
    """Merge the result's tasks into the record, atomically; a failure to save never spoils a grading."""
    try:
        path = _path(result.exercise, result.submission)
        path.parent.mkdir(parents=True, exist_ok=True)
        graded = result.to_dict()
        with FileLock(str(path) + ".lock", timeout=10):
            tasks = {t["name"]: t for t in (load(result.exercise, result.submission) or {}).get("tasks", [])}
            for t in graded["tasks"]:
                tasks[t["name"]] = {**t, "started": graded["started"]}
            record = {"version": RECORD_VERSION, "exercise": graded["exercise"], "submission": graded["submission"],
                      "tasks": list(tasks.values())}
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(record, indent=1))
            os.replace(tmp, path)
    except (OSError, ValueError, Timeout):
        pass


def load(exercise: str, submission: str) -> dict[str, Any] | None:
    """The record: ``tasks``, each task's last result with the time it was graded (``started``)."""
    try:
        record = json.loads(_path(exercise, submission).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    for t in record.get("tasks", []):        # a record written before tasks kept their own time
        t.setdefault("started", record.get("started", ""))
    return record
