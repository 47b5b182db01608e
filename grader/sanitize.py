"""Running the learner's code under compute-sanitizer (memcheck, racecheck).

The worker allocates every buffer with cudaMalloc of exactly its size and no guard
regions in this mode (and PyTorch's caching allocator is switched off), so a write of
even one element past an output is outside any allocation and memcheck reports it, with
the kernel and, thanks to -lineinfo, the line.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader.build import find_cuda_tool

TOOLS = ("memcheck", "racecheck")
HEADER = re.compile(r"^========= (Invalid \S+ (read|write)|Error: Race|Race reported|Warning: Race|"
                    r"Error: .*hazard|Malloc/Free error|Misaligned|Uninitialized|Barrier error|"
                    r"Program hit cudaError\w*|Invalid __global__|Invalid __shared__|Invalid __local__)")


@dataclass(frozen=True)
class Finding:
    tool: str
    message: str       # the sanitizer's own words, frames shortened
    location: str      # "vector_add.cu:12" where known

    def to_dict(self) -> dict:
        return {"tool": self.tool, "message": self.message, "location": self.location}


def find_sanitizer() -> str | None:
    return find_cuda_tool("compute-sanitizer")


# The grader's own kernels (PyTorch's: filling, copying, the float64 reference, the comparison)
# run in the same process as the learner's. Checking them finds nothing and costs: a correctness
# case with 500 small tensors took over a minute under memcheck, 11 s with them left out. The
# pattern is matched against mangled names (namespaces at::, c10::, cub::, thrust:: and PyTorch's
# copy of CUB); a learner's kernel, in any namespace of its own or extern "C", is still checked.
GRADER_KERNELS = r"^_ZN(2at|3c10|3cub|6thrust|[0-9]+at_cuda_detail)"


def wrapper(tool: str, log_file: Path) -> list[str]:
    exe = find_sanitizer()
    assert exe is not None
    cmd = [exe, "--tool", tool, "--print-limit", "50", "--log-file", str(log_file), "--target-processes", "all",
           "--kernel-name-exclude", f"regex={GRADER_KERNELS}"]
    if tool == "memcheck":
        cmd += ["--leak-check", "no"]
    return cmd


def parse(text: str, tool: str, sources: dict[str, str]) -> dict[str, list[Finding]]:
    """Findings per task; ``sources`` maps a learner file name (vector_add.cu) to its task."""
    records: list[list[str]] = []
    for line in text.splitlines():
        if HEADER.match(line):
            records.append([line[10:].strip()])
        elif records and line.startswith("=========     ") and "Host Frame" not in line \
                and "host backtrace" not in line:
            records[-1].append(line[10:].strip())
        elif records and line.strip() in ("=========", ""):
            records.append([]) if records[-1] else None
    out: dict[str, list[Finding]] = {}
    seen: set[tuple[str, str]] = set()
    for record in filter(None, records):
        body = " ".join(record)
        for name, task in sources.items():
            m = re.search(r"([\w./-]*" + re.escape(name) + r"):(\d+)", body)
            if m:
                message = re.sub(r"\s+", " ", re.sub(r"\([^()]*\)\+0x[0-9a-f]+", "", body))
                message = message.replace(m.group(1), name)
                # The same hazard, met again in the next correctness case, is one problem.
                key = (task, re.sub(r"\[\d+ hazards?\]|0x[0-9a-f]+|\(\d+,\d+,\d+\)", "", message))
                if key not in seen:
                    seen.add(key)
                    out.setdefault(task, []).append(Finding(tool, message[:500], f"{name}:{m.group(2)}"))
                break
    return out


def keep(log: Path, tool: str) -> None:
    """Copies the sanitizer's raw log into the folder S2S_KEEP_SANITIZER_LOG names, if set
    (for recording test fixtures and for reading what the summary shortened)."""
    folder = os.environ.get("S2S_KEEP_SANITIZER_LOG")
    if folder and log.exists():
        Path(folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(log, Path(folder) / f"{tool}.log")


def log_path() -> Path:
    fd, path = tempfile.mkstemp(prefix="s2s-sanitizer-", suffix=".log")
    os.close(fd)
    return Path(path)
