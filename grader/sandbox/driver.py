"""The few CUDA driver API calls the learner's process needs, through ctypes on libcuda.

The learner's process imports neither PyTorch nor CuPy, so no vendor library (cuBLAS, cuDNN) is
loaded in it for the learner's code to find: it maps the grader's buffers (CUDA IPC), times one
call between two events and synchronizes. The learner's own library links its CUDA runtime
statically; both use the device's primary context, so the pointers mapped here are valid there.
"""
from __future__ import annotations

import ctypes
import ctypes.util

CUresult = ctypes.c_int
CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1
CU_EVENT_DEFAULT = 0
IPC_HANDLE_BYTES = 64


class CudaError(Exception):
    """A driver call failed; ``name`` is the CUDA_ERROR_* name."""

    def __init__(self, name: str, text: str, call: str):
        super().__init__(f"{name}: {text} (in {call})")
        self.name, self.text, self.call = name, text, call


class IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * IPC_HANDLE_BYTES)]


def _load() -> ctypes.CDLL:
    for name in ("libcuda.so.1", ctypes.util.find_library("cuda") or "libcuda.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise CudaError("CUDA_ERROR_NOT_FOUND", "the CUDA driver (libcuda.so.1) was not found", "dlopen")


class Driver:
    """One device's primary context, made current in this process."""

    def __init__(self, device: int):
        self.lib = _load()
        self._check(self.lib.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self._check(self.lib.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
        self.device = dev.value
        ctx = ctypes.c_void_p()
        self._check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), self.device), "cuDevicePrimaryCtxRetain")
        self._check(self.lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        self.start, self.end = self._event(), self._event()

    def _event(self) -> ctypes.c_void_p:
        event = ctypes.c_void_p()
        self._check(self.lib.cuEventCreate(ctypes.byref(event), CU_EVENT_DEFAULT), "cuEventCreate")
        return event

    def error_name(self, code: int) -> tuple[str, str]:
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        self.lib.cuGetErrorName(code, ctypes.byref(name))
        self.lib.cuGetErrorString(code, ctypes.byref(text))
        return ((name.value or b"CUDA_ERROR_UNKNOWN").decode(errors="replace"),
                (text.value or b"").decode(errors="replace"))

    def _check(self, code: int, call: str) -> None:
        if code != 0:
            raise CudaError(*self.error_name(code), call)

    def open_ipc(self, handle: bytes) -> int:
        """Map another process's allocation into this one; returns its address here."""
        if len(handle) != IPC_HANDLE_BYTES:
            raise CudaError("CUDA_ERROR_INVALID_VALUE", f"an IPC handle has {IPC_HANDLE_BYTES} bytes, not "
                            f"{len(handle)}", "cuIpcOpenMemHandle")
        ptr = ctypes.c_uint64()
        # Copied into the structure itself: its char-array field reads back as a bytes copy.
        h = IpcHandle.from_buffer_copy(handle)
        self._check(self.lib.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                    "cuIpcOpenMemHandle")
        return ptr.value

    def record(self, event: ctypes.c_void_p) -> None:
        self._check(self.lib.cuEventRecord(event, None), "cuEventRecord")

    def elapsed_s(self) -> float:
        ms = ctypes.c_float()
        elapsed = getattr(self.lib, "cuEventElapsedTime_v2", None) or self.lib.cuEventElapsedTime
        self._check(elapsed(ctypes.byref(ms), self.start, self.end), "cuEventElapsedTime")
        return ms.value * 1e-3

    def synchronize(self) -> None:
        self._check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")
