"""The learner's process: map the grader's buffers, call the learner's function, say "done".

Requests arrive as JSON lines on stdin, replies leave as JSON lines on the pipe whose file
descriptor S2S_SANDBOX_REPLIES names;
stdout and stderr are the learner's printf. The order is fixed: create the CUDA context, map the
grader's arena (CUDA IPC), confine the process (:mod:`grader.sandbox.confine`), reply "ready", and only then
load the learner's library, whose constructors therefore run confined.

Nothing this process replies can raise a grade: the grader reads every output itself, and the
event time reported here is checked against the grader's own clock. A reply can only lower the
learner's grade (a launch error, a crash).

    {"op": "load", "library": PATH, "symbol": NAME, "argtypes": ["p", "i", "l", "f", ...]}
    {"op": "call", "args": [...], "timed": BOOL}
        -> {"event_s": SECONDS or null, "launch_error": TEXT or null}
    {"op": "empty", "timed": true}                   the same, without calling the learner
    any request can instead get {"cuda_error": NAME, "message": TEXT} (the context is lost) or
    {"error": TEXT}
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
from typing import Any

from grader.sandbox.confine import Confinement, confine
from grader.sandbox.driver import CudaError, Driver

# What a library built by nvcc (static CUDA runtime) needs besides libc and the driver. Loaded
# before the confinement: the loader then finds them by name, without opening files it may no
# longer read.
RUNTIME_LIBRARIES = ("libstdc++.so.6", "libgcc_s.so.1", "libm.so.6")
_CTYPES = {"p": ctypes.c_void_p, "i": ctypes.c_int, "l": ctypes.c_int64, "f": ctypes.c_float}


class Learner:
    def __init__(self, library: str, symbol: str, argtypes: list[str]):
        self.lib = ctypes.CDLL(library, mode=ctypes.RTLD_LOCAL)
        self.fn = getattr(self.lib, symbol)        # AttributeError: no such function
        self.fn.restype = None
        self.fn.argtypes = [_CTYPES[t] for t in argtypes]
        self.types = argtypes
        self._last = getattr(self.lib, "s2s_last_error", None)
        self._name = getattr(self.lib, "s2s_error_name", None)
        self._string = getattr(self.lib, "s2s_error_string", None)
        for f in (self._name, self._string):
            if f is not None:
                f.restype, f.argtypes = ctypes.c_char_p, [ctypes.c_int]
        if self._last is not None:
            self._last.restype, self._last.argtypes = ctypes.c_int, []

    def launch_error(self) -> str | None:
        """A launch error recorded by the library's own CUDA runtime."""
        code = self._last() if self._last is not None else 0
        if not code:
            return None
        name = self._name(code).decode(errors="replace") if self._name else str(code)
        text = self._string(code).decode(errors="replace") if self._string else ""
        return f"{name}: {text}"


class Server:
    def __init__(self, driver: Driver, replies: Any):
        self.driver, self.replies = driver, replies
        self.learner: Learner | None = None
        self.current = 0            # the id of the request being answered (0: none yet)

    def reply(self, **fields: Any) -> None:
        self.replies.write(json.dumps({"id": self.current, **fields}) + "\n")
        self.replies.flush()

    def handle(self, request: dict[str, Any]) -> None:
        self.current = request.get("id", 0)
        op = request.get("op")
        if op == "load":
            try:
                self.learner = Learner(request["library"], request["symbol"], request["argtypes"])
            except AttributeError:
                self.reply(error="missing symbol")
                return
            except OSError as exc:
                self.reply(error=f"the library does not load: {exc}")
                return
            self.reply(ok=True)
        elif op in ("call", "empty"):
            self.call(request, op == "call")
        else:
            self.reply(error=f"unknown request {op!r}")

    def call(self, request: dict[str, Any], learner: bool) -> None:
        timed = bool(request.get("timed"))
        d = self.driver
        if learner and self.learner is None:
            self.reply(error="no library loaded")
            return
        # No busy kernel before the call: the grader's observer holds the GPU until its time slice
        # ends, so the whole call is queued before any of it runs (grader.worker.observer).
        if timed:
            d.record(d.start)
        if learner:
            self.learner.fn(*request["args"])
        if timed:
            d.record(d.end)
        d.synchronize()
        launch = self.learner.launch_error() if learner else None
        self.reply(event_s=d.elapsed_s() if timed else None, launch_error=launch)


def confine_for_learner(scratch: str) -> Confinement:
    """Load what a learner's library links against, then confine this process for good."""
    for name in RUNTIME_LIBRARIES:
        with contextlib.suppress(OSError):
            ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
    return confine(scratch, [])


def main() -> int:
    # Python ignores SIGXFSZ; the default stops this process once the learner's printf passes the
    # grader's limit on its output, instead of dropping the rest silently.
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    replies = os.fdopen(int(os.environ["S2S_SANDBOX_REPLIES"]), "w", buffering=1)
    scratch = os.environ["S2S_SANDBOX_SCRATCH"]
    device = int(os.environ.get("S2S_SANDBOX_DEVICE", "0"))
    try:
        driver = Driver(device)
        driver.synchronize()
    except CudaError as exc:
        replies.write(json.dumps({"id": 0, "error": f"CUDA could not start: {exc}"}) + "\n")
        return 3
    try:
        # Mapped now: opening another process's CUDA IPC handle reads that process's files, which
        # the confinement below forbids.
        arena = driver.open_ipc(bytes.fromhex(os.environ["S2S_SANDBOX_ARENA"]))
    except (CudaError, KeyError, ValueError) as exc:
        replies.write(json.dumps({"id": 0, "error": f"the grader's memory could not be mapped here: {exc}"}) + "\n")
        return 3
    confinement = confine_for_learner(scratch)
    server = Server(driver, replies)
    server.reply(ready=True, arena=arena, confinement=confinement.describe(), applied=confinement.applied)
    return serve(server, sys.stdin)


def serve(server: Server, requests: Any) -> int:
    """Answer requests, one JSON object a line, until they end or the CUDA context is lost."""
    for line in requests:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if request.get("op") == "exit":
            break
        try:
            server.handle(request)
        except CudaError as exc:
            server.reply(cuda_error=exc.name, message=str(exc))
            return 1
    return 0
