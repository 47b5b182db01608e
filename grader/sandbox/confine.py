"""Confining the learner's process before its library is loaded: what it may open and call.

Two kernel mechanisms, each applied where the platform has it, and both inherited by every
thread and child process the learner's code might start:

- **Landlock** (Linux 5.13 and later): the process may write only into its own scratch folder
  and the GPU's device files, and may read only the files it had mapped when it was confined
  (the C/C++ runtimes and the CUDA driver), its scratch folder (where its copy of the learner's
  library lies) and the system's /proc, /sys, /dev and /etc. So it can neither rewrite the
  course (a reference, a test, a cached library) nor open a vendor library such as cuBLAS. A
  Landlock domain also stops it from tracing or writing the memory of any process outside it.
- **seccomp** (x86-64): the calls that reach other processes or the network fail with EPERM:
  ptrace, process_vm_readv/writev, sockets, pidfd_getfd, and signals to any process but itself.

What was applied is reported to the grader, which shows it; where neither exists the grade still
comes from the trusted side (inputs, references, comparisons, baselines, clocks) alone.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from dataclasses import dataclass, field

# --------------------------------------------------------------------------- Landlock

_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV   # what a rule on a file may grant
_READ = EXECUTE | READ_FILE | READ_DIR
_WRITE = (WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO
          | MAKE_BLOCK | MAKE_SYM | REFER | TRUNCATE | IOCTL_DEV)

# Read-only trees the CUDA driver consults while it runs (device nodes, PCI topology, its
# /proc/driver/nvidia files, the dynamic linker's configuration).
SYSTEM_READ = ("/proc", "/sys", "/etc")
DEVICES = "/dev"


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers, 0 where there is none."""
    if platform.system() != "Linux":
        return 0
    version = _libc().syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                              ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def _handled(abi: int) -> int:
    rights = _READ | _WRITE
    if abi < 2:
        rights &= ~REFER
    if abi < 3:
        rights &= ~TRUNCATE
    if abi < 5:
        rights &= ~IOCTL_DEV
    return rights


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _landlock(scratch: str, readable: list[str], writes_only: bool = False) -> str:
    """Apply the Landlock rules; returns what was applied, or "" where there is no Landlock. With
    ``writes_only``, reading stays free and only writing is confined (to ``scratch``, which may
    name several folders separated by os.pathsep, and the device files)."""
    abi = landlock_abi()
    if abi < 1:
        return ""
    libc = _libc()
    handled = _handled(abi) & (_WRITE if writes_only else ~0)
    scoped = (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 and not writes_only else 0
    attr = struct.pack("QQQ", handled, 0, scoped) if abi >= 6 else struct.pack("Q", handled)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        grants = [] if writes_only else [(p, _READ) for p in (*SYSTEM_READ, *readable)]
        grants += [(DEVICES, _READ | _WRITE)] + [(p, _READ | _WRITE) for p in scratch.split(os.pathsep) if p]
        for path, rights in grants:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue             # a path this machine does not have
            try:
                allowed = rights & handled
                if not os.path.isdir(path):
                    allowed &= _FILE_RIGHTS
                if not allowed:
                    continue
                rule = _PathBeneath(allowed, fd)
                if libc.syscall(_SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                                ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule({path}): "
                                                      f"{os.strerror(ctypes.get_errno())}")
            finally:
                os.close(fd)
        if libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            raise OSError(ctypes.get_errno(), f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return f"Landlock ABI {abi}" + (" (signals and abstract sockets scoped)" if scoped else "") + (
        " (writes only)" if writes_only else "")


# --------------------------------------------------------------------------- seccomp

_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_JGE_K, _BPF_RET_K = 0x20, 0x15, 0x35, 0x06
# offsets into struct seccomp_data
_NR, _ARCH, _ARG0_LOW = 0, 4, 16

# x86-64 system call numbers
_DENIED_X86_64 = {
    "socket": 41, "connect": 42, "socketpair": 53, "ptrace": 101, "process_vm_readv": 310,
    "process_vm_writev": 311, "kcmp": 312, "pidfd_open": 434, "pidfd_getfd": 438,
    "pidfd_send_signal": 424, "tkill": 200, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
    "mount": 165, "umount2": 166, "pivot_root": 155, "setns": 308, "unshare": 272, "keyctl": 250,
    "add_key": 248, "request_key": 249, "open_by_handle_at": 304, "name_to_handle_at": 303,
}
# kill(pid, ...), tgkill(tgid, ...), rt_sigqueueinfo(pid, ...), rt_tgsigqueueinfo(tgid, ...):
# allowed only towards this process itself (abort(), raise() and pthread_kill() use them).
_OWN_PID_ONLY_X86_64 = {"kill": 62, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297}


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def _program(pid: int) -> list[tuple[int, int, int, int]]:
    deny = _RET_ERRNO | errno.EPERM
    prog = [(_BPF_LD_W_ABS, 0, 0, _ARCH),
            (_BPF_JEQ_K, 1, 0, _AUDIT_ARCH_X86_64),
            (_BPF_RET_K, 0, 0, deny),                       # another ABI (i386 calls): refused
            (_BPF_LD_W_ABS, 0, 0, _NR),
            (_BPF_JGE_K, 0, 1, _X32_BIT),
            (_BPF_RET_K, 0, 0, deny)]                       # the x32 ABI: refused
    for nr in sorted(_DENIED_X86_64.values()):
        prog += [(_BPF_JEQ_K, 0, 1, nr), (_BPF_RET_K, 0, 0, deny)]
    for nr in sorted(_OWN_PID_ONLY_X86_64.values()):
        # nr matches: load the low half of the first argument; its own pid: allow, else deny.
        prog += [(_BPF_JEQ_K, 0, 4, nr),
                 (_BPF_LD_W_ABS, 0, 0, _ARG0_LOW),
                 (_BPF_JEQ_K, 0, 1, pid & 0xFFFFFFFF),
                 (_BPF_RET_K, 0, 0, _RET_ALLOW),
                 (_BPF_RET_K, 0, 0, deny)]
    prog.append((_BPF_RET_K, 0, 0, _RET_ALLOW))
    return prog


def _seccomp() -> str:
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return ""
    prog = _program(os.getpid())
    filters = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), filters)
    libc = _libc()
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"seccomp: {os.strerror(ctypes.get_errno())}")
    return "seccomp"


# --------------------------------------------------------------------------- both

@dataclass
class Confinement:
    applied: list[str] = field(default_factory=list)      # "Landlock ABI 6", "seccomp"
    missing: list[str] = field(default_factory=list)      # why a mechanism is not there

    def describe(self) -> str:
        if not self.applied:
            return "not confined (" + "; ".join(self.missing) + ")"
        return " + ".join(self.applied) + (f" (not: {'; '.join(self.missing)})" if self.missing else "")


def mapped_files() -> list[str]:
    """The files this process has mapped now: its interpreter, C/C++ runtimes, the CUDA driver."""
    files = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/"):
                path = parts[5].strip()
                if not path.endswith(" (deleted)"):
                    files.add(path)
    return sorted(files)


def confine(scratch: str, readable: list[str]) -> Confinement:
    """Confine this process for good: no new privileges, then Landlock, then seccomp."""
    result = Confinement()
    if platform.system() != "Linux":
        result.missing.append(f"{platform.system()} has neither Landlock nor seccomp")
        return result
    if _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        result.missing.append("no_new_privs refused")
        return result
    try:
        done = _landlock(scratch, [*mapped_files(), *readable])
        (result.applied if done else result.missing).append(done or "this kernel has no Landlock")
    except OSError as exc:
        result.missing.append(f"Landlock failed: {exc.strerror or exc}")
    try:
        done = _seccomp()
        (result.applied if done else result.missing).append(done or f"no seccomp filter for {platform.machine()}")
    except OSError as exc:
        result.missing.append(f"seccomp failed: {exc.strerror or exc}")
    return result


def confine_writes(writable: list[str]) -> Confinement:
    """For a process that runs learner code under a profiler or a sanitizer, which inject their own
    libraries and talk to their front end: only writing is confined, to these folders and the
    device files, so that the course and the build cache stay as they are."""
    result = Confinement()
    if platform.system() != "Linux" or _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        result.missing.append("no Landlock here")
        return result
    try:
        done = _landlock(os.pathsep.join(writable), [], writes_only=True)
        (result.applied if done else result.missing).append(done or "this kernel has no Landlock")
    except OSError as exc:
        result.missing.append(f"Landlock failed: {exc.strerror or exc}")
    return result
