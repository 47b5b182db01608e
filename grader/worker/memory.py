"""Device memory of one case: every tensor its own cudaMalloc between guard regions.

CuPy owns the allocations (one plain cudaMalloc per buffer, no pool), so an out-of-bounds write
lands on a canary the grader checks after every call and not in someone else's data; PyTorch
views the same memory to fill it and to compare it. A list of tensors is as many allocations
plus a device array of their pointers; its element counts, where the task passes them, are one
more device array.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from grader import spec as specmod

GUARD_BYTES = 64 * 1024            # canary region on each side of every buffer
CANARY = 0xA5
POISON = 0xFF                      # all-ones bytes: a NaN in every float format


def torch_dtype(name: str):
    import torch
    return {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
            "bfloat16": torch.bfloat16, "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
            "int8": torch.int8, "uint8": torch.uint8, "int32": torch.int32, "int64": torch.int64}[name]


@dataclass
class Buffer:
    """One tensor's device memory: [guard | payload | guard], all one cudaMalloc."""

    dtype: str
    dims: tuple[int, ...]
    mem: Any                # cupy MemoryPointer (keeps the allocation alive)
    raw: Any                # torch uint8 view of the whole allocation
    payload_bytes: int
    guard: int
    remote: int | None = None   # the allocation's address in the learner's process, once mapped there
    offset: int | None = None   # where it lies in the arena, when it was carved out of one

    @property
    def ptr(self) -> int:
        """The payload's address where the learner's code runs."""
        return (self.mem.ptr if self.remote is None else self.remote) + self.guard

    @property
    def local_ptr(self) -> int:
        """The payload's address in this process (the baseline and the vendor run here)."""
        return self.mem.ptr + self.guard

    @property
    def itemsize(self) -> int:
        return specmod.DTYPES[self.dtype].itemsize

    def payload_u8(self):
        return self.raw[self.guard:self.guard + self.payload_bytes]

    def tensor(self):
        return self.payload_u8().view(torch_dtype(self.dtype)).view(self.dims)

    def guard_broken(self):
        """A 0-d boolean tensor (no synchronisation): some canary byte was overwritten."""
        head = self.raw[:self.guard]
        tail = self.raw[self.guard + self.payload_bytes:]
        return (head != CANARY).any() | (tail != CANARY).any()

    def poison(self) -> None:
        self.payload_u8().fill_(POISON)

    def unwritten(self):
        """Boolean tensor: elements whose bytes all still hold the poison."""
        return (self.payload_u8().view(-1, self.itemsize) == POISON).all(dim=1).view(self.dims)


ALIGN = 256
LARGE_ALIGN = 2 << 20              # where cudaMalloc places a large allocation


def _total(dtype: str, dims: tuple[int, ...], guard: int) -> tuple[int, int]:
    """(payload bytes, bytes of the whole allocation with its guards)."""
    payload = math.prod(dims) * specmod.DTYPES[dtype].itemsize
    tail = guard + (-payload % ALIGN) if guard else 0
    return payload, max(guard + payload + tail, 1)


class Arena:
    """One allocation that the learner's process maps once, before it confines itself (mapping a
    CUDA IPC handle needs the exporting process's files, which a confined process may not open).
    Each case's buffers are carved out of it in turn, each between its own guard regions."""

    def __init__(self, nbytes: int):
        import cupy
        self.size = _round_up(max(nbytes, ALIGN), ALIGN)
        # A cudaMalloc of its own, never a piece of a pool's block: the IPC handle maps the whole
        # allocation, so the arena must begin where the allocation begins.
        self.mem = cupy.cuda.MemoryPointer(cupy.cuda.Memory(self.size), 0)
        self.offset = 0

    def ipc_handle(self) -> str:
        import cupy
        return bytes(cupy.cuda.runtime.ipcGetMemHandle(self.mem.ptr)).hex()

    def reset(self) -> None:
        self.offset = 0

    def take(self, nbytes: int) -> tuple[Any, int]:
        import cupy
        start, end = place(self.offset, nbytes)
        if end > self.size:
            raise MemoryError(f"the arena of {self.size} bytes has no room for {nbytes} more")
        self.offset = end
        return cupy.cuda.MemoryPointer(self.mem.mem, self.mem.ptr - self.mem.mem.ptr + start), start

    @staticmethod
    def footprint(task: specmod.Task, case: specmod.Case, guard: int = GUARD_BYTES) -> int:
        """The bytes :meth:`CaseMemory.allocate` takes from an arena for this case."""
        total = 0
        for a in task.tensors:
            shapes = a.shapes(case)
            total += sum(_room(_total(a.dtype, s, guard)[1]) for s in shapes)
            if a.list is not None:
                total += _room(_total("int64", (len(shapes),), guard)[1])
        return total


def place(offset: int, nbytes: int) -> tuple[int, int]:
    """(start, end) of a buffer of ``nbytes`` taken from an arena whose first free byte is at
    ``offset``. A large buffer starts on a 2 MiB boundary, as a cudaMalloc of its own would: the
    learner's kernels then meet the same layout as the checker's own allocations."""
    start = _round_up(offset, _granule(nbytes))
    return start, start + _round_up(nbytes, ALIGN)


def _granule(nbytes: int) -> int:
    return LARGE_ALIGN if nbytes >= LARGE_ALIGN // 2 else ALIGN


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def _room(nbytes: int) -> int:
    """The most a buffer of ``nbytes`` can take from an arena, its alignment included."""
    granule = _granule(nbytes)
    return _round_up(nbytes, ALIGN) + (granule if granule > ALIGN else 0)


def allocate(dtype: str, dims: tuple[int, ...], guard: int = GUARD_BYTES, arena: Arena | None = None) -> Buffer:
    """With guard = 0 (under compute-sanitizer) the buffer is exactly its payload, so the
    sanitizer itself reports a write one element past the end, with kernel and line."""
    import cupy
    import torch
    payload, total = _total(dtype, dims, guard)
    if arena is None:
        mem, offset = cupy.cuda.alloc(total), None
    else:
        mem, offset = arena.take(total)
    raw = torch.from_dlpack(cupy.ndarray((total,), dtype=cupy.uint8, memptr=mem))
    raw.fill_(CANARY)
    return Buffer(dtype, dims, mem, raw, payload, guard, offset=offset)


@dataclass
class ArgMemory:
    """What one device argument holds: a tensor, or a list of them behind a table of pointers."""

    arg: specmod.Arg
    buffers: list[Buffer]
    table: Buffer | None = None          # a list's device array of pointers
    table_content: Any = None            # what the table must still hold after a call
    local_table: Buffer | None = None    # the same table with this process's addresses, once mapped elsewhere

    @property
    def pointer(self) -> int:
        return (self.table or self.buffers[0]).ptr

    def tensors(self) -> list[Any]:
        return [b.tensor() for b in self.buffers]

    def value(self) -> Any:
        """What a Python function sees: the tensor, or the list of tensors."""
        tensors = self.tensors()
        return tensors if self.arg.list is not None else tensors[0]

    def all_buffers(self) -> list[Buffer]:
        return self.buffers + ([self.table] if self.table is not None else [])


@dataclass
class CaseMemory:
    """The device arguments of one task at one case, and the pristine copy of what the call reads.

    The reference is computed only after the learner's call, from that copy: no reference result
    sits in device memory while learner code runs, and a kernel that scribbles on its inputs
    cannot drag the reference along with it."""

    task: specmod.Task
    case: specmod.Case
    args: dict[str, ArgMemory]
    before: dict[str, list[Any]] = field(default_factory=dict)
    functions: Any = None        # the exercise's reference module: where derived inputs come from

    @classmethod
    def allocate(cls, task: specmod.Task, case: specmod.Case, guard: int = GUARD_BYTES,
                 functions: Any = None, arena: Arena | None = None) -> "CaseMemory":
        """The case's buffers: each its own cudaMalloc, or carved out of ``arena`` (which then
        holds this case alone)."""
        import torch
        if arena is not None:
            arena.reset()
        args: dict[str, ArgMemory] = {}
        for a in task.tensors:
            buffers = [allocate(a.dtype, shape, guard, arena) for shape in a.shapes(case)]
            memory = ArgMemory(a, buffers)
            if a.sizes_of is not None:
                counts = [math.prod(s) for s in case.lists[a.sizes_of]]
                buffers[0].tensor().copy_(torch.tensor(counts, dtype=torch_dtype(a.dtype)))
            if a.list is not None:
                memory.table = allocate("int64", (len(buffers),), guard, arena)
            args[a.name] = memory
        out = cls(task, case, args, functions=functions)
        out.write_tables()
        return out

    def write_tables(self) -> None:
        """Each list's device array of pointers, as addresses where the learner's code runs."""
        import torch
        for m in self.args.values():
            if m.table is not None:
                m.table_content = torch.tensor([b.ptr for b in m.buffers], dtype=torch.int64,
                                               device=m.table.raw.device)
                m.table.tensor().copy_(m.table_content)

    def buffers(self) -> list[Buffer]:
        return [b for m in self.args.values() for b in m.all_buffers()]

    def bind(self, bases: list[int | None]) -> None:
        """The addresses of :meth:`buffers` in the learner's process (None: back to this one's)."""
        import torch
        for buffer, base in zip(self.buffers(), bases):
            buffer.remote = base
        self.write_tables()
        for m in self.args.values():
            if m.table is None:
                continue
            if m.table.remote is None:
                m.local_table = None
                continue
            if m.local_table is None:
                m.local_table = allocate("int64", (len(m.buffers),), 0)
            m.local_table.tensor().copy_(torch.tensor([b.local_ptr for b in m.buffers], dtype=torch.int64,
                                                      device=m.table.raw.device))

    def local_call_values(self, scalars: dict[str, Any]) -> list[Any]:
        """:meth:`call_values` with this process's own addresses, wherever the buffers are mapped."""
        out = []
        for a in self.task.args:
            if not a.is_tensor:
                out.append(scalars[a.name])
                continue
            m = self.args[a.name]
            table = m.local_table or m.table
            out.append(table.local_ptr if table is not None else m.buffers[0].local_ptr)
        return out

    def fill(self, seed: int, roles: tuple[str, ...] = ("in", "inout"), call: int = 0) -> None:
        """Fresh random values for the arguments of these roles (element counts excepted); then the
        derived inputs, computed from those values as the spec's functions say."""
        import torch
        gen = torch.Generator(device="cuda")
        gen.manual_seed(seed)
        scalars = self.task.scalar_values(self.case, call)
        for memory in self.args.values():
            a = memory.arg
            if a.role in roles and a.sizes_of is None and a.derive is None:
                kind = self.case.fills.get(a.name, a.fill)
                for t in memory.tensors():
                    t.copy_(_draw(kind, t.shape, t.dtype, self.case.input_scale, gen, a.bounds(scalars)))
        if "in" in roles:
            for a in self.task.args:
                if a.derive is not None:
                    self.args[a.name].buffers[0].tensor().copy_(self._derived(a, scalars))

    def _derived(self, arg: specmod.Arg, scalars: dict[str, Any]) -> Any:
        """What the reference module's function ``arg.derive`` computes, in float64, from the arguments
        its parameters name (tensors as float64 copies, scalars as numbers)."""
        import inspect
        import torch
        fn = getattr(self.functions, arg.derive, None) if self.functions is not None else None
        if fn is None:
            raise RuntimeError(f"input '{arg.name}' is derived by {arg.derive}(), which the reference module "
                               "does not define")
        kwargs = {}
        for name in inspect.signature(fn).parameters:
            if name in scalars:
                kwargs[name] = scalars[name]
            elif name in self.args and self.args[name].arg.list is None:
                kwargs[name] = self.args[name].buffers[0].tensor().to(torch.float64)
            else:
                raise RuntimeError(f"{arg.derive}() takes {name!r}, which is neither a tensor nor a scalar of "
                                   f"task {self.task.name}")
        with torch.no_grad():
            return fn(**kwargs)

    def copy_from(self, other: "CaseMemory", roles: tuple[str, ...] | None = None) -> None:
        """The tensors' values from ``other``, a memory of the same task and case: every argument's,
        or those of these roles (tables of pointers excepted: each memory's point at its own
        tensors)."""
        for name, m in self.args.items():
            if roles is None or m.arg.role in roles:
                for mine, theirs in zip(m.buffers, other.args[name].buffers):
                    mine.payload_u8().copy_(theirs.payload_u8())

    def snapshot(self, source: "CaseMemory | None" = None) -> None:
        """Copy what the call reads (in and inout arguments), before the call: from this memory, or
        from ``source``, whose values it is about to receive."""
        self.before = {m.arg.name: [t.clone() for t in m.tensors()]
                       for m in (source or self).args.values() if m.arg.role in ("in", "inout")}

    def poison_outputs(self) -> None:
        for m in self.args.values():
            if m.arg.role == "out":
                for b in m.buffers:
                    b.poison()

    def call_values(self, scalars: dict[str, Any]) -> list[Any]:
        """The entry point's arguments in signature order: device pointers and scalar values."""
        return [self.args[a.name].pointer if a.is_tensor else scalars[a.name] for a in self.task.args]

    def damage(self) -> tuple[str, str] | None:
        """(kind, message) when the call wrote where it must not: past a buffer's ends, into an
        input, into a list's table of pointers."""
        import torch
        memories = list(self.args.values())
        flags = [b.guard_broken() for m in memories for b in m.all_buffers()]
        owners = [m.arg.name for m in memories for _ in m.all_buffers()]
        broken = torch.stack(flags).nonzero() if flags else []
        if len(broken):
            name = owners[int(broken[0].item())]
            return "out of bounds", (f"memory just outside '{name}' was overwritten: a kernel wrote past the ends "
                                     "of the buffer (check the bounds test of the last partial block)")
        for m in memories:
            if m.table is not None and not bool(m.table.tensor().equal(m.table_content)):
                return "input modified", (f"the table of pointers of the list '{m.arg.name}' was modified; the "
                                          "pointer arrays are read-only")
            if m.arg.role == "in" and self.before:
                for i, (t, original) in enumerate(zip(m.tensors(), self.before[m.arg.name])):
                    if not bool(t.equal(original)):
                        which = f"'{m.arg.name}'" + (f" (tensor {i} of the list)" if m.arg.list else "")
                        return "input modified", f"the input {which} was modified; inputs are read-only (const)"
        return None


OUTLIER_EVERY = 61         # "outliers": every 61st column (from the 8th) is an outlier channel,
OUTLIER_FACTOR = 50.0      # 50 times larger than the rest,
ZERO_ROW_EVERY = 5         # and every 5th row (from the 4th) is all zeros


def plant_outliers(values):
    """What a large model's activations look like to a quantizer: a few channels (columns) far
    larger than the rest, and some rows (tokens) of zeros. A vector gets the outliers only."""
    values[..., 7::OUTLIER_EVERY] *= OUTLIER_FACTOR
    if values.dim() >= 2:
        values[3::ZERO_ROW_EVERY] = 0
    return values


def _draw(kind: str, shape: Any, dtype: Any, scale: float, gen: Any, bounds: tuple[int, int] | None = None,
          device: str = "cuda"):
    """Values for one tensor, drawn on the GPU in float32 (or int32) and cast by the copy. Integers with
    bounds [low, high) are drawn uniformly in them, or ("ends") each one of low and high - 1."""
    import torch
    if bounds is not None and kind not in ("zeros", "ones"):
        low, high = bounds
        if kind == "ends":
            pick = torch.rand(shape, generator=gen, device=device) < 0.5
            return torch.where(pick, low, high - 1).to(torch.int64)
        return torch.randint(low, high, shape, generator=gen, device=device, dtype=torch.int64)
    if kind == "zeros":
        return torch.zeros(shape, device=device, dtype=torch.float32)
    if kind == "ones":
        return torch.ones(shape, device=device, dtype=torch.float32)
    if dtype.is_floating_point:
        if kind == "uniform":
            return torch.rand(shape, generator=gen, device=device, dtype=torch.float32) * scale
        values = torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * scale
        if kind == "outliers":
            return plant_outliers(values)
        return values.abs_() if kind == "positive" else values
    info = torch.iinfo(dtype)
    low = 0 if kind in ("uniform", "positive") else max(info.min, -128)
    return torch.randint(low, min(info.max, 127) + 1, shape, generator=gen, device=device, dtype=torch.int32)
