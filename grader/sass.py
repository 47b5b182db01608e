"""What the compiler made of a kernel: the SASS of its hot loop, with the instructions that matter marked.

A kernel's speed is decided by the few instructions its busiest loop repeats. This module reads
``cuobjdump --dump-sass`` of a built library, finds each kernel's loops (a branch back to an earlier
address closes one), picks the hot loop (the loop whose own body, inner loops left out, holds the
most instructions that matter: loads, stores, FMAs, tensor-core and special-function instructions,
barriers), counts those per iteration and shows the loop with each of them marked. It lets a learner
see that ``float4`` loads became ``LDG.E.128`` and tensor-core code ``HMMA`` or ``HGMMA``.

Nothing here runs on a GPU: SASS comes from nvcc and cuobjdump (the CUDA toolkit's, or PyPI's
``nvidia-cuda-cuobjdump`` with ``nvidia-cuda-nvdisasm``).
"""
from __future__ import annotations

import glob
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from grader.build import demangle, find_cuda_tool

# Kernels the grader itself compiles into every library (the timing probe) and library kernels.
GRADER_KERNEL = re.compile(r"s2s_probe|^_ZN(2at|3c10|3cub|6thrust)")

INSTALL_HINT = ("cuobjdump was not found: it comes with the CUDA toolkit (its bin folder), or "
                "`pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`.")


@dataclass(frozen=True)
class Kind:
    """A class of instructions worth marking, and what to call it."""

    key: str
    pattern: re.Pattern
    meaning: str


# Order matters: the first kind whose pattern matches the opcode names the instruction.
KINDS: tuple[Kind, ...] = (
    Kind("tensor core", re.compile(r"^(HGMMA|IGMMA|QGMMA|HMMA|IMMA|QMMA|BMMA|DMMA)\b"), "matrix multiply-accumulate on the tensor cores"),
    Kind("TMA", re.compile(r"^(UTMALDG|UTMASTG|UTMAPF|UBLKCP)\b"), "tensor memory accelerator copy"),
    Kind("async copy", re.compile(r"^LDGSTS\b"), "global to shared memory without registers (cp.async)"),
    Kind("global load", re.compile(r"^LDG\b"), "load from global memory"),
    Kind("global store", re.compile(r"^STG\b"), "store to global memory"),
    Kind("shared load", re.compile(r"^(LDS|LDSM)\b"), "load from shared memory (LDSM: ldmatrix)"),
    Kind("shared store", re.compile(r"^STS\b"), "store to shared memory"),
    Kind("local memory", re.compile(r"^(LDL|STL)\b"), "local memory: spilled registers or an array indexed at run time"),
    Kind("atomic", re.compile(r"^(ATOM|ATOMS|ATOMG|RED|REDG)\b"), "atomic read-modify-write"),
    Kind("FFMA", re.compile(r"^(FFMA|DFMA|HFMA2(?!\.MMA))\b"), "fused multiply-add (2 FLOPs)"),
    Kind("FADD/FMUL", re.compile(r"^(FADD|FMUL|HADD2|HMUL2|DADD|DMUL)\b"), "floating-point add or multiply"),
    Kind("MUFU", re.compile(r"^MUFU\b"), "special function unit: exp2, rsqrt, rcp, sin..."),
    Kind("convert", re.compile(r"^(F2F|F2FP|F2I|I2F|I2FP|F2IP|I2IP)\b"), "number-format conversion (int8, fp8, bf16...)"),
    Kind("shuffle", re.compile(r"^SHFL\b"), "exchange of registers between the lanes of a warp"),
    Kind("barrier", re.compile(r"^(BAR|SYNCS|DEPBAR|MEMBAR|WARPGROUP|ARRIVES)\b"),
         "barrier or wait (__syncthreads, mbarrier, cp.async wait, wgmma fence)"),
)


def kind_of(opcode: str) -> Kind | None:
    for kind in KINDS:
        if kind.pattern.search(opcode):
            return kind
    return None


def access_bytes(opcode: str) -> int | None:
    """Bytes per thread moved by a load or store: LDG.E.128 moves 16, LDS.U8 1, LDG.E 4."""
    parts = opcode.split(".")
    if not re.match(r"^(LDG|STG|LDS|STS|LDL|STL|LDGSTS)$", parts[0]):
        return None
    for part in parts[1:]:
        if part in ("128", "64", "32"):
            return int(part) // 8
        if part in ("U8", "S8"):
            return 1
        if part in ("U16", "S16"):
            return 2
        if part.startswith("BYPASS"):     # LDGSTS.E.BYPASS.128: the width follows
            continue
    return 4


@dataclass(frozen=True)
class Instruction:
    address: int
    text: str              # "@P0 LDG.E.128 R4, desc[UR4][R2.64]"

    @property
    def opcode(self) -> str:
        words = self.text.split()
        return next((w for w in words if not w.startswith("@")), "")

    @property
    def kind(self) -> Kind | None:
        return kind_of(self.opcode)

    @property
    def label(self) -> str:
        """The opcode as the counts show it: widths kept, cache hints and the like dropped."""
        op = self.opcode
        base = op.split(".")[0]
        if base in ("LDG", "STG", "LDS", "STS", "LDL", "STL", "LDGSTS"):
            width = access_bytes(op)
            e = ".E" if ".E" in op else ""
            return f"{base}{e}.{width * 8}" if width and width != 4 else f"{base}{e}"
        if base in ("HMMA", "IMMA", "HGMMA", "IGMMA", "QGMMA", "QMMA"):
            return ".".join(op.split(".")[:3])
        if base == "MUFU":
            return ".".join(op.split(".")[:2])
        if base in ("F2F", "F2FP", "F2I", "I2F"):
            return ".".join(p for p in op.split(".")[:4] if p not in ("FTZ", "SATFINITE", "RELU"))
        return base

    def target(self) -> int | None:
        """The address a branch goes to."""
        m = re.search(r"\b(BRA|JMP|BRX)(\.\w+)*\s+(?:`\(\.L_x_\d+\)\s*)?(0x[0-9a-f]+)", self.text)
        return int(m.group(3), 16) if m else None


@dataclass
class Loop:
    start: int
    end: int                                   # address of the branch back
    instructions: list[Instruction]            # its own body: inner loops left out
    inner: int = 0                             # how many loops it holds

    def counts(self) -> dict[str, int]:
        return count_kinds(self.instructions)

    def weight(self) -> int:
        return sum(1 for i in self.instructions if i.kind is not None)


@dataclass
class KernelSass:
    name: str                                  # as cuobjdump prints it (mangled)
    instructions: list[Instruction]
    pretty: str = ""                           # demangled and short
    loops: list[Loop] = field(default_factory=list)

    @property
    def hot_loop(self) -> Loop | None:
        """A loop that drives the tensor cores beats any other (a GEMM's epilogue may hold more
        stores than its main loop holds HGMMA); among the rest, the most marked instructions."""
        def rank(lp: Loop) -> tuple[bool, int, int]:
            tensor = any(i.kind is not None and i.kind.key == "tensor core" for i in lp.instructions)
            return tensor, lp.weight(), len(lp.instructions)
        return max(self.loops, key=rank, default=None)

    def counts(self) -> dict[str, int]:
        return count_kinds(self.instructions)


def count_kinds(instructions: list[Instruction]) -> dict[str, int]:
    """Marked instructions by label (LDG.128, FFMA, HMMA.16816.F32...), in order of first sight."""
    counts: dict[str, int] = {}
    for ins in instructions:
        if ins.kind is not None:
            counts[ins.label] = counts.get(ins.label, 0) + 1
    return counts


_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)", re.M)
_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*?)\s*;")


def parse(text: str) -> list[KernelSass]:
    """Every function of ``cuobjdump --dump-sass`` output (or of its normalised form), in order."""
    heads = list(_FUNCTION.finditer(text))
    kernels = []
    seen = set()
    for n, head in enumerate(heads):
        body = text[head.end():heads[n + 1].start() if n + 1 < len(heads) else len(text)]
        name = head.group(1)
        if name in seen:
            continue
        seen.add(name)
        instructions = [Instruction(int(a, 16), t.strip()) for a, t in _INSTRUCTION.findall(body)]
        kernels.append(KernelSass(name, instructions, loops=find_loops(instructions)))
    pretty = demangle([k.name for k in kernels])
    for k, p in zip(kernels, pretty):
        k.pretty = p
    return kernels


def find_loops(instructions: list[Instruction]) -> list[Loop]:
    """A loop for each branch back to an earlier address (the target up to the branch); each loop's
    own body leaves out the instructions of the loops nested in it. Branches of a loop that share
    one target (a ``continue``) make one loop."""
    spans: dict[int, int] = {}
    for ins in instructions:
        target = ins.target()
        if target is not None and target < ins.address:
            spans[target] = max(spans.get(target, -1), ins.address)
    ranges = sorted(spans.items(), key=lambda r: (r[0], -r[1]))
    loops = []
    for start, end in ranges:
        nested = [(s, e) for s, e in ranges if (s, e) != (start, end) and start <= s and e <= end]
        body = [i for i in instructions if start <= i.address <= end
                and not any(s <= i.address <= e for s, e in nested)]
        loops.append(Loop(start, end, body, inner=len(nested)))
    return loops


def normalise(text: str) -> str:
    """cuobjdump's output without the encodings and headers: function names and instructions, the
    form the recorded fixtures keep (``parse`` reads both)."""
    out = []
    for line in text.splitlines():
        f = _FUNCTION.match(line)
        if f:
            out.append(f"Function : {f.group(1)}")
            continue
        m = _INSTRUCTION.search(line)
        if m:
            out.append(f"/*{m.group(1)}*/ {m.group(2).strip()} ;")
    return "\n".join(out) + "\n"


def cuobjdump() -> str | None:
    """The toolkit's cuobjdump, or the one PyPI's nvidia-cuda-cuobjdump installs."""
    found = find_cuda_tool("cuobjdump")
    if found:
        return found
    try:
        import nvidia  # type: ignore[import-not-found]
    except ImportError:
        return None
    for base in getattr(nvidia, "__path__", []):
        hits = glob.glob(os.path.join(base, "**", "bin", "cuobjdump"), recursive=True)
        if hits:
            return hits[0]
    return None


class SassUnavailable(Exception):
    """cuobjdump is missing or failed; the message says how to fix it."""


def dump(library: Path | str) -> str:
    """``cuobjdump --dump-sass`` of a built library (or cubin)."""
    tool = cuobjdump()
    if tool is None:
        raise SassUnavailable(INSTALL_HINT)
    # cuobjdump disassembles through nvdisasm, which the PyPI packages put in the same folder.
    env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(tool), os.environ.get("PATH", "")]))
    try:
        proc = subprocess.run([tool, "--dump-sass", str(library)], capture_output=True, text=True, env=env,
                              timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SassUnavailable(f"cuobjdump failed: {exc}") from None
    if proc.returncode != 0:
        raise SassUnavailable(f"cuobjdump failed: {(proc.stderr or proc.stdout).strip()[:400]}")
    return proc.stdout


def learner_kernels(kernels: list[KernelSass]) -> list[KernelSass]:
    return [k for k in kernels if not GRADER_KERNEL.search(k.name)]


# ------------------------------------------------------------------ the view

MARK = "\u25b6"


def _describe(ins: Instruction) -> str:
    kind = ins.kind
    if kind is None:
        return ""
    width = access_bytes(ins.opcode)
    if width is not None:
        return f"{kind.key}, {width} B a thread"
    return kind.key


def render_counts(counts: dict[str, int]) -> str:
    return "  ".join(f"{label} x{n}" for label, n in counts.items()) or "nothing marked"


def render_kernel(kernel: KernelSass, max_lines: int = 40) -> str:
    """The text view of one kernel: totals, then its hot loop with every instruction that matters
    marked, per iteration."""
    lines = [f"kernel {kernel.pretty or kernel.name}: {len(kernel.instructions)} instructions"]
    loop = kernel.hot_loop
    if loop is None:
        lines.append("  no loop: every instruction runs once per thread")
        lines.append(f"  marked: {render_counts(kernel.counts())}")
        return "\n".join(lines)
    inner = f", {loop.inner} inner loop{'s' if loop.inner != 1 else ''} left out" if loop.inner else ""
    lines.append(f"  hot loop /*{loop.start:04x}*/ to /*{loop.end:04x}*/: {len(loop.instructions)} instructions "
                 f"per iteration{inner}")
    lines.append(f"  per iteration: {render_counts(loop.counts())}")
    if any(i.kind and i.kind.key == "local memory" for i in kernel.instructions):
        lines.append("  local memory in this kernel (LDL/STL): spilled registers, or an array indexed at run time")
    lines.extend(_listing(loop.instructions, max_lines))
    return "\n".join(lines)


def _line(ins: Instruction) -> str:
    note = _describe(ins)
    return f"  {MARK if note else ' '} /*{ins.address:04x}*/ {ins.text:<52s}{'  ' + note if note else ''}"


def _listing(instructions: list[Instruction], max_lines: int) -> list[str]:
    """A short loop whole; a long one as its marked instructions, each run of others folded into
    one line, cut after max_lines lines."""
    if len(instructions) <= max_lines:
        return [_line(i) for i in instructions]
    out: list[str] = []
    folded = 0
    for n, ins in enumerate(instructions):
        if ins.kind is None:
            folded += 1
            continue
        if folded:
            out.append(f"      ... {folded} other instruction{'s' if folded > 1 else ''}")
            folded = 0
        out.append(_line(ins))
        if len(out) >= max_lines:
            rest = len(instructions) - n - 1
            if rest:
                out.append(f"      ... {rest} more instructions in this loop")
            return out
    if folded:
        out.append(f"      ... {folded} other instruction{'s' if folded > 1 else ''}")
    return out


def render(kernels: list[KernelSass], max_lines: int = 40) -> str:
    return "\n\n".join(render_kernel(k, max_lines) for k in kernels)


# ------------------------------------------------------------------ an exercise's kernels

@dataclass
class TaskSass:
    task: str
    source: str
    arch: str
    kernels: list[KernelSass] = field(default_factory=list)
    error: str = ""

    def render(self, max_lines: int = 40) -> str:
        head = f"== {self.task} ({self.source}, {self.arch})"
        if self.error:
            return f"{head}\n  {self.error}"
        if not self.kernels:
            return f"{head}\n  no kernel in this file yet"
        return head + "\n" + "\n\n".join(render_kernel(k, max_lines) for k in self.kernels)


@dataclass
class SassReport:
    exercise: str
    tasks: list[TaskSass]
    notice: str = ""

    def render(self, max_lines: int = 40) -> str:
        parts = [t.render(max_lines) for t in self.tasks]
        if self.notice:
            parts.insert(0, self.notice)
        return "\n\n".join(parts)

    def __str__(self) -> str:
        return self.render()

    def _repr_html_(self) -> str:
        import html
        return f"<pre style='font-size: 11px; line-height: 1.25'>{html.escape(self.render())}</pre>"


def exercise_sass(exercise_id: str, submission: Path | None = None, tasks: tuple[str, ...] = (),
                  arch: str | None = None) -> SassReport:
    """Compile each task's file (the build cache serves the grader's own builds) for this machine's GPU
    (``arch`` or ``S2S_ARCH`` to choose; without a GPU the course's default) and read its SASS."""
    from grader import device as devmod
    from grader.build import DEFAULT_ARCH, Toolchain, ToolchainError, compile_cuda
    from grader.spec import find

    exercise = find(exercise_id)
    folder = Path(submission).resolve() if submission else exercise.folder
    chosen = [exercise.task(t) for t in tasks] if tasks else list(exercise.tasks)
    notice = ""
    if arch is None:
        arch = os.environ.get("S2S_ARCH")
    if arch is None:
        gpu = devmod.probe().gpu
        arch = gpu.arch if gpu else DEFAULT_ARCH
        if gpu is None:
            notice = f"No GPU here: the SASS is what nvcc makes for {DEFAULT_ARCH}."
    report = SassReport(exercise.id, [], notice)
    try:
        toolchain = Toolchain.find()
    except ToolchainError as exc:
        report.notice = str(exc)
        return report
    for task in chosen:
        target = task.build.target(arch)
        entry = TaskSass(task.name, task.source, target)
        report.tasks.append(entry)
        build = compile_cuda(folder / task.source, target, toolchain, display_root=folder,
                             extra_flags=task.build.flags)
        if not build.ok or not build.library:
            entry.error = f"does not compile: {build.error}"
            continue
        try:
            entry.kernels = learner_kernels(parse(dump(build.library)))
        except SassUnavailable as exc:
            entry.error = str(exc)
    return report
