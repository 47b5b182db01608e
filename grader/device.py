"""What GPU (if any) this machine has, asked of the CUDA driver directly.

The driver API through ctypes needs no Python GPU package, so the grader can tell
"no GPU here" apart from "no CuPy here" and still compile and report on machines
without one.
"""
from __future__ import annotations

import ctypes
import ctypes.util
from dataclasses import dataclass

_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    capability: tuple[int, int]
    sms: int
    uuid: str = ""          # "GPU-8c5e...", as nvidia-smi prints it: the same GPU whatever its index

    @property
    def arch(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"


@dataclass(frozen=True)
class Probe:
    gpus: tuple[Gpu, ...]
    reason: str = ""          # why there is none, in one sentence

    @property
    def gpu(self) -> Gpu | None:
        return self.gpus[0] if self.gpus else None


def probe() -> Probe:
    """Ask the CUDA driver for its devices; never raises."""
    names = ["libcuda.so.1", "libcuda.so", ctypes.util.find_library("cuda") or ""]
    lib = None
    for name in filter(None, names):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        return Probe((), "no NVIDIA driver is installed: libcuda.so was not found")
    rc = lib.cuInit(0)
    if rc != 0:
        return Probe((), f"the NVIDIA driver is installed but found no usable GPU (cuInit returned {_error_name(lib, rc)})")
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return Probe((), "the NVIDIA driver reports no GPU on this machine")
    gpus = []
    for i in range(count.value):
        dev = ctypes.c_int(0)
        lib.cuDeviceGet(ctypes.byref(dev), i)
        buf = ctypes.create_string_buffer(256)
        lib.cuDeviceGetName(buf, 256, dev)
        major, minor, sms = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
        lib.cuDeviceGetAttribute(ctypes.byref(major), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        lib.cuDeviceGetAttribute(ctypes.byref(minor), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        lib.cuDeviceGetAttribute(ctypes.byref(sms), _CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)
        gpus.append(Gpu(i, buf.value.decode(errors="replace"), (major.value, minor.value), sms.value,
                        _uuid(lib, dev)))
    return Probe(tuple(gpus))


def _error_name(lib: ctypes.CDLL, rc: int) -> str:
    ptr = ctypes.c_char_p()
    try:
        if lib.cuGetErrorName(rc, ctypes.byref(ptr)) == 0 and ptr.value:
            return ptr.value.decode()
    except AttributeError:
        pass
    return str(rc)


def _uuid(lib: ctypes.CDLL, dev: ctypes.c_int) -> str:
    raw = ctypes.create_string_buffer(16)
    for name in ("cuDeviceGetUuid_v2", "cuDeviceGetUuid"):
        fn = getattr(lib, name, None)
        if fn is not None and fn(raw, dev) == 0:
            h = raw.raw.hex()
            return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    return ""
