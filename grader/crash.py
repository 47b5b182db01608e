"""What a process's end status says to a learner: the signal or exit that stopped their code."""
from __future__ import annotations

import resource
import signal

OUTPUT_LIMIT_BYTES = 64 << 20       # the learner's printf: beyond this the process is stopped (SIGXFSZ)


def signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def crash_message(code: int | None) -> str:
    """A sentence for a process that ended with ``code`` (negative: killed by that signal)."""
    if code is None:
        return "the process stopped unexpectedly"
    if code < 0:
        name = signal_name(code)
        hints = {"SIGSEGV": "a segmentation fault in host code (a host pointer bug, or dereferencing a device "
                            "pointer on the CPU)",
                 "SIGABRT": "abort() was called (a failed assert in host code?)",
                 "SIGFPE": "an arithmetic error in host code (integer division by zero?)",
                 "SIGXFSZ": f"it printed more than {OUTPUT_LIMIT_BYTES >> 20} MB of output: printing is slow "
                            "and buries the report, so remove debugging output before grading",
                 "SIGKILL": "it was killed (out of memory?)",
                 "SIGSYS": "it made a system call the grader does not allow"}
        return f"the process was killed by {name}: {hints.get(name, 'a crash')}"
    return (f"the process exited with status {code} in the middle of the task: the code called exit(), "
            "or cudaDeviceReset() tore down its CUDA context")


def cap_output() -> None:
    """In a process that runs learner code: a write past OUTPUT_LIMIT_BYTES stops it (SIGXFSZ)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_LIMIT_BYTES, OUTPUT_LIMIT_BYTES))
