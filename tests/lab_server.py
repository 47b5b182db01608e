"""A JupyterLab server on 127.0.0.1 for the tests that need a real one (the learner's path in
the browser, nbgrader's formgrader), stopped when the test is done."""
from __future__ import annotations

import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Lab:
    base: str       # http://127.0.0.1:PORT
    token: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_up(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"jupyter lab exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"jupyter lab did not answer within {timeout_s:.0f} s:\n{log.read_text()[-3000:]}")


@contextmanager
def jupyter_lab(cwd: Path, env: dict[str, str], log: Path, *options: str) -> Iterator[Lab]:
    """JupyterLab serving ``cwd``, answering on its status API before this yields; its output
    goes to ``log``. ``options`` are extra command-line settings."""
    port, token = _free_port(), secrets.token_hex(16)
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.token={token}", "--ServerApp.allow_root=True",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", *options]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        lab = Lab(f"http://127.0.0.1:{port}", token)
        _wait_until_up(f"{lab.base}/api/status?token={token}", proc, log)
        yield lab
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
