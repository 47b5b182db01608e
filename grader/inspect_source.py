"""Static checks of a learner's source before it is compiled.

They catch, with the line that caused them, what would otherwise show up as a
baffling result later: an entry point whose C signature differs from the one the
grader calls (extern "C" symbols carry no types, so a mismatch would silently
pass garbage), and a library that would do the work the exercise asks for.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from grader.spec import Task

# A library that would do the work: the headers that bring it in (the path after #include), and
# the calls into it (the function's name).
LIBRARIES = [
    (re.compile(r"#\s*include\s*([<\"](?:cublas\w*|cublasLt)\.h[>\"])"), "cuBLAS"),
    (re.compile(r"#\s*include\s*([<\"]cudnn\w*\.h[>\"])"), "cuDNN"),
    (re.compile(r"#\s*include\s*([<\"]cub/[^>\"\n]*[>\"]?)"), "CUB"),
    (re.compile(r"#\s*include\s*([<\"]thrust/[^>\"\n]*[>\"]?)"), "Thrust"),
    (re.compile(r"#\s*include\s*([<\"](?:cutlass|cute)/[^>\"\n]*[>\"]?)"), "CUTLASS"),
    (re.compile(r"#\s*include\s*([<\"]cufft\w*\.h[>\"])"), "cuFFT"),
]
LIBRARY_CALLS = [
    (re.compile(r"\b(cublas\w+)\s*\("), "cuBLAS"),
    (re.compile(r"\b(cudnn\w+)\s*\("), "cuDNN"),
]
SHOWN_USES = 6        # a library's first uses named in its finding; the rest are counted
PROCESS = [
    (re.compile(r"\bcudaDeviceReset\s*\("), "cudaDeviceReset() destroys the CUDA context the grader is using; "
                                            "remove it (the grader manages the device)"),
    (re.compile(r"\b(cudaEventRecord|cudaEventRecordWithFlags|cudaEventElapsedTime|cudaEventSynchronize|"
                r"cudaProfilerStart|cudaProfilerStop|cuEventRecord|cuEventRecordWithFlags|cuEventElapsedTime)\b"),
     "the grader does the timing; your code may not call or redefine CUDA's event and profiler functions"),
    (re.compile(r"\b(dlopen|dlsym|dladdr|dl_iterate_phdr|mprotect|ptrace|process_vm_writev|syscall)\s*\(|"
                r"/proc/self|#\s*include\s*[<\"]Python\.h"),
     "reaches into the process it runs in (dynamic symbols, memory protection, the Python runtime); "
     "a kernel task needs none of that"),
    (re.compile(r"\bPy[A-Z][A-Za-z]*_[A-Za-z]\w*\s*\("),
     "calls the Python C API; a kernel task needs none of it"),
    (re.compile(r"\b(fork|vfork|system|popen|execl|execlp|execle|execv|execvp|execve|posix_spawn)\s*\("),
     "starts another process; a kernel task needs none"),
    (re.compile(r"\b(cudaStreamCreateWithFlags|cudaStreamCreateWithPriority|cudaStreamNonBlocking|"
                r"cuStreamCreate\w*)\b"),
     "creates a non-blocking stream: work on it is not ordered with the default stream, the only stream the "
     "grader's timer sees. Launch every kernel on the default stream (<<<grid, block>>>)"),
    (re.compile(r"\b(std::thread|std::async|pthread_create)\b"),
     "starts a host thread: work it does after your function returns is invisible to the timer. Launch "
     "your kernels from the calling thread, on the default stream"),
]


@dataclass(frozen=True)
class Finding:
    line: int              # 0: the file as a whole
    message: str
    unusable: bool = False  # the file cannot be compiled at all (not text, far too large): nothing to build

    def to_dict(self) -> dict:
        return {"line": self.line, "message": self.message}

    def where(self, source: str) -> str:
        return f"{source}:{self.line}: {self.message}" if self.line else self.message


def strip_comments(text: str, keep_strings: bool = False) -> str:
    """Blank out comments (and string literals unless ``keep_strings``), keeping line numbers
    and #include paths."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(c if c == "\n" else " " for c in text[i:j]))
            i = j
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] not in '"\n':
                j += 2 if text[j] == "\\" else 1
            closed = j < n and text[j] == '"'
            end = j + 1 if closed else min(j, n)
            if keep_strings or _in_include(text, i):   # #include "x.h" and extern "C" keep their text
                out.append(text[i:end])
            else:                         # a string literal keeps only its quotes
                out.append('"' + " " * max(0, end - i - 2) + ('"' if closed else " "))
            i = end
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _in_include(text: str, i: int) -> bool:
    start = text.rfind("\n", 0, i) + 1
    line = text[start:i]
    return bool(re.match(r"\s*#\s*include\s*$", line)) or line.rstrip().endswith('extern')


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


# Spellings of one C type: the canonical one is the spelling exercise.toml's dtypes use.
_SYNONYMS = {
    "long long": "int64_t", "long long int": "int64_t", "signed long long": "int64_t", "long": "int64_t",
    "long int": "int64_t", "std::int64_t": "int64_t", "int64_t": "int64_t",
    "int32_t": "int", "std::int32_t": "int", "signed int": "int", "signed": "int",
    "signed char": "int8_t", "std::int8_t": "int8_t", "unsigned char": "uint8_t", "std::uint8_t": "uint8_t",
    "nv_bfloat16": "__nv_bfloat16", "half": "__half",
}
_TYPE_WORDS = {"const", "volatile", "unsigned", "signed", "long", "short", "int", "char", "float", "double", "void",
               "bool", "size_t", "int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t", "int64_t",
               "uint64_t", "half", "__half", "nv_bfloat16", "__nv_bfloat16", "__nv_fp8_e4m3", "__nv_fp8_e5m2"}


def normalize_param(param: str) -> str:
    """A parameter's type in one canonical spelling, without its name and without top-level const:
    'float const * __restrict__ x' -> 'const float*', 'long long n' -> 'int64_t',
    'float* const* p' -> 'float* const*'."""
    p = re.sub(r"\b(__restrict__|__restrict|restrict)\b", " ", param)
    tokens = re.findall(r"[A-Za-z_][\w:]*|\*|&", p)
    words = [t for t in tokens if t not in ("*", "&")]
    if len(words) >= 2 and words[-1] not in _TYPE_WORDS and tokens[-1] == words[-1]:
        tokens = tokens[:-1]   # the parameter's name
    levels: list[list[str]] = [[]]          # the base type's words, then the qualifiers after each '*'
    for t in tokens:
        if t in ("*", "&"):
            levels.append([])
        else:
            levels[-1].append(t)
    base_words = [t for t in levels[0] if t not in ("const", "volatile")]
    base = " ".join(base_words)
    base = _SYNONYMS.get(base, base)
    const = "const " if "const" in levels[0] and len(levels) > 1 else ""
    pointers = ["*" + (" const" if "const" in quals else "") for quals in levels[1:]]
    if pointers:
        pointers[-1] = "*"                   # a const pointer parameter is the same ABI
    return const + base + "".join(pointers)


MAX_SOURCE_BYTES = 1 << 20


def check(source: Path, task: Task) -> list[Finding]:
    try:
        size = source.stat().st_size
        if size > MAX_SOURCE_BYTES:
            return [Finding(0, f"{source.name} is {size / (1 << 20):.1f} MB; a kernel source is a few kilobytes "
                               f"(at most {MAX_SOURCE_BYTES >> 20} MB is read): is something else saved under "
                               "its name?", unusable=True)]
        data = source.read_bytes()
    except FileNotFoundError:
        return [Finding(0, f"{source.name} does not exist", unusable=True)]
    except OSError as exc:
        return [Finding(0, f"{source.name} cannot be read: {exc.strerror or exc}", unusable=True)]
    try:
        raw = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return [Finding(line, f"{source.name} is not text: byte {exc.start} (0x{data[exc.start]:02x}) is not "
                              "UTF-8. Save the file as UTF-8 text; a binary file or another encoding cannot "
                              "be compiled", unusable=True)]
    if "\0" in raw:
        line = raw.count("\n", 0, raw.index("\0")) + 1
        return [Finding(line, f"{source.name} is not text: it holds a NUL byte. Save the file as UTF-8 text",
                        unusable=True)]
    text = strip_comments(raw)
    findings = _libraries(text)
    with_strings = strip_comments(raw, keep_strings=True)   # "/proc/self" lives in a string literal
    for pattern, message in PROCESS:
        if m := pattern.search(with_strings):
            findings.append(Finding(_line_of(with_strings, m.start()), message))
    findings.extend(_signature(text, task))
    return findings


def _libraries(text: str) -> list[Finding]:
    """One finding per library used, at its first use, naming each header and function it uses."""
    uses: dict[str, list[tuple[int, str]]] = {}
    for pattern, lib in LIBRARIES:
        for m in pattern.finditer(text):
            uses.setdefault(lib, []).append((m.start(), f"#include {m.group(1)}"))
    for pattern, lib in LIBRARY_CALLS:
        for m in pattern.finditer(text):
            uses.setdefault(lib, []).append((m.start(), f"{m.group(1)}()"))
    findings = []
    for lib, found in uses.items():
        found.sort()
        names = list(dict.fromkeys(name for _, name in found))
        shown = ", ".join(names[:SHOWN_USES]) + (f" and {len(names) - SHOWN_USES} more" if len(names) > SHOWN_USES
                                                 else "")
        findings.append(Finding(_line_of(text, found[0][0]),
                                f"uses {lib} ({shown}); this task is about writing the kernel yourself, so library "
                                "implementations are not accepted"))
    return sorted(findings, key=lambda f: f.line)


def _signature(text: str, task: Task) -> list[Finding]:
    definition = re.compile(r"\bvoid\s+" + re.escape(task.symbol) + r"\s*\(([^)]*)\)\s*\{")
    m = definition.search(text)
    if m is None:
        return []   # a missing entry point is reported after the build, from the library itself
    got = [normalize_param(p) for p in m.group(1).split(",") if p.strip() and p.strip() != "void"]
    want = [normalize_param(a.c_type) for a in task.args]
    if got != want:
        return [Finding(_line_of(text, m.start()),
                        f"{task.symbol} takes ({', '.join(got)}) but the grader calls it with "
                        f"({', '.join(want)}): keep the signature of the stub, {task.prototype()}")]
    prefix = text[max(0, m.start() - 200):m.start()]
    if not re.search(r'extern\s+"C"\s*(__host__\s*)?$', prefix.rstrip()[-40:] + " ", re.S) and \
            not _inside_extern_c_block(text, m.start()):
        return [Finding(_line_of(text, m.start()),
                        f'{task.symbol} is not declared extern "C": without it the C++ compiler mangles the '
                        "name and the grader cannot find the function. Keep the stub's first line.")]
    return []


def _inside_extern_c_block(text: str, pos: int) -> bool:
    for m in re.finditer(r'extern\s+"C"\s*\{', text[:pos]):
        depth = 0
        for ch in text[m.end():pos]:
            depth += ch == "{"
            depth -= ch == "}"
            if depth < 0:
                break
        else:
            return True
    return False


# What the compiler saw, whatever macros spelled it: the headers it read and the kernels it built.
LIBRARY_HEADERS = [(re.compile(r"(^|/)(cub)/"), "CUB"), (re.compile(r"(^|/)(thrust)/"), "Thrust"),
                   (re.compile(r"(^|/)(cute|cutlass)/"), "CUTLASS"),
                   (re.compile(r"(^|/)(cublas\w*|cublasLt\w*|cudnn\w*|cufft\w*|cusparse\w*)\.h$"), "a vendor library")]
LIBRARY_KERNELS = [(re.compile(r"^(cub|thrust|cute|cutlass)(::|_)"), "")]
_NAMES = {"cub": "CUB", "thrust": "Thrust", "cute": "CUTLASS", "cutlass": "CUTLASS"}


def check_build(headers: list[str], kernels: list[str]) -> list[Finding]:
    """Library code in what nvcc compiled: a header of CUB, Thrust, CUTLASS or a vendor library
    among those it read (an #include that a macro spelled counts too), or a kernel of theirs
    among those ptxas built."""
    found: list[Finding] = []
    for header in headers:
        for pattern, library in LIBRARY_HEADERS:
            if pattern.search(header):
                found.append(Finding(0, f"the compiler read {library}'s header {_short(header)}: this task is about "
                                        "writing the kernel yourself, so library implementations are not accepted"))
                return found
    for kernel in kernels:
        m = LIBRARY_KERNELS[0][0].match(kernel)
        if m:
            found.append(Finding(0, f"ptxas built {_NAMES[m.group(1)]}'s kernel {kernel[:80]}: this task is about "
                                    "writing the kernel yourself, so library implementations are not accepted"))
            return found
    return found


def _short(header: str) -> str:
    """.../include/cub/block/block_reduce.cuh -> cub/block/block_reduce.cuh"""
    m = re.search(r"(?:^|/)((?:cub|thrust|cute|cutlass)/.*|[^/]+\.h)$", header)
    return m.group(1) if m else header
