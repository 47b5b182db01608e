"""One grading at a time on a GPU, across the processes and users of a machine.

Two gradings that run their kernels on one GPU at the same moment disturb each other's timings
(measured on an H200: a correct kernel accused of hidden work, a speedup read twice too high). So
the GPU stages of a grading (the worker that checks and times, then Nsight Compute) hold a lock
keyed by the GPU's UUID, in a folder every user can write (``S2S_LOCK_DIR``, default
``/tmp/silicon-to-synapse-locks``). Compiling needs no GPU and runs beside other gradings. A
grading that waits says who holds the GPU and for how long, and gives up after ``S2S_LOCK_TIMEOUT``
seconds (900 unless set) with a sentence, never with a verdict against the learner.
"""
from __future__ import annotations

import contextlib
import getpass
import json
import os
import time
from pathlib import Path
from typing import Callable, Iterator

import filelock

DEFAULT_DIR = "/tmp/silicon-to-synapse-locks"
DEFAULT_TIMEOUT_S = 900.0
POLL_S = 1.0


class GpuBusy(Exception):
    """The GPU stayed busy with other gradings for longer than the wait allows."""


def lock_dir() -> Path:
    folder = Path(os.environ.get("S2S_LOCK_DIR") or DEFAULT_DIR)
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):     # shared by every user, like /tmp itself
            folder.chmod(0o1777)
    return folder


def _holder(info: Path) -> str:
    """Who holds the GPU, as the waiting learner reads it."""
    try:
        data = json.loads(info.read_text())
        since = time.time() - float(data["since"])
        return f"{data['what']} (process {data['pid']} of {data['user']}) holds it, started {since:.0f} s ago"
    except (OSError, ValueError, KeyError, TypeError):
        return "another grading holds it"


@contextlib.contextmanager
def exclusive(gpu_key: str, what: str, say: Callable[[str], None] = lambda _: None,
              timeout_s: float | None = None) -> Iterator[None]:
    """Hold the GPU named ``gpu_key`` (its UUID) for the body; ``say`` hears about the wait."""
    if timeout_s is None:
        timeout_s = float(os.environ.get("S2S_LOCK_TIMEOUT") or DEFAULT_TIMEOUT_S)
    folder = lock_dir()
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in gpu_key)
    lock = filelock.FileLock(str(folder / f"{name}.lock"), mode=0o666)
    info = folder / f"{name}.json"
    began = time.monotonic()
    while True:
        try:
            lock.acquire(timeout=POLL_S)
            break
        except filelock.Timeout:
            waited = time.monotonic() - began
            holder = _holder(info)
            if waited >= timeout_s:
                raise GpuBusy(f"the GPU stayed busy with other gradings for {waited:.0f} s ({holder}), so nothing "
                              "was run; grade again when it is free (S2S_LOCK_TIMEOUT sets how long to wait)") from None
            say(f"waiting for the GPU: {holder}; waited {waited:.0f} s")
    try:
        _write_shared(info, json.dumps({"pid": os.getpid(), "user": _user(), "since": time.time(), "what": what}))
        yield
    finally:
        with contextlib.suppress(OSError):
            info.unlink()
        lock.release()


def _write_shared(path: Path, text: str) -> None:
    """Write a file the next holder can overwrite, whoever it is (a crashed holder leaves it behind)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        with os.fdopen(fd, "w") as f:
            with contextlib.suppress(OSError):
                os.fchmod(f.fileno(), 0o666)
            f.write(text)


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:   # no name for this uid (a container): the number will do
        return str(os.getuid())
