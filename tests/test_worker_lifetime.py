"""A grading that is stopped never leaves its worker behind on the GPU: the worker is killed with
the grader (SIGKILL of the grader: the kernel's parent-death signal; SIGTERM: the normal unwinding
kills the worker's process group)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from grader.spec import repo_root

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")

PARENT = textwrap.dedent("""
    import subprocess, sys, time
    from grader import runner
    child = subprocess.Popen(["sleep", "60"], start_new_session=True, preexec_fn=runner._prepare_child)
    print(child.pid, flush=True)
    with runner._stopped_by_sigterm():
        try:
            time.sleep(60)
        finally:
            runner._kill(child)
""")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_the_worker_dies_with_the_grader(how: signal.Signals) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True,
                              cwd=str(repo_root()), env={**os.environ, "PYTHONPATH": str(repo_root())})
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.send_signal(how)
    parent.wait(timeout=10)
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), f"the worker (pid {child}) outlived the grader stopped by {how.name}"
