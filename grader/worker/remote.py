"""The checker's side of the learner's process (:mod:`grader.sandbox`): start it, hand it buffers,
ask it to call the learner's function, and believe nothing it says that could raise a grade.

The checker allocates every buffer in one arena that the learner's process maps by CUDA IPC
before it confines itself, fills the inputs, poisons the outputs,
and after each call reads every output itself. The learner's process reports when it is done, a
launch error, and the time its own CUDA events measured; that time is only a hint, which the
checker's own clock (:mod:`grader.worker.timing`) confirms or replaces.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Any, Iterator

from grader import spec as specmod
from grader.crash import crash_message
from grader.worker.entry import RemoteSticky, launch_problem_message
from grader.worker.memory import Arena, CaseMemory

SANDBOX_MODULE = "grader.sandbox"
_ARGTYPES = {"int32": "i", "int64": "l", "float32": "f"}
PR_SET_PDEATHSIG = 1


class SandboxDied(Exception):
    """The learner's process ended in the middle of a request; the message says how."""


def _prepare_child() -> None:
    """In the learner's process before it runs: it dies with the checker."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Sandbox:
    """One learner process: started once for a grading, again after it crashed."""

    def __init__(self, device: int, arena: Arena, wait: bool = True):
        self.arena = arena
        self.scratch = tempfile.mkdtemp(prefix="s2s-sandbox-")
        read_fd, write_fd = os.pipe()
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env.update(PYTHONPATH=root, PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1",
                   S2S_SANDBOX_SCRATCH=self.scratch, S2S_SANDBOX_DEVICE=str(device),
                   S2S_SANDBOX_REPLIES=str(write_fd), S2S_SANDBOX_ARENA=arena.ipc_handle(),
                   CUDA_CACHE_PATH=os.path.join(self.scratch, "nv"))
        # Standard output and error are the checker's, which the grader shows as the learner's printf.
        self.proc = subprocess.Popen([sys.executable, "-m", SANDBOX_MODULE], stdin=subprocess.PIPE, env=env,
                                     cwd=self.scratch, pass_fds=(write_fd,), preexec_fn=_prepare_child)
        os.close(write_fd)
        self.replies = os.fdopen(read_fd, "r", buffering=1)
        self.confinement = ""
        self.applied: list[str] = []
        self.arena_base: int | None = None      # the arena's address in the learner's process
        self.ready = False
        self.switch_s: float | None = None      # a switch here and back, measured before any learner code
        self._loaded = 0
        self._sent = 0
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Until the process has its CUDA context and is confined (it starts while the checker does
        its own start-up work)."""
        if self.ready:
            return
        ready = self._receive()
        if not ready.get("ready"):
            raise RuntimeError(ready.get("error") or "the learner's process did not start")
        base = ready.get("arena")
        if not isinstance(base, int) or not base:
            raise RuntimeError("the learner's process did not map the grader's memory")
        self.confinement = ready.get("confinement", "")
        self.applied = ready.get("applied", [])
        self.arena_base = base
        self.ready = True
        self._signal(signal.SIGSTOP)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _receive(self, expect: int = 0) -> dict[str, Any]:
        line = self.replies.readline()
        if not line:
            raise SandboxDied(crash_message(self._wait()))
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or reply.get("id") != expect:
            # The learner's code owns that process and wrote this; it earns nothing by it.
            raise SandboxDied("the learner's process answered something the grader never asks for "
                              "(its code wrote into the grader's channel)")
        return reply

    def _wait(self) -> int | None:
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def _signal(self, which: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, which)

    def request(self, **fields: Any) -> dict[str, Any]:
        """One request and its reply, matched by a number: a stray line in the channel ends the
        process as a crash rather than answer a later request. Between requests the process is
        stopped: no thread of its own can start GPU work while the checker times the baseline."""
        self._sent += 1
        self._signal(signal.SIGCONT)
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps({"id": self._sent, **fields}) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise SandboxDied(crash_message(self._wait())) from None
        reply = self._receive(self._sent)
        if "cuda_error" in reply:
            self.close()
            raise RemoteSticky(cuda_message(str(reply.get("cuda_error")), str(reply.get("message", ""))))
        self._signal(signal.SIGSTOP)
        return reply

    def load(self, library: str, task: specmod.Task) -> "RemoteEntry":
        """The learner's library, copied into the process's scratch folder (the only place it may
        read besides the system) and loaded there; LookupError when the symbol is missing."""
        self._loaded += 1
        copy = os.path.join(self.scratch, f"learner{self._loaded}.so")
        shutil.copyfile(library, copy)
        argtypes = ["p" if a.role != "scalar" else _ARGTYPES[a.dtype] for a in task.args]
        reply = self.request(op="load", library=copy, symbol=task.symbol, argtypes=argtypes)
        if reply.get("error") == "missing symbol":
            raise LookupError(task.symbol)
        if reply.get("error"):
            raise SandboxDied(str(reply["error"]))
        return RemoteEntry(self, task)

    def close(self) -> None:
        if self.proc.poll() is None:
            self._signal(signal.SIGCONT)            # to read the end of its requests and exit
            with contextlib.suppress(OSError, ValueError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(OSError):
            self.replies.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


class RemoteEntry:
    """The learner's entry point in its own process, with what the checker uses of a local one."""

    def __init__(self, sandbox: Sandbox, task: specmod.Task):
        self.sandbox, self.task = sandbox, task
        self.last: dict[str, Any] = {}

    @property
    def arena(self) -> Arena:
        """Where the case's buffers must be carved from: the memory the learner's process mapped."""
        return self.sandbox.arena

    @contextlib.contextmanager
    def attach(self, memory: CaseMemory) -> Iterator[None]:
        """The case's buffers at their addresses in the learner's process for the duration: the
        arena's base there plus each buffer's offset in it."""
        buffers = memory.buffers()
        base = self.sandbox.arena_base
        if base is None or any(b.offset is None for b in buffers):
            raise SandboxDied("the case's buffers lie outside the memory the learner's process mapped")
        memory.bind([base + b.offset for b in buffers])
        try:
            yield
        finally:
            memory.bind([None] * len(buffers))

    def __call__(self, values: list[Any]) -> None:
        self.last = self.sandbox.request(op="call", args=values, timed=False)

    def timed(self, values: list[Any] | None) -> float:
        """One call (None: an empty one) between the learner's process's own events; their time."""
        if values is None:
            self.last = self.sandbox.request(op="empty", timed=True)
        else:
            self.last = self.sandbox.request(op="call", args=values, timed=True)
        value = self.last.get("event_s")
        return float(value) if isinstance(value, (int, float)) else float("nan")

    def launch_problem(self) -> tuple[str, str] | None:
        error = self.last.get("launch_error")
        return launch_problem_message(str(error)) if error else None


def attached(learner: Any, memory: CaseMemory) -> Any:
    """The case's buffers mapped into the learner's process, where the learner runs there."""
    attach = getattr(learner, "attach", None)
    return attach(memory) if attach is not None else contextlib.nullcontext()


def _runtime_name(driver_name: str) -> str:
    """CUDA_ERROR_ILLEGAL_ADDRESS -> cudaErrorIllegalAddress, the name learners know."""
    words = driver_name.removeprefix("CUDA_ERROR_").split("_")
    return "cudaError" + "".join(w.capitalize() for w in words)


def cuda_message(driver_name: str, message: str) -> str:
    from grader.worker.entry import cuda_message as with_hint
    text = message.split(": ", 1)[1] if ": " in message else message
    text = text.rsplit(" (in ", 1)[0]
    return with_hint(f"{_runtime_name(driver_name)}: {text}")
