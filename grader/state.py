"""The learner's last result per exercise and submission folder, for `grade list`."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from grader.build import cache_dir


def _path(exercise: str, submission: str) -> Path:
    key = hashlib.sha256(str(Path(submission).resolve()).encode()).hexdigest()[:12]
    return cache_dir() / "results" / f"{exercise}-{key}.json"


def save(result: Any) -> None:
    """Write atomically; a failure to save never spoils a grading."""
    path = _path(result.exercise, result.submission)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(result.to_json())
        os.replace(tmp, path)
    except OSError:
        pass


def load(exercise: str, submission: str) -> dict[str, Any] | None:
    try:
        return json.loads(_path(exercise, submission).read_text())
    except (OSError, ValueError):
        return None
