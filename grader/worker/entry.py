"""Calling an entry point of a compiled library, and the CUDA errors that follow."""
from __future__ import annotations

import ctypes
from typing import Any

from grader import spec as specmod

_CTYPES = {"int32": ctypes.c_int, "int64": ctypes.c_int64, "float32": ctypes.c_float}


class Sticky(Exception):
    """A CUDA error that leaves the context unusable: stop after this task."""


class RemoteSticky(Sticky):
    """The same in the learner's own process: that process is replaced, this one carries on."""


class Entry:
    """A learner or baseline entry point loaded from its shared library."""

    def __init__(self, library: str, task: specmod.Task):
        self.lib = ctypes.CDLL(library, mode=ctypes.RTLD_LOCAL)
        try:
            self.fn = getattr(self.lib, task.symbol)
        except AttributeError:
            raise LookupError(task.symbol) from None
        self.fn.restype = None
        self.fn.argtypes = [_CTYPES[a.dtype] if a.role == "scalar" else ctypes.c_void_p for a in task.args]
        self._last = getattr(self.lib, "s2s_last_error", None)
        self._string = getattr(self.lib, "s2s_error_string", None)
        self._name = getattr(self.lib, "s2s_error_name", None)
        for f in (self._string, self._name):
            if f is not None:
                f.restype = ctypes.c_char_p
                f.argtypes = [ctypes.c_int]
        if self._last is not None:
            self._last.restype = ctypes.c_int
            self._last.argtypes = []

    def __call__(self, values: list[Any]) -> None:
        self.fn(*values)

    def launch_error(self) -> str | None:
        """A launch error recorded by the library's own CUDA runtime, if any."""
        if self._last is None:
            return None
        code = self._last()
        if code == 0:
            return None
        name = self._name(code).decode() if self._name else str(code)
        text = self._string(code).decode() if self._string else ""
        return f"{name}: {text}"

    def launch_problem(self) -> tuple[str, str] | None:
        launch = self.launch_error()
        return launch_problem_message(launch) if launch else None


def launch_problem_message(launch: str) -> tuple[str, str]:
    return "launch error", (f"a kernel launch failed: {launch} (check the launch configuration: at most "
                            "1024 threads per block, a grid of at least one block, and no more dynamic "
                            "shared memory than the kernel was allowed)")


def synchronize() -> None:
    """Wait for the device; a CUDA error raised here poisons the context for good."""
    import cupy
    try:
        cupy.cuda.runtime.deviceSynchronize()
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise Sticky(cuda_message(exc)) from None


def cuda_message(exc: Exception) -> str:
    text = str(exc)
    hints = {
        "cudaErrorIllegalAddress": "a kernel read or wrote memory outside any buffer (check your index "
                                   "arithmetic and the bounds guards for the last partial block)",
        "cudaErrorMisalignedAddress": "a kernel made a misaligned access (a float4 load needs a 16-byte "
                                      "aligned address)",
        "cudaErrorLaunchTimeout": "a kernel ran too long",
        "cudaErrorAssert": "a device-side assert() failed",
        "cudaErrorIllegalInstruction": "a kernel executed an illegal instruction",
    }
    for key, hint in hints.items():
        if key in text:
            return f"{text}: {hint}"
    return text
