"""The child process that runs learner code: check, time and (under ncu) profile.

Started by :mod:`grader.runner`, never by hand. It reads one job (JSON) from
stdin, writes events as JSON lines to the file descriptor named on its command
line, and leaves stdout and stderr to the learner's printf. A crash, hang or
sticky CUDA error here costs the parent one task, never the whole grading.

Division of labour: CuPy owns raw device memory (every buffer its own
cudaMalloc, with guard regions, so an out-of-bounds write lands on a canary and
not in someone else's data), CUDA events, device attributes and the copy-bandwidth
measurement; PyTorch does the numerics on views of that memory (random inputs,
the float64 reference, the comparison).
"""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import importlib
import threading
import json
import math
import os
import signal
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from grader import spec as specmod
from grader.result import Mismatch

GUARD_BYTES = 64 * 1024            # canary region on each side of every buffer
CANARY = 0xA5
POISON = 0xFF                      # all-ones bytes: a NaN in every float format
MIN_REPS = 7
MAX_REPS = 200
TIME_BUDGET_S = 1.5                # per task, for the timing loop
WARMUP = 2
MIN_OTHER_REPS = 3
HIDDEN_WORK_S = 50e-6             # host-visible device time beyond the events' that counts as hidden
SLEEP_CYCLES = 200_000             # ~0.1 ms at 2 GHz: longer than enqueueing one call takes
OTHER_BUDGET_S = 0.25


class Emitter:
    """Events to the parent, one JSON object a line, into the path it named (a FIFO or a file)."""

    def __init__(self, path: str):
        self._f = open(path, "w", buffering=1)

    def __call__(self, event: str, **data: Any) -> None:
        self._f.write(json.dumps({"event": event, **data}) + "\n")
        self._f.flush()


class Sticky(Exception):
    """A CUDA error that leaves the context unusable: stop after this task."""


# --------------------------------------------------------------------------- memory

@dataclass
class Buffer:
    """One argument's device memory: [guard | payload | guard], all one cudaMalloc."""

    arg: specmod.Arg
    dims: tuple[int, ...]
    mem: Any                # cupy MemoryPointer (keeps the allocation alive)
    raw: Any                # torch uint8 view of the whole allocation
    payload_bytes: int
    guard: int = GUARD_BYTES

    @property
    def ptr(self) -> int:
        return self.mem.ptr + self.guard

    def payload_u8(self):
        return self.raw[self.guard:self.guard + self.payload_bytes]

    def tensor(self):
        return self.payload_u8().view(torch_dtype(self.arg.dtype)).view(self.dims)

    def guards_intact(self) -> bool:
        head = self.raw[:self.guard]
        tail = self.raw[self.guard + self.payload_bytes:]
        return bool((head == CANARY).all().item()) and bool((tail == CANARY).all().item())

    def poison(self) -> None:
        self.payload_u8().fill_(POISON)

    def unwritten(self):
        """Boolean tensor: elements whose bytes still all hold the poison."""
        import torch
        item = self.arg.itemsize
        return (self.payload_u8().view(-1, item) == POISON).all(dim=1).view(self.dims) if item > 1 else \
            torch.zeros(self.dims, dtype=torch.bool, device=self.raw.device)


def torch_dtype(name: str):
    import torch
    return {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
            "bfloat16": torch.bfloat16, "int8": torch.int8, "uint8": torch.uint8,
            "int32": torch.int32, "int64": torch.int64}[name]


def allocate(arg: specmod.Arg, sizes: dict[str, int], guard: int = GUARD_BYTES) -> Buffer:
    """With guard = 0 (under compute-sanitizer) the buffer is exactly its payload, so the
    sanitizer itself reports a write one element past the end, with kernel and line."""
    import cupy
    import torch
    dims = arg.dims(sizes)
    payload = math.prod(dims) * arg.itemsize
    tail = guard + (-payload % 256) if guard else 0
    total = max(guard + payload + tail, 1)
    mem = cupy.cuda.alloc(total)
    raw = torch.from_dlpack(cupy.ndarray((total,), dtype=cupy.uint8, memptr=mem))
    raw.fill_(CANARY)
    return Buffer(arg, dims, mem, raw, payload, guard)


def fill_inputs(buffers: list[Buffer], seed: int, scale: float) -> None:
    import torch
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    for buf in buffers:
        dtype = torch_dtype(buf.arg.dtype)
        if dtype.is_floating_point:
            values = torch.randn(buf.dims, generator=gen, device="cuda", dtype=torch.float32) * scale
        else:
            info = torch.iinfo(dtype)
            values = torch.randint(max(info.min, -128), min(info.max, 127) + 1, buf.dims, generator=gen,
                                   device="cuda", dtype=torch.int32)
        buf.tensor().copy_(values)


# --------------------------------------------------------------------------- calling

class Entry:
    """A learner or baseline entry point loaded from its shared library."""

    def __init__(self, library: str, task: specmod.Task):
        self.lib = ctypes.CDLL(library, mode=ctypes.RTLD_LOCAL)
        try:
            self.fn = getattr(self.lib, task.symbol)
        except AttributeError:
            raise LookupError(task.symbol) from None
        self.fn.restype = None
        self.fn.argtypes = [_ctype(a) for a in task.args]
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
        self.task = task

    def call(self, buffers: dict[str, Buffer], sizes: dict[str, int]) -> None:
        values = []
        for a in self.task.args:
            values.append(buffers[a.name].ptr if a.role != "scalar" else sizes[a.name])
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


def _ctype(arg: specmod.Arg):
    if arg.role != "scalar":
        return ctypes.c_void_p
    return {"int32": ctypes.c_int, "int64": ctypes.c_longlong, "float32": ctypes.c_float}[arg.dtype]


def synchronize() -> None:
    """Wait for the device; a CUDA error raised here poisons the context for good."""
    import cupy
    try:
        cupy.cuda.runtime.deviceSynchronize()
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise Sticky(_cuda_message(exc)) from None


def _cuda_message(exc: Exception) -> str:
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


# --------------------------------------------------------------------------- checking

class Checker:
    """Compares outputs with the float64 reference of one case."""

    def __init__(self, task: specmod.Task, reference: Callable[..., Any], inputs: list[Any],
                 sizes: dict[str, int]):
        import torch
        scalars = [sizes[a.name] for a in task.scalars]
        args = [t.to(torch.float64) for t in inputs]
        with torch.no_grad():
            ref = reference(*args, *scalars)
            self.expected = _as_tuple(ref)
            if task.condition == "abs":
                mag = _as_tuple(reference(*[a.abs() for a in args], *scalars))
                self.magnitude = tuple(m.abs() for m in mag)
            else:
                self.magnitude = tuple(e.abs() for e in self.expected)
        if len(self.expected) != len(task.outputs):
            raise RuntimeError(f"reference {task.reference} returned {len(self.expected)} outputs, "
                               f"the spec has {len(task.outputs)}")
        self.task = task

    def compare(self, outputs: list[Buffer], *, detail: bool = True) -> Mismatch | None:
        import torch
        for buf, exp, mag in zip(outputs, self.expected, self.magnitude):
            got = buf.tensor().to(torch.float64)
            exp = exp.reshape(got.shape)
            tol = self.task.atol + self.task.rtol * mag.reshape(got.shape)
            err = (got - exp).abs()
            bad = ~(err <= tol)                       # NaN compares false: counted as bad
            if not bool(bad.any().item()):
                continue
            if not detail:
                return Mismatch(buf.arg.name, [], 0.0, 0.0, 1, got.numel(), "wrong value", 0.0)
            unwritten = buf.unwritten()
            nonfinite = ~torch.isfinite(got)
            if bool(unwritten.any().item()):
                reason, where = "not written", unwritten
            elif bool(nonfinite.any().item()):
                reason, where = "not finite", nonfinite
            else:
                reason, where = "wrong value", None
            if where is not None:
                flat = int(where.reshape(-1).nonzero()[0].item())
            else:
                excess = torch.where(bad, err - tol, torch.full_like(err, -1.0))
                flat = int(excess.reshape(-1).argmax().item())
            index = _unravel(flat, tuple(got.shape))
            return Mismatch(buf.arg.name, index, float(exp.reshape(-1)[flat].item()),
                            float(got.reshape(-1)[flat].item()), int(bad.sum().item()), got.numel(),
                            reason, float(tol.reshape(-1)[flat].item()))
        return None


def _as_tuple(value: Any) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    index = []
    for dim in reversed(shape):
        index.append(flat % dim)
        flat //= dim
    return list(reversed(index))


def case_seed(seed: int, task: str, label: str) -> int:
    digest = hashlib.sha256(f"{seed}:{task}:{label}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


# --------------------------------------------------------------------------- one task

@dataclass
class Prepared:
    """One case's buffers and the pristine copy of its inputs.

    The reference is computed only after the learner's call, from the copy: no
    reference result sits in device memory while learner code runs, and a kernel that
    scribbles on its inputs cannot drag the reference along with it."""

    task: specmod.Task
    case: specmod.Case
    inputs: list[Buffer]
    outputs: list[Buffer]
    originals: list[Any]

    @property
    def sizes(self) -> dict[str, int]:
        return self.case.sizes

    @property
    def by_name(self) -> dict[str, Buffer]:
        return {b.arg.name: b for b in self.inputs + self.outputs}

    def refill(self, seed: int) -> None:
        """New random inputs in the same buffers (same pointers, new content)."""
        fill_inputs(self.inputs, seed, self.case.input_scale)
        self.originals = [b.tensor().clone() for b in self.inputs]

    def checker(self, reference: Callable[..., Any]) -> "Checker":
        return Checker(self.task, reference, self.originals, self.sizes)


def prepare(task: specmod.Task, case: specmod.Case, seed: int, guard: int = GUARD_BYTES) -> Prepared:
    inputs = [allocate(a, case.sizes, guard) for a in task.inputs]
    outputs = [allocate(a, case.sizes, guard) for a in task.outputs]
    prep = Prepared(task, case, inputs, outputs, [])
    prep.refill(seed)
    return prep


def verify_after_call(entry: Entry, prep: Prepared) -> tuple[str, str] | None:
    """(kind, message) for anything wrong besides the values themselves."""
    launch = entry.launch_error()
    if launch:
        return "launch error", (f"a kernel launch failed: {launch} (check the launch configuration: at most "
                                "1024 threads per block, a grid of at least one block, and no more dynamic "
                                "shared memory than the kernel was allowed)")
    for buf in prep.inputs + prep.outputs:
        if not buf.guards_intact():
            return "out of bounds", (f"memory just outside '{buf.arg.name}' was overwritten: a kernel wrote past "
                                     "the ends of the buffer (check the bounds test of the last partial block)")
    for buf, original in zip(prep.inputs, prep.originals):
        if not bool(buf.tensor().equal(original)):
            return "input modified", f"the input '{buf.arg.name}' was modified; inputs are read-only (const)"
    return None


def run_task(emit: Emitter, job: dict[str, Any], exercise: specmod.Exercise, name: str,
             ceilings: dict[str, float]) -> dict[str, Any]:
    task = exercise.task(name)
    info = job["tasks"][name]
    result: dict[str, Any] = {"task": name, "cases": [], "correct": False, "timing": None, "error": None}
    try:
        learner = Entry(info["library"], task)
    except LookupError:
        result["error"] = {"kind": "missing symbol",
                           "message": f"the library has no function named {task.symbol!r}"}
        return result
    reference = exercise.reference_function(task)
    seed = int(job["seed"])

    sanitize = job.get("mode") == "sanitize"
    cases = list(task.cases)
    if sanitize:   # the sanitizer slows kernels 10-100x: its job is to find bad accesses, small sizes do
        limit = int(job.get("max_elements", 1 << 22))
        cases = [c for c in cases if sum(a.numel(c.sizes) for a in task.inputs + task.outputs) <= limit]
    for i, case in enumerate(cases):
        emit("progress", task=name, stage="check", case=i + 1, of=len(cases), label=case.describe())
        prep = prepare(task, case, case_seed(seed, name, f"case{i}"), guard=0 if sanitize else GUARD_BYTES)
        for buf in prep.outputs:
            buf.poison()
        synchronize()
        t0 = time.perf_counter()
        learner.call(prep.by_name, case.sizes)
        try:
            synchronize()
        except Sticky as exc:
            raise Sticky(f"{exc} (case {case.describe()})") from None
        seconds = time.perf_counter() - t0
        problem = verify_after_call(learner, prep)
        mismatch = None if problem else prep.checker(reference).compare(prep.outputs)
        entry = {"case": case.to_dict(), "label": case.describe(), "passed": not problem and mismatch is None,
                 "seconds": seconds}
        if problem:
            entry["error"] = {"kind": problem[0], "message": problem[1]}
        if mismatch:
            entry["mismatch"] = dataclasses.asdict(mismatch)
        result["cases"].append(entry)
        del prep
        if not entry["passed"]:
            _free()
            return result           # the first failing case is what the learner needs
    result["correct"] = True
    _free()

    if job.get("timing", True) and not sanitize:
        result["timing"] = time_task(emit, job, exercise, task, learner, reference, seed, ceilings)
        _free()     # the benchmark's buffers went with time_task's frame
        if result["timing"].get("error"):
            result["correct"] = False
    return result


def _free() -> None:
    import cupy
    import torch
    torch.cuda.empty_cache()
    cupy.get_default_memory_pool().free_all_blocks()


def time_task(emit: Emitter, job: dict[str, Any], exercise: specmod.Exercise, task: specmod.Task,
              learner: Entry, reference: Callable[..., Any], seed: int, ceilings: dict[str, float]) -> dict[str, Any]:
    """Median times of learner, baseline (and vendor), interleaved on the same inputs.

    Every round draws fresh inputs into the same buffers, so nothing computed in an
    earlier call (cached by pointer, size or content) can stand in for this one, and
    every learner output is checked against a reference computed after the call."""
    import cupy
    import torch
    case = task.benchmark
    emit("progress", task=task.name, stage="time", label=case.describe())
    prep = prepare(task, case, case_seed(seed, task.name, "benchmark"))
    baseline = Entry(job["tasks"][task.name]["baseline_library"], task)
    contenders: list[tuple[str, Callable[[], None]]] = [
        ("learner", lambda: learner.call(prep.by_name, case.sizes)),
        ("baseline", lambda: baseline.call(prep.by_name, case.sizes)),
    ]
    if task.vendor:
        vendor_fn = getattr(exercise.load_reference(), task.vendor)
        scal = [case.sizes[a.name] for a in task.scalars]

        def run_vendor() -> None:
            got = _as_tuple(vendor_fn(*[b.tensor() for b in prep.inputs], *scal))
            for o, g in zip(prep.outputs, got):
                o.tensor().copy_(g.reshape(o.tensor().shape))
        contenders.append(("vendor", run_vendor))

    # Reading (not writing) twice the L2's size evicts everything, including dirty lines from
    # the output poisoning, and leaves only clean lines behind: the timed call then neither
    # hits in L2 nor pays for someone else's write-backs.
    flush = torch.ones(int(ceilings.get("l2_bytes", 64 << 20)) // 2, dtype=torch.int32, device="cuda")
    samples: dict[str, list[float]] = {name: [] for name, _ in contenders}
    host_excess: list[float] = []
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    busy = busy_kernel()

    def timed(fn: Callable[[], None] | None) -> tuple[float, float]:
        """(event seconds, host seconds) of one call, L2 flushed first."""
        flush.sum()
        synchronize()
        # Keep the GPU busy while the host enqueues the call, so that the start event fires
        # right before the first kernel instead of measuring the host's launch latency too.
        # The busy kernel fills every SM, so nothing launched elsewhere can run beside it.
        busy()
        t0 = time.perf_counter()
        start.record()
        if fn is not None:
            fn()
        end.record()
        synchronize()
        return cupy.cuda.get_elapsed_time(start, end) * 1e-3, time.perf_counter() - t0

    # What the host clock adds to an empty call: the rest of the sleep, the event
    # bookkeeping, the synchronize. Work the events miss (another stream, a host thread)
    # shows up as host time beyond this.
    idle = statistics.median(h - e for e, h in (timed(None) for _ in range(5)))

    def once(name: str, fn: Callable[[], None], record: bool) -> str | None:
        for buf in prep.outputs:
            buf.poison()
        event_s, host_s = timed(fn)
        if name == "learner":
            problem = verify_after_call(learner, prep)
            if problem:
                return problem[1]
            if prep.checker(reference).compare(prep.outputs, detail=False) is not None:
                return ("the output of a timed call was wrong, although the same code passed the correctness "
                        "cases: does it depend on state left over from an earlier call (a cache keyed on the "
                        "pointers or sizes)?")
            if record:
                host_excess.append(host_s - event_s - idle)
        if record:
            samples[name].append(event_s)
        return None

    rounds = 0
    began = time.perf_counter()
    for _ in range(WARMUP):
        if err := once("learner", contenders[0][1], False):
            return {"error": {"kind": "timed output wrong", "message": err}}
    previous = None
    while rounds < MAX_REPS:
        prep.refill(case_seed(seed, task.name, f"round{rounds}"))
        order = contenders if rounds % 2 == 0 else list(reversed(contenders))
        for name, fn in order:
            # A slow reference point (a naive baseline can be 1000x slower) needs few samples to be
            # known well enough; past a small budget it is only timed every fourth round.
            if name != "learner" and len(samples[name]) >= MIN_OTHER_REPS and \
                    sum(samples[name]) > OTHER_BUDGET_S and rounds % 4:
                continue
            if err := once(name, fn, True):
                return {"error": {"kind": "timed output wrong", "message": err}}
        rounds += 1
        if rounds >= MIN_REPS and rounds % 4 == 0:
            current = statistics.median(samples["learner"])
            stable = previous is not None and abs(current - previous) <= 0.01 * current
            if stable or time.perf_counter() - began > TIME_BUDGET_S:
                break
            previous = current
    flops, nbytes = task.work(case)
    med = {name: statistics.median(v) for name, v in samples.items()}
    excess = statistics.median(host_excess)
    if excess > HIDDEN_WORK_S and excess > 0.5 * med["learner"]:
        return {"error": {"kind": "untimed work", "message": (
            f"the call returned after {med['learner'] * 1e6:.0f} µs of GPU time on the default stream, but the "
            f"device stayed busy {excess * 1e6:.0f} µs longer: work was launched where the timer cannot see it "
            "(another stream or a host thread). Launch every kernel on the default stream.")}}
    out = {
        "case": case.to_dict(), "label": case.describe(), "reps": rounds,
        "learner_s": med["learner"], "baseline_s": med["baseline"], "vendor_s": med.get("vendor"),
        "learner_spread": _spread(samples["learner"]), "baseline_spread": _spread(samples["baseline"]),
        "learner_wall_s": med["learner"] + excess,
        "speedup": med["baseline"] / med["learner"],
        "vendor_ratio": (med["vendor"] / med["learner"]) if "vendor" in med else None,
        "flops": flops, "bytes": nbytes,
    }
    return out


_BUSY_SOURCE = r"""
extern "C" __global__ void s2s_busy(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


def busy_kernel() -> Callable[[], None]:
    """A launch that occupies every thread slot of every SM for about 0.1 ms."""
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    kernel = cupy.RawKernel(_BUSY_SOURCE, "s2s_busy")
    block = 1024
    # Enough blocks of 1024 threads to hold every thread slot of every SM (2048 a Hopper SM).
    grid = props["multiProcessorCount"] * -(-props["maxThreadsPerMultiProcessor"] // block)

    def launch() -> None:
        kernel((grid,), (block,), (cupy.int64(SLEEP_CYCLES),))
    return launch


def _spread(values: list[float]) -> float:
    """(max - min) / median of the middle half: how noisy the samples were."""
    v = sorted(values)
    mid = v[len(v) // 4: len(v) - len(v) // 4] or v
    return (mid[-1] - mid[0]) / statistics.median(v)


# --------------------------------------------------------------------------- ceilings

def measure_ceilings() -> dict[str, float]:
    """Copy bandwidth of this GPU, measured now (bytes read + written per second)."""
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    l2 = int(props.get("l2CacheSize", 64 << 20))
    nbytes = 1 << 30
    src = cupy.cuda.alloc(nbytes)
    dst = cupy.cuda.alloc(nbytes)
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for i in range(6):
        start.record()
        cupy.cuda.runtime.memcpyAsync(dst.ptr, src.ptr, nbytes, cupy.cuda.runtime.memcpyDeviceToDevice, 0)
        end.record()
        end.synchronize()
        if i:
            times.append(cupy.cuda.get_elapsed_time(start, end) * 1e-3)
    del src, dst
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return {"copy_bytes_per_s": 2 * nbytes / statistics.median(times), "l2_bytes": l2,
            "device": name}


# --------------------------------------------------------------------------- profile mode

def profile_tasks(emit: Emitter, job: dict[str, Any], exercise: specmod.Exercise) -> None:
    """Run each task's learner entry once at the benchmark size, between
    cudaProfilerStart/Stop and inside an NVTX range named after the task, so that ncu
    (started with --profile-from-start off) records the learner's kernels and nothing else.

    CuPy alone does the set-up here: under ncu every second of start-up is slower,
    and nothing is checked, so PyTorch is not needed."""
    import cupy
    prefix = job.get("nvtx_prefix", "s2s/")
    rng = cupy.random.default_rng(case_seed(int(job["seed"]), "profile", exercise.id))
    for name in job["order"]:
        task = exercise.task(name)
        try:
            entry = Entry(job["tasks"][name]["library"], task)
        except LookupError:
            continue
        sizes = task.benchmark.sizes
        keep = []
        pointers: dict[str, int] = {}
        for arg in task.inputs + task.outputs:
            numel = arg.numel(sizes)
            mem = cupy.cuda.alloc(max(numel * arg.itemsize, 1))
            keep.append(mem)
            pointers[arg.name] = mem.ptr
            if arg.role == "in":
                _fill_raw(cupy, rng, mem, arg, numel)
        synchronize()
        emit("profile_start", task=name)
        _nvtx_push(prefix + name)
        cupy.cuda.profiler.start()
        values = [pointers[a.name] if a.role != "scalar" else sizes[a.name] for a in task.args]
        entry.fn(*values)
        synchronize()
        cupy.cuda.profiler.stop()
        _nvtx_pop()
        emit("profile_end", task=name)
        del keep


def _fill_raw(cupy, rng, mem, arg: specmod.Arg, numel: int) -> None:
    normal = rng.standard_normal(numel, dtype=cupy.float32)
    if arg.dtype == "float32":
        view = cupy.ndarray((numel,), dtype=cupy.float32, memptr=mem)
        view[...] = normal
    elif arg.dtype in ("bfloat16", "float16"):
        view = cupy.ndarray((numel,), dtype=cupy.uint16, memptr=mem)
        if arg.dtype == "bfloat16":   # the top half of a float32 is a bfloat16
            view[...] = (normal.view(cupy.uint32) >> 16).astype(cupy.uint16)
        else:
            view[...] = normal.astype(cupy.float16).view(cupy.uint16)
    else:
        view = cupy.ndarray((numel * arg.itemsize,), dtype=cupy.uint8, memptr=mem)
        view[...] = rng.integers(0, 256, numel * arg.itemsize, dtype=cupy.uint8)


def _nvtx_push(name: str) -> None:
    try:
        import cupy.cuda.nvtx as nvtx
        nvtx.RangePush(name)
    except Exception:
        import torch
        torch.cuda.nvtx.range_push(name)


def _nvtx_pop() -> None:
    try:
        import cupy.cuda.nvtx as nvtx
        nvtx.RangePop()
    except Exception:
        import torch
        torch.cuda.nvtx.range_pop()


# --------------------------------------------------------------------------- main

def main(argv: list[str]) -> int:
    # Python ignores SIGXFSZ; restore the default so that output beyond the runner's file-size
    # limit (megabytes of printf) stops this process instead of being silently dropped.
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    emit = Emitter(argv[1])
    job = json.loads(sys.stdin.read())
    sys.stdin.close()
    try:
        importer = None
        if job.get("mode") != "profile":
            # PyTorch takes seconds to import; let it load while CuPy creates the CUDA context.
            importer = threading.Thread(target=importlib.import_module, args=("torch",), daemon=True)
            importer.start()
        import cupy
        cupy.cuda.set_allocator(None)          # plain cudaMalloc per buffer, no pool: guards stay honest
        cupy.cuda.runtime.setDevice(int(job.get("device", 0)))
        cupy.cuda.runtime.free(cupy.cuda.runtime.malloc(1))   # creates the context now
        exercise = specmod.load(Path(job["exercise_folder"]))
        if importer is not None:
            importer.join()
            import torch  # noqa: F401  (fails loudly here if the threaded import failed)
    except Exception as exc:  # the environment, not the learner
        emit("fatal", message=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc())
        return 3
    if job.get("mode") == "profile":
        try:
            profile_tasks(emit, job, exercise)
        except Sticky as exc:
            emit("fatal", message=str(exc))
            return 1
        emit("done")
        return 0
    ceilings = measure_ceilings() if job.get("mode") != "sanitize" else {}
    emit("ceilings", **ceilings)
    for name in job["order"]:
        emit("task_start", task=name)
        try:
            result = run_task(emit, job, exercise, name, ceilings)
        except Sticky as exc:
            emit("task_done", task=name, result={"task": name, "cases": [], "correct": False, "timing": None,
                                                 "error": {"kind": "cuda error", "message": str(exc)}},
                 sticky=True)
            return 1          # the CUDA context is gone; the parent starts a fresh worker for the rest
        except Exception as exc:
            emit("task_done", task=name, result={"task": name, "cases": [], "correct": False, "timing": None,
                                                 "error": {"kind": "grader error",
                                                           "message": f"{type(exc).__name__}: {exc}",
                                                           "trace": traceback.format_exc()}})
            continue
        emit("task_done", task=name, result=result)
    emit("done")
    return 0


if __name__ == "__main__":
    if os.environ.get("S2S_WORKER_PROFILE"):   # performance work on the grader itself
        import cProfile
        profiler = cProfile.Profile()
        code = profiler.runcall(main, sys.argv)
        profiler.dump_stats(os.environ["S2S_WORKER_PROFILE"])
        sys.exit(code)
    sys.exit(main(sys.argv))
