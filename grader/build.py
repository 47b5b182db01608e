"""Compiling CUDA sources into shared libraries, with the ptxas resource report.

nvcc is found through CUDA_HOME or PATH; the target is the architecture of the
GPU present (or ``S2S_ARCH``, or sm_90 when there is none), or what the task's
``build.arch`` maps it to (sm_90 -> sm_90a for wgmma). Builds are cached by
content and flags, so re-grading an unchanged file costs nothing.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_ARCH = "sm_90"
COMPILE_TIMEOUT_S = 120.0          # S2S_COMPILE_TIMEOUT overrides, read at each compile
CACHE_VERSION = "2"


class ToolchainError(Exception):
    """nvcc is missing or unusable; the message says how to fix it."""


@dataclass(frozen=True)
class Toolchain:
    nvcc: Path
    version: str   # e.g. "13.0"

    @staticmethod
    def find() -> "Toolchain":
        candidates = []
        for var in ("CUDA_HOME", "CUDA_PATH"):
            if os.environ.get(var):
                candidates.append(Path(os.environ[var]) / "bin" / "nvcc")
        on_path = shutil.which("nvcc")
        if on_path:
            candidates.append(Path(on_path))
        candidates.append(Path("/usr/local/cuda/bin/nvcc"))
        for nvcc in candidates:
            if nvcc.is_file() and os.access(nvcc, os.X_OK):
                try:
                    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=30).stdout
                except (OSError, subprocess.TimeoutExpired) as exc:
                    raise ToolchainError(f"{nvcc} does not run: {exc}") from None
                m = re.search(r"release (\d+\.\d+)", out)
                return Toolchain(nvcc, m.group(1) if m else "unknown")
        raise ToolchainError(
            "nvcc, the CUDA compiler, was not found. Install the CUDA toolkit and put its bin folder on "
            "PATH, or set CUDA_HOME to the toolkit's folder (the one holding bin/nvcc).")


def find_cuda_tool(name: str) -> str | None:
    """A CUDA toolkit program (ncu, compute-sanitizer, ...) on PATH or under CUDA_HOME."""
    found = shutil.which(name)
    if found:
        return found
    for base in filter(None, (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda")):
        candidate = Path(base) / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def gencode(arch: str) -> list[str]:
    """nvcc target flags for exactly this architecture: "sm_90" builds portable sm_90 code,
    "sm_90a" the arch-specific variant that Hopper's wgmma and setmaxnreg need (a task asks for
    it with ``build.arch`` in exercise.toml)."""
    m = re.fullmatch(r"sm_(\d+)([a-z]?)", arch)
    if not m:
        raise ToolchainError(f"unknown GPU architecture {arch!r}; expected something like sm_90 or sm_90a")
    target = f"{m.group(1)}{m.group(2)}"
    return [f"-gencode=arch=compute_{target},code=sm_{target}"]


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reports for one kernel (__global__ function)."""

    name: str              # demangled
    registers: int
    shared_bytes: int      # static shared memory
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int

    @property
    def spills(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes


@dataclass
class BuildResult:
    source: str                     # the file, as the learner knows it
    ok: bool
    library: str | None = None      # path of the .so
    kernels: list[KernelResources] = field(default_factory=list)
    log: str = ""                   # compiler output (errors, warnings), paths shortened
    seconds: float = 0.0
    cached: bool = False
    arch: str = ""
    error: str = ""                 # one-line summary when not ok
    headers: list[str] = field(default_factory=list)   # every file the compiler read (nvcc -MD)
    sha256: str = ""                # of the library, checked whenever the cache hands it out again

    def to_dict(self) -> dict:
        d = asdict(self)
        d["kernels"] = [asdict(k) for k in self.kernels]
        return d

    @staticmethod
    def from_dict(d: dict) -> "BuildResult":
        d = dict(d)
        d["kernels"] = [KernelResources(**k) for k in d.get("kernels", [])]
        return BuildResult(**d)


def cache_dir() -> Path:
    if os.environ.get("S2S_CACHE"):
        return Path(os.environ["S2S_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "silicon-to-synapse"


PROBE_HEADER = Path(__file__).with_name("probe.cuh")


def _cache_key(source: Path, flags: list[str], toolchain: Toolchain) -> str:
    h = hashlib.sha256()
    h.update(PROBE_HEADER.read_bytes())
    h.update(f"{CACHE_VERSION}\n{toolchain.nvcc}\n{toolchain.version}\n{' '.join(flags)}\n".encode())
    h.update(source.read_bytes())
    # Headers next to the source may be included; a change in any of them rebuilds.
    for header in sorted(source.parent.glob("*.cuh")) + sorted(source.parent.glob("*.h")):
        h.update(header.name.encode() + b"\0" + header.read_bytes())
    return h.hexdigest()[:32]


def compile_cuda(source: Path, arch: str, toolchain: Toolchain, *, display_root: Path | None = None,
                 timeout_s: float | None = None, extra_flags: tuple[str, ...] = ()) -> BuildResult:
    """Compile ``source`` into a shared library; cached by content and flags."""
    if timeout_s is None:
        timeout_s = float(os.environ.get("S2S_COMPILE_TIMEOUT") or COMPILE_TIMEOUT_S)
    source = Path(source).resolve()
    shown = _shown_name(source, display_root)
    if not source.is_file():
        return BuildResult(shown, False, arch=arch, error=f"{shown} does not exist")
    flags = ["-O3", "-std=c++17", "-lineinfo", "-Xptxas", "-v", "-shared", "-Xcompiler", "-fPIC",
             "-include", str(PROBE_HEADER), *gencode(arch), *extra_flags]
    key = _cache_key(source, flags, toolchain)
    out_dir = cache_dir() / "build" / key
    meta = out_dir / "build.json"
    if meta.is_file():
        try:
            result = BuildResult.from_dict(json.loads(meta.read_text()))
            # The entry's name is the hash of the source and flags, recomputed above; the library
            # must still be the file that was built (a changed one is rebuilt, never trusted).
            if (result.library and Path(result.library).is_file() and result.sha256
                    and _sha256(Path(result.library)) == result.sha256):
                result.cached, result.source = True, shown
                return result
        except (ValueError, TypeError, KeyError, OSError):
            pass  # a damaged entry is rebuilt below
        shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=out_dir.parent))
    try:
        return _build(source, shown, arch, toolchain, flags, timeout_s, tmp, out_dir)
    finally:      # whatever happened, no half-written entry stays in the cache
        shutil.rmtree(tmp, ignore_errors=True)


def _build(source: Path, shown: str, arch: str, toolchain: Toolchain, flags: list[str], timeout_s: float,
           tmp: Path, out_dir: Path) -> BuildResult:
    """nvcc into the fresh folder tmp; on success tmp becomes the cache entry out_dir."""
    library = tmp / "lib.so"
    deps = tmp / "deps.d"
    # nvcc gets the source by the name the report shows, from the folder that name is relative to:
    # its messages then name the file as the report does, and the folders above (whose names need
    # not be UTF-8) never reach the compiler.
    base = source.parents[len(Path(shown).parts) - 1]
    cmd = [str(toolchain.nvcc), *flags, "-MD", "-MF", str(deps), "-o", str(library), shown]
    start = time.perf_counter()
    try:
        # The compiler quotes the source in its messages, whatever bytes it holds.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, encoding="utf-8",
                                errors="replace", cwd=base, start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return BuildResult(shown, False, arch=arch, seconds=time.perf_counter() - start,
                               error=f"compiling {shown} took longer than {timeout_s:g} s and was stopped "
                                     "(runaway template recursion or a huge unrolled loop?)")
    except OSError as exc:
        raise ToolchainError(f"could not run nvcc: {exc}") from None
    seconds = time.perf_counter() - start
    log = _shorten_paths(output, source, shown)
    if proc.returncode != 0 or not library.is_file():
        first = next((line for line in log.splitlines() if "error" in line.lower()), "nvcc failed")
        return BuildResult(shown, False, log=_diagnostics(log), arch=arch, seconds=seconds,
                           error=first.strip())
    kernels = parse_ptxas(output)
    result = BuildResult(shown, True, str(out_dir / "lib.so"), kernels, _diagnostics(log), seconds, False, arch,
                         headers=parse_deps(deps), sha256=_sha256(library))
    (tmp / "build.json").write_text(json.dumps(result.to_dict(), indent=1))
    try:
        tmp.rename(out_dir)
    except OSError:  # another grading built the same thing at the same time: theirs is the entry
        pass
    return result


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def parse_deps(path: Path) -> list[str]:
    """The files a make-style dependency list (nvcc -MD) names, the target and the source excepted."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    words = text.replace("\\\n", " ").split()
    if words and words[0].endswith(":"):
        words = words[1:]
    elif len(words) > 1 and words[1] == ":":
        words = words[2:]
    return [os.path.normpath(w) for w in words[1:]]


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _shown_name(source: Path, root: Path | None) -> str:
    if root is not None:
        try:
            return str(source.relative_to(Path(root).resolve()))
        except ValueError:
            pass
    return source.name


def _shorten_paths(text: str, source: Path, shown: str) -> str:
    return text.replace(str(source), shown)


def _diagnostics(log: str) -> str:
    """Compiler output without the ptxas resource chatter: errors and warnings only."""
    keep = [line for line in log.splitlines() if not line.startswith("ptxas info") and
            not re.match(r"^\s+\d+ bytes stack frame", line)]
    return "\n".join(keep).strip()


_ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"ptxas info\s*: Used (\d+) registers(.*)")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas(output: str) -> list[KernelResources]:
    """Registers, shared memory, stack and spills per kernel from `ptxas -v`."""
    kernels: list[KernelResources] = []
    current: dict | None = None
    for line in output.splitlines():
        if m := _ENTRY.search(line):
            current = {"name": m.group(1), "stack": 0, "spill_st": 0, "spill_ld": 0}
        elif current is not None and (m := _FRAME.search(line)):
            current["stack"], current["spill_st"], current["spill_ld"] = map(int, m.groups())
        elif current is not None and (m := _USED.search(line)):
            smem = _SMEM.search(m.group(2))
            kernels.append(KernelResources(current["name"], int(m.group(1)), int(smem.group(1)) if smem else 0,
                                           current["stack"], current["spill_st"], current["spill_ld"]))
            current = None
    names = demangle([k.name for k in kernels])
    return [KernelResources(n, k.registers, k.shared_bytes, k.stack_bytes, k.spill_store_bytes, k.spill_load_bytes)
            for n, k in zip(names, kernels)]


def demangle(names: list[str]) -> list[str]:
    """C++ names as the learner wrote them (``c++filt``), shortened to the function name."""
    tool = shutil.which("cu++filt") or shutil.which("c++filt")
    if not tool or not names:
        return names
    try:
        out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return names
    lines = out.splitlines()
    if len(lines) != len(names):
        return names
    return [_short(line) for line in lines]


def _short(name: str) -> str:
    """'void (anonymous namespace)::kernel<128, 32>(float const*, ...)' -> 'kernel<128, 32>'."""
    name = name.replace("(anonymous namespace)::", "")
    name = name.split("(", 1)[0] if "(" in name else name
    return name[5:] if name.startswith("void ") else name


@functools.lru_cache(maxsize=64)
def _dynamic_symbols(library: str) -> tuple[tuple[str, str], ...] | None:
    """(type letter, name without its version) of a shared library's dynamic symbols (``nm -D``),
    or None without nm; one nm call per library (built libraries are content-addressed, so a path
    always holds the same file). Read from the file, never by loading it: loading would run the
    learner's code in the grader's own process."""
    nm = shutil.which("nm")
    if not nm:
        return None
    try:
        out = subprocess.run([nm, "-D", library], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    rows = (line.split() for line in out.splitlines())
    return tuple((parts[-2], parts[-1].split("@", 1)[0]) for parts in rows if len(parts) >= 2)


_UNDEFINED = frozenset("Uwv")     # nm's letters for symbols a library uses but does not define


def exported_symbols(library: Path) -> set[str] | None:
    """Defined dynamic symbols of a shared library, or None without nm."""
    symbols = _dynamic_symbols(str(library))
    return None if symbols is None else {name for kind, name in symbols if kind not in _UNDEFINED}


def _needed(library: Path) -> list[str] | None:
    """The shared libraries a library was linked against (its NEEDED entries)."""
    readelf = shutil.which("readelf")
    if not readelf:
        return None
    try:
        out = subprocess.run([readelf, "-d", str(library)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


@functools.lru_cache(maxsize=1)
def _system_libraries() -> dict[str, str]:
    """soname -> path, from the dynamic linker's cache; this machine's own ABI first."""
    # ldconfig lives in sbin, which an ordinary user's PATH may not hold.
    ldconfig = shutil.which("ldconfig") or next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig")
                                                  if os.access(p, os.X_OK)), None)
    if ldconfig is None:
        return {}
    try:
        out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    abi = {"x86_64": "x86-64", "aarch64": "AArch64"}.get(platform.machine(), platform.machine())
    found: dict[str, str] = {}
    entries = re.findall(r"^\s*(\S+) \(([^)]*)\) => (\S+)$", out, re.M)
    for soname, flags, path in sorted(entries, key=lambda e: abi not in e[1]):   # stable: own ABI first
        found.setdefault(soname, path)
    return found


# The CUDA driver API (cuInit, cuMemAlloc_v2, ...): the CUDA runtime loads the driver itself, so a
# library that calls it directly needs no NEEDED entry for it.
_DRIVER_API = re.compile(r"cu[A-Z]\w*")


def foreign_symbols(library: Path) -> list[str] | None:
    """Functions a library calls that neither its own code, the CUDA runtime linked into it, the
    driver API nor the C/C++ runtimes it was linked against provide: calls into some other library
    (cuBLAS, say) that would only resolve against what the grader's process happens to have loaded.
    None when the tools to tell are missing."""
    symbols = _dynamic_symbols(str(library))
    needed = _needed(library)
    if symbols is None or needed is None:
        return None
    provided: set[str] = set()
    for soname in needed:
        path = _system_libraries().get(soname)
        names = exported_symbols(Path(path)) if path else None
        if names is None:
            return None           # a runtime we cannot read: no verdict rather than a wrong one
        provided |= names
    return sorted(name for kind, name in symbols
                  if kind == "U" and name not in provided and not _DRIVER_API.fullmatch(name))
