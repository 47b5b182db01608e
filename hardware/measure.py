"""Measure what this GPU really does, with the microbenchmarks in ``microbench.cu``.

The spec sheet says what the chip could do at its boost clock with a perfect kernel; the
microbenchmarks say what a simple, well-written kernel actually gets here. The grader compares a
submission with the measured ceilings, so "85 % of copy bandwidth" means 85 % of something
reachable. Results are cached per device name, because measuring takes a few seconds and the
hardware does not change between two gradings.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import threading
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable

from hardware.specs import GpuSpec

MICROBENCH_SOURCE = Path(__file__).with_name("microbench.cu")


class MeasureError(Exception):
    """Measuring failed: no GPU, nvcc missing or failing, the benchmark crashed or hung."""


@dataclass(frozen=True)
class Measured:
    device: str
    sm_count: int
    clock_mhz: float
    copy_gbs: float
    fp32_tflops: float
    smem_gbs: float
    l2_gbs: float
    latency_l1_ns: float
    latency_l2_ns: float
    latency_hbm_ns: float
    latency_l1_cycles: float
    latency_l2_cycles: float
    latency_hbm_cycles: float
    bf16_mma_tflops: float | None  # None on GPUs without BF16 mma (before sm_80)
    # Hopper's full tensor-core rate (wgmma, sm_90a); None elsewhere, and in results measured
    # before this benchmark existed.
    bf16_wgmma_tflops: float | None = None

    @classmethod
    def from_json(cls, data: dict) -> Measured:
        """Build from the microbenchmark's JSON; MeasureError names what is missing or wrong."""
        values: dict[str, object] = {}
        for f in fields(cls):
            if f.name not in data and f.name == "bf16_wgmma_tflops":
                continue
            if f.name not in data:
                raise MeasureError(f"microbenchmark result lacks '{f.name}'")
            value = data[f.name]
            if f.name == "device":
                if not isinstance(value, str) or not value:
                    raise MeasureError("microbenchmark result has no device name")
            elif value is None and f.name in ("bf16_mma_tflops", "bf16_wgmma_tflops"):
                pass
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise MeasureError(f"microbenchmark result '{f.name}' is not a number: {value!r}")
            elif f.name == "sm_count":
                value = int(value)
            else:
                value = float(value)
            values[f.name] = value
        return cls(**values)  # type: ignore[arg-type]


def _slug(device_name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-") or "unknown-gpu"


def cache_file(cache_dir: Path, device_name: str) -> Path:
    """Where the measurement for this device lives: ``hardware-<slug>.json``."""
    return Path(cache_dir) / f"hardware-{_slug(device_name)}.json"


def cached(cache_dir: Path, device_name: str) -> Measured | None:
    """The stored measurement for this device, or None if there is none (or it is unreadable)."""
    path = cache_file(cache_dir, device_name)
    try:
        return Measured.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, MeasureError):
        return None


def _normalise_arch(arch: str) -> str:
    arch = arch.strip()
    if re.fullmatch(r"\d{2,3}a?", arch):
        return f"sm_{arch}"
    if not re.fullmatch(r"sm_\d{2,3}a?", arch):
        raise MeasureError(f"architecture {arch!r} should look like 'sm_90'")
    return arch


# Where an architecture has an arch-specific variant with instructions the portable target lacks
# (Hopper's wgmma), the microbenchmarks are built for it: the binary runs on that GPU only, which
# is the GPU being measured.
ARCH_SPECIFIC = {"sm_90": "sm_90a"}


def _build(nvcc: str, arch: str, cache_dir: Path, timeout_s: float) -> Path:
    """Compile the microbenchmarks once per (source, arch); later calls reuse the binary."""
    arch = ARCH_SPECIFIC.get(arch, arch)
    source = MICROBENCH_SOURCE.read_bytes()
    digest = hashlib.sha256(source + arch.encode()).hexdigest()[:16]
    binary = Path(cache_dir) / f"microbench-{arch}-{digest}"
    if binary.exists():
        return binary
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    partial = binary.with_suffix(".partial")
    command = [nvcc, "-O3", f"-arch={arch}", "-o", str(partial), str(MICROBENCH_SOURCE)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise MeasureError(f"nvcc not found at '{nvcc}': install the CUDA toolkit or pass its "
                           "path") from None
    except subprocess.TimeoutExpired:
        raise MeasureError(f"compiling the microbenchmarks took longer than {timeout_s:.0f} s"
                           ) from None
    if result.returncode != 0:
        raise MeasureError(f"nvcc could not compile microbench.cu for {arch}:\n"
                           f"{result.stderr.strip()[-2000:]}")
    partial.replace(binary)  # atomic: a concurrent run never sees half a binary
    return binary


def _run(command: list[str], timeout_s: float,
         progress: Callable[[str], None] | None) -> str:
    """Run, forwarding each stderr line to progress as it arrives; return stdout."""
    try:
        # Its own process group, so a timeout can stop it and anything it started.
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
    except OSError as err:
        raise MeasureError(f"could not start the microbenchmarks: {err}") from None
    stdout: list[str] = []
    reader = threading.Thread(target=lambda: stdout.append(proc.stdout.read()), daemon=True)
    reader.start()
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()

    timer = threading.Timer(timeout_s, kill)
    timer.start()
    stderr_tail: list[str] = []
    try:
        for line in proc.stderr:
            line = line.rstrip("\n")
            stderr_tail = (stderr_tail + [line])[-20:]
            if progress is not None:
                progress(line)
        proc.wait()
    finally:
        timer.cancel()
    reader.join()
    if timed_out.is_set():
        raise MeasureError(f"the microbenchmarks did not finish within {timeout_s:.0f} s")
    if proc.returncode != 0:
        detail = "\n".join(stderr_tail) or f"exit status {proc.returncode}"
        raise MeasureError(f"the microbenchmarks failed (is a CUDA GPU available?):\n{detail}")
    return "".join(stdout)


def measure(nvcc: str, arch: str, cache_dir: Path, *, refresh: bool = False,
            progress: Callable[[str], None] | None = None, timeout_s: float = 120) -> Measured:
    """Measured ceilings of GPU 0, from the cache unless refresh is set.

    Compiles ``microbench.cu`` for ``arch`` into ``cache_dir`` (reused while the source is
    unchanged), asks it for the device name, and returns the cached result for that device if
    there is one. Otherwise it runs all benchmarks (a few seconds), forwarding their progress
    lines to ``progress``, stores the result as ``hardware-<device>.json`` and returns it.
    Raises MeasureError with a readable message on any failure.
    """
    cache_dir = Path(cache_dir)
    binary = _build(nvcc, _normalise_arch(arch), cache_dir, timeout_s)
    if not refresh:
        device = _run([str(binary), "--name"], timeout_s, None).strip()
        hit = cached(cache_dir, device) if device else None
        if hit is not None:
            return hit
    output = _run([str(binary)], timeout_s, progress)
    try:
        data = json.loads(output)
    except ValueError:
        raise MeasureError(f"the microbenchmarks printed something that is not JSON:\n"
                           f"{output.strip()[-500:]}") from None
    measured = Measured.from_json(data)
    path = cache_file(cache_dir, measured.device)
    path.write_text(json.dumps(asdict(measured), indent=2) + "\n", encoding="utf-8")
    return measured


def _pct(measured: float | None, spec: float | None) -> str:
    if measured is None or not spec:
        return "—"
    ratio = measured / spec
    # Above the datasheet by more than clock slack means the benchmark, not the chip, is off.
    return f"{100 * ratio:.0f} %" + (" (above the peak: suspect)" if ratio > 1.1 else "")


def _num(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def comparison_rows(measured: Measured, spec: GpuSpec | None) -> list[tuple[str, str, str, str]]:
    """(quantity, measured, spec sheet, measured/spec) rows for a table.

    Shared-memory peak is not on spec sheets; it is derived as 128 bytes per clock per SM at the
    boost clock, which holds for every architecture listed in specs.toml.
    """
    m = measured
    s = spec
    smem_peak = s.sms * 128 * s.boost_clock_mhz / 1e3 if s else None
    rows: list[tuple[str, str, str, str]] = [
        ("SMs", str(m.sm_count), str(s.sms) if s else "—", _pct(m.sm_count, s and s.sms)),
        ("SM clock (MHz)", _num(m.clock_mhz), _num(s and s.boost_clock_mhz),
         _pct(m.clock_mhz, s and s.boost_clock_mhz)),
        ("DRAM copy (GB/s)", _num(m.copy_gbs), _num(s and s.memory_bandwidth_gbs),
         _pct(m.copy_gbs, s and s.memory_bandwidth_gbs)),
        ("FP32 FMA (TFLOP/s)", _num(m.fp32_tflops, 1), _num(s and s.fp32_tflops, 1),
         _pct(m.fp32_tflops, s and s.fp32_tflops)),
        ("BF16 tensor, mma.sync (TFLOP/s)", _num(m.bf16_mma_tflops, 1),
         _num(s and s.bf16_tensor_tflops, 1), _pct(m.bf16_mma_tflops, s and s.bf16_tensor_tflops)),
        ("BF16 tensor, wgmma (TFLOP/s)", _num(m.bf16_wgmma_tflops, 1),
         _num(s and s.bf16_tensor_tflops, 1), _pct(m.bf16_wgmma_tflops, s and s.bf16_tensor_tflops)),
        ("Shared memory (GB/s; peak 128 B/clk/SM)", _num(m.smem_gbs), _num(smem_peak),
         _pct(m.smem_gbs, smem_peak)),
        ("L2 read (GB/s)", _num(m.l2_gbs), "—", "—"),
    ]
    for level, ns, cycles in (("L1", m.latency_l1_ns, m.latency_l1_cycles),
                              ("L2", m.latency_l2_ns, m.latency_l2_cycles),
                              ("DRAM", m.latency_hbm_ns, m.latency_hbm_cycles)):
        rows.append((f"{level} load latency", f"{ns:,.0f} ns ({cycles:,.0f} cycles)", "—", "—"))
    return rows


__all__ = ["Measured", "MeasureError", "measure", "cached", "cache_file", "comparison_rows"]
