"""Other processes on the GPU while the grader times, seen through NVML.

The lock (grader/gpulock.py) keeps gradings apart, but anything else on a shared GPU (a learner's
notebook training a model, a job of another course) slows whatever runs beside it: a learner's
kernel timed next to a PyTorch matmul loop reads slower, or its baseline does and the speedup
reads higher, and the time the host waits for the device looks like hidden work. So each
benchmark size is timed between two readings of NVML's per-process utilisation; when a process
other than this worker used the GPU's SMs in between, the size is timed again, and when that
keeps happening the timing is reported as disturbed, naming the process, and no verdict is drawn
from it.

A process's id as NVML reports it may belong to another PID namespace (a container sees its own
ids, the driver the host's). So the worker's own id on the GPU is learned by difference: the
processes holding a context on this GPU before the worker created its own, and after.
"""
from __future__ import annotations

import os
import time
from typing import Any


class Watch:
    """NVML's view of one GPU: which other processes kept its SMs busy since ``begin()``."""

    def __init__(self, handle: Any = None, nvml: Any = None, reason: str = ""):
        self._handle, self._nvml = handle, nvml
        self.reason = reason             # why there is no watch, when there is none
        self.own: set[int] = {os.getpid()}
        self._before: set[int] = set()
        self._since = 0

    @classmethod
    def open(cls, uuid: str) -> "Watch":
        """The watch of the GPU with this UUID ("GPU-8c5e..."); one that sees nothing when NVML or
        the UUID is missing."""
        if not uuid:
            return cls(reason="the GPU's UUID is unknown")
        try:
            import pynvml
        except ImportError:
            return cls(reason="nvidia-ml-py is not installed")
        try:
            pynvml.nvmlInit()
            return cls(pynvml.nvmlDeviceGetHandleByUUID(uuid.encode()), pynvml)
        except pynvml.NVMLError as exc:
            return cls(reason=f"NVML: {exc}")

    @property
    def available(self) -> bool:
        return self._handle is not None

    def _running(self) -> set[int]:
        if not self.available:
            return set()
        try:
            return {p.pid for p in self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)}
        except self._nvml.NVMLError:
            return set()

    def before_context(self) -> None:
        """Call before this process creates its CUDA context."""
        self._before = self._running()

    def after_context(self) -> None:
        """Call once the context exists: the process that appeared in between is this one. When
        NVML shows neither this process's id nor exactly one new process, this process cannot be
        told apart from the others, and the watch turns itself off rather than suspect itself."""
        if not self.available:
            return
        now = self._running()
        if os.getpid() in now:
            return
        appeared = now - self._before
        if len(appeared) == 1:
            self.own |= appeared
        else:
            self._handle = None
            self.reason = (f"NVML lists {len(appeared)} new processes on the GPU where this one created its "
                           "context: its own cannot be told apart")

    def before_other(self) -> None:
        """Call before this process starts the learner's process, which creates a context too."""
        self._before_other = self._running()

    def adopt(self, pid: int) -> None:
        """The learner's process (``pid``) has its context now: its work is this grading's own."""
        if not self.available:
            return
        now = self._running()
        if pid in now:
            self.own.add(pid)
            return
        appeared = now - getattr(self, "_before_other", set()) - self.own
        if len(appeared) == 1:
            self.own |= appeared
        else:
            self._handle = None
            self.reason = (f"NVML lists {len(appeared)} new processes on the GPU where the learner's process "
                           "created its context: it cannot be told apart from the others")

    def begin(self) -> None:
        self._since = int(time.time() * 1e6)       # NVML's sample clock: microseconds of the host

    def others(self) -> list[str]:
        """Processes other than this one that used the GPU's SMs since ``begin()``, as
        "python (process 4242)"; empty when none did or when NVML cannot say."""
        if not self.available:
            return []
        try:
            samples = self._nvml.nvmlDeviceGetProcessUtilization(self._handle, self._since)
        except self._nvml.NVMLError:       # NOT_FOUND: no process had a sample since then
            return []
        busy = sorted({s.pid for s in samples if s.smUtil > 0 and s.pid not in self.own})
        return [f"{self._name(pid)} (process {pid})" for pid in busy]

    def _name(self, pid: int) -> str:
        try:
            name = self._nvml.nvmlSystemGetProcessName(pid)
            name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
            return os.path.basename(name.split()[0]) if name.strip() else "a process"
        except self._nvml.NVMLError:
            return "a process"
