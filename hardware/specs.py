"""Spec-sheet ceilings of the GPUs we know, read from ``specs.toml``.

A measured number means little on its own: 2.9 TB/s is excellent on an H100 PCIe and mediocre on
an H200. These spec sheets give the grader and the roofline the vendor's peak for the GPU in
front of us, so a result can be shown as "x % of what this chip can do". Every figure carries
the document it was taken from, and the loader refuses a figure without one.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

SPECS_PATH = Path(__file__).with_name("specs.toml")

# The H200 is the GPU the course is calibrated on; it stands in when no GPU is present.
DEFAULT_KEY = "h200-sxm"


class SpecError(ValueError):
    """specs.toml holds something the loader will not trust."""


@dataclass(frozen=True)
class GpuSpec:
    key: str
    name: str
    match: tuple[str, ...]
    arch: str
    sms: int
    boost_clock_mhz: int
    fp32_tflops: float
    bf16_tensor_tflops: float | None  # None where the tensor cores take no BF16 (Turing)
    fp16_tensor_tflops: float
    int8_tensor_tops: float
    fp8_tensor_tflops: float | None  # None where the chip has no FP8 tensor cores
    memory_gb: float
    memory_bandwidth_gbs: float
    l2_mb: float
    smem_per_sm_kb: int
    regs_per_sm: int
    max_warps_per_sm: int
    max_threads_per_block: int
    sources: dict[str, str]

    @property
    def ridge_fp32(self) -> float:
        """Arithmetic intensity (FLOP/byte) where the FP32 roof meets the memory roof."""
        return self.fp32_tflops * 1e3 / self.memory_bandwidth_gbs


_INT_FIELDS = ("sms", "boost_clock_mhz", "smem_per_sm_kb", "regs_per_sm", "max_warps_per_sm",
               "max_threads_per_block")
_FLOAT_FIELDS = ("fp32_tflops", "bf16_tensor_tflops", "fp16_tensor_tflops", "int8_tensor_tops",
                 "fp8_tensor_tflops", "memory_gb", "memory_bandwidth_gbs", "l2_mb")
_OPTIONAL_FIELDS = frozenset({"bf16_tensor_tflops", "fp8_tensor_tflops"})
NUMERIC_FIELDS = _INT_FIELDS + _FLOAT_FIELDS
_TEXT_FIELDS = ("name", "arch")
_KNOWN_KEYS = frozenset(NUMERIC_FIELDS + _TEXT_FIELDS + ("match", "cited"))


def _words(text: str) -> str:
    """Lower-case, punctuation to single spaces, padded: "A100-SXM4-40GB" -> " a100 sxm4 40gb "."""
    return " " + " ".join(re.split(r"[^a-z0-9]+", text.lower())).strip() + " "


def _parse_gpu(key: str, raw: dict, documents: dict[str, str]) -> GpuSpec:
    def fail(message: str) -> SpecError:
        return SpecError(f"specs.toml, GPU '{key}': {message}")

    unknown = set(raw) - _KNOWN_KEYS
    if unknown:
        raise fail(f"unknown field(s) {sorted(unknown)} (a typo would silently lose a figure)")
    for name in _TEXT_FIELDS:
        if not isinstance(raw.get(name), str) or not raw[name].strip():
            raise fail(f"field '{name}' must be a non-empty string")
    if not re.fullmatch(r"sm_\d{2,3}a?", raw["arch"]):
        raise fail(f"field 'arch' must look like 'sm_90', got {raw['arch']!r}")
    match = raw.get("match")
    if not isinstance(match, list) or not match or not all(
            isinstance(m, str) and m.strip() for m in match):
        raise fail("field 'match' must be a non-empty list of device-name fragments")

    values: dict[str, int | float | None] = {}
    for name in NUMERIC_FIELDS:
        value = raw.get(name)
        if value is None:
            if name in _OPTIONAL_FIELDS:
                values[name] = None
                continue
            raise fail(f"field '{name}' is missing")
        wanted = int if name in _INT_FIELDS else (int, float)
        if isinstance(value, bool) or not isinstance(value, wanted) or value <= 0:
            kind = "integer" if name in _INT_FIELDS else "number"
            raise fail(f"field '{name}' must be a positive {kind}, got {value!r}")
        values[name] = value if name in _INT_FIELDS else float(value)

    sources: dict[str, str] = {}
    cited = raw.get("cited", {})
    if not isinstance(cited, dict):
        raise fail("'cited' must be a table: document id = [fields taken from it]")
    for doc_id, cited_fields in cited.items():
        if doc_id not in documents:
            raise fail(f"cites unknown document '{doc_id}' (add it to [documents])")
        for name in cited_fields:
            if name not in NUMERIC_FIELDS:
                raise fail(f"document '{doc_id}' is cited for unknown field '{name}'")
            if name in sources:
                raise fail(f"field '{name}' is cited twice")
            if values[name] is None:
                raise fail(f"field '{name}' is cited but has no value")
            sources[name] = documents[doc_id]
    for name in NUMERIC_FIELDS:
        if values[name] is not None and name not in sources:
            raise fail(f"field '{name}' has no source: cite the document it comes from")

    return GpuSpec(key=key, name=raw["name"], match=tuple(_words(m).strip() for m in match),
                   arch=raw["arch"], sources=sources, **values)  # type: ignore[arg-type]


def load_specs(path: Path | None = None) -> list[GpuSpec]:
    """Every GPU in ``specs.toml`` (or ``path``), validated; raises SpecError naming the culprit."""
    path = path or SPECS_PATH
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"{path.name} is not valid TOML: {err}") from None
    documents = data.get("documents", {})
    gpus = data.get("gpu", {})
    if not gpus:
        raise SpecError(f"{path.name} lists no GPU under [gpu.<key>]")
    return [_parse_gpu(key, raw, documents) for key, raw in gpus.items()]


def spec_for(device_name: str, specs: list[GpuSpec] | None = None) -> GpuSpec | None:
    """The spec sheet for a driver-reported name such as "NVIDIA H100 80GB HBM3", or None.

    Fragments match whole words, so "a100" does not match an "RTX A1000". When several GPUs
    match, the longest fragment wins: "NVIDIA H100 PCIe" matches both "h100" and "h100 pcie",
    and is the PCIe card.
    """
    words = _words(device_name)
    best: tuple[int, GpuSpec] | None = None
    for spec in specs if specs is not None else load_specs():
        for fragment in spec.match:
            if f" {fragment} " in words and (best is None or len(fragment) > best[0]):
                best = (len(fragment), spec)
    return best[1] if best else None


def default_spec(specs: list[GpuSpec] | None = None) -> GpuSpec:
    """The H200, the GPU our reference numbers come from; used when no GPU is present."""
    for spec in specs if specs is not None else load_specs():
        if spec.key == DEFAULT_KEY:
            return spec
    raise SpecError(f"specs.toml has no '{DEFAULT_KEY}' entry, which is the default GPU")


__all__ = ["GpuSpec", "SpecError", "NUMERIC_FIELDS", "load_specs", "spec_for", "default_spec"]
