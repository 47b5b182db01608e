"""The learner's process confines itself before it loads learner code (grader.sandbox.confine).

Run without a GPU: a child process confines itself exactly as the learner's process does, then
tries what a submission might try. Where the kernel has no Landlock the tests say so and skip.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from grader.protocol import Done, TaskStart, parse_event
from grader.sandbox.confine import landlock_abi
from grader.spec import repo_root

needs_landlock = pytest.mark.skipif(landlock_abi() < 1, reason="this kernel has no Landlock (Linux 5.13 or newer)")

PROBE = textwrap.dedent('''
    import ctypes, json, os, socket, sys
    from grader.sandbox.serve import confine_for_learner
    scratch, course, other_pid, built = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if built:
        with open(built, "rb") as src, open(os.path.join(scratch, "learner1.so"), "wb") as dst:
            dst.write(src.read())                                       # as the checker copies it
    def unmapped_library():
        """A system library this process has not mapped: the loader could open it before."""
        from grader.sandbox.confine import mapped_files
        mapped = {os.path.realpath(f) for f in mapped_files()}
        for folder in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"):
            for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
                path = os.path.realpath(os.path.join(folder, name))
                runtime = name.startswith(("libstdc++", "libgcc_s", "libm.", "libc.", "ld-"))
                if ".so" in name and not runtime and path not in mapped and os.path.isfile(path):
                    return path
    other_library = unmapped_library()
    confinement = confine_for_learner(scratch)
    def attempt(action):
        try:
            action()
            return "allowed"
        except OSError as exc:
            return "denied"
    results = {
        "applied": confinement.applied,
        "write the course": attempt(lambda: open(os.path.join(course, "README.md"), "a")),
        "read the course": attempt(lambda: open(os.path.join(course, "README.md")).read(1)),
        "write its scratch folder": attempt(lambda: open(os.path.join(scratch, "out.txt"), "w").write("x")),
        "read /etc": attempt(lambda: open("/etc/passwd").read(1)),
        "open a socket": attempt(lambda: socket.socket(socket.AF_UNIX)),
        "signal another process": attempt(lambda: os.kill(other_pid, 0)),
        "signal itself": attempt(lambda: os.kill(os.getpid(), 0)),
        "read its parent's memory": attempt(lambda: open(f"/proc/{os.getppid()}/mem", "rb")),
        "read a library it had not mapped": attempt(lambda: open(other_library, "rb").read(1)),
        "load the learner's library": attempt(lambda: ctypes.CDLL(os.path.join(scratch, "learner1.so")))
                                      if built else "not built",
    }
    print(json.dumps(results))
''')


NVCC_LEARNER = textwrap.dedent('''
    #include <vector>
    __global__ void add(const float* a, const float* b, float* c, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) c[i] = a[i] + b[i];
    }
    extern "C" void vector_add(const float* a, const float* b, float* c, int n) {
        std::vector<int> grid{(n + 255) / 256};
        add<<<grid[0], 256>>>(a, b, c, n);
    }
''')


@pytest.fixture(scope="module")
def attempts(tmp_path_factory: pytest.TempPathFactory) -> dict:
    scratch = tmp_path_factory.mktemp("scratch")
    built = ""
    if shutil.which("nvcc"):
        # A learner's library as the grader builds it: C++ and the static CUDA runtime.
        source = tmp_path_factory.mktemp("learner") / "vector_add.cu"
        source.write_text(NVCC_LEARNER)
        built = str(source.with_suffix(".so"))
        subprocess.run(["nvcc", "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-arch=sm_90",
                        "-o", built, str(source)], check=True, capture_output=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        out = subprocess.run([sys.executable, "-c", PROBE, str(scratch), str(repo_root()), str(other.pid), built],
                             capture_output=True, text=True, timeout=60, cwd=str(scratch),
                             env={**os.environ, "PYTHONPATH": str(repo_root())})
    finally:
        other.kill()
        other.wait()
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@needs_landlock
def test_the_learners_process_cannot_touch_the_course_or_other_processes(attempts: dict) -> None:
    assert any(a.startswith("Landlock") for a in attempts["applied"])
    assert attempts["write the course"] == "denied"
    assert attempts["read the course"] == "denied"          # the hidden solutions live beside it
    assert attempts["read a library it had not mapped"] == "denied"
    assert attempts["read its parent's memory"] == "denied"


@needs_landlock
def test_the_learners_process_keeps_what_it_needs(attempts: dict) -> None:
    assert attempts["write its scratch folder"] == "allowed"
    assert attempts["read /etc"] == "allowed"
    assert attempts["signal itself"] == "allowed"           # abort() and raise() signal the process itself


@needs_landlock
def test_a_library_built_by_nvcc_loads_in_the_confined_process(attempts: dict) -> None:
    """It links libstdc++ and libgcc_s, which the confined process may no longer open: they are
    loaded before the confinement."""
    if attempts["load the learner's library"] == "not built":
        pytest.skip("nvcc is not on PATH")
    assert attempts["load the learner's library"] == "allowed"


@pytest.mark.skipif(not (sys.platform.startswith("linux") and os.uname().machine == "x86_64"),
                    reason="the seccomp filter is written for Linux on x86-64")
def test_sockets_and_signals_to_others_are_refused(attempts: dict) -> None:
    assert "seccomp" in attempts["applied"]
    assert attempts["open a socket"] == "denied"
    assert attempts["signal another process"] == "denied"


def test_an_event_the_worker_did_not_sign_is_not_read() -> None:
    key = "k" * 32
    signed = TaskStart("vector_add").to_line(key)
    assert parse_event(signed, key) == TaskStart("vector_add")
    assert parse_event(TaskStart("vector_add").to_line(), key) is None            # unsigned
    assert parse_event(Done().to_line("another key"), key) is None                 # signed with another key
    forged = signed.replace("vector_add", "transpose")
    assert parse_event(forged, key) is None                                       # changed after signing


def test_the_learners_process_says_plainly_when_cuda_cannot_start(tmp_path: Path) -> None:
    """Without a driver (this machine, CI) the process reports it in one line instead of dying."""
    if Path("/dev/nvidiactl").exists():
        pytest.skip("a GPU driver is present; the GPU tests start this process for real")
    read_fd, write_fd = os.pipe()
    env = {**os.environ, "PYTHONPATH": str(repo_root()), "S2S_SANDBOX_SCRATCH": str(tmp_path),
           "S2S_SANDBOX_REPLIES": str(write_fd)}
    proc = subprocess.run([sys.executable, "-m", "grader.sandbox"], env=env, pass_fds=(write_fd,), timeout=60,
                          stdin=subprocess.DEVNULL, capture_output=True)
    os.close(write_fd)
    with os.fdopen(read_fd) as replies:
        reply = json.loads(replies.readline())
    assert proc.returncode == 3
    assert reply["error"].startswith("CUDA could not start")


def test_without_cuda_ipc_the_checker_grades_in_process_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """A platform where the learner's process cannot map the checker's memory (no CUDA IPC) grades
    as before, in the checker, and the isolation event says what protection is lost."""
    from grader.protocol import Isolation, Job
    from grader.worker import loop
    from grader.worker.foreign import Watch

    class NoIpc:
        def __init__(self, device: int, arena: object, wait: bool = True) -> None:
            raise RuntimeError("cuIpcOpenMemHandle: operation not supported")

    monkeypatch.setattr(loop, "Sandbox", NoIpc)
    monkeypatch.setattr(loop, "Arena", lambda nbytes: object())
    monkeypatch.setattr(loop, "Entry", lambda library, task: ("in-process", library))
    events: list = []
    learners = loop.Learners(Job("grade", "/nowhere", [], 1, {}), Watch(reason="no GPU here"), events.append)
    assert learners.load("lib.so", None) == ("in-process", "lib.so")
    assert not learners.remote
    assert len(events) == 1 and isinstance(events[0], Isolation) and not events[0].separate
    assert "runs inside the checker" in events[0].detail and "operation not supported" in events[0].detail
    learners.load("lib2.so", None)
    assert len(events) == 1                    # said once a grading


def test_once_a_learners_process_has_run_its_code_never_moves_into_the_checker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process fallback is for a platform without CUDA IPC, decided before any learner code
    runs. When a fresh learner's process cannot start later in the grading (what the last one left
    behind may be the cause), the task fails as a crash, and the next tasks still get none."""
    from grader.protocol import Isolation, Job
    from grader.worker import loop
    from grader.worker.foreign import Watch
    from grader.worker.remote import SandboxDied

    started: list = []

    class OnlyOnce:
        def __init__(self, device: int, arena: object, wait: bool = True) -> None:
            if started:
                raise RuntimeError("cuIpcOpenMemHandle: out of memory")
            started.append(self)
            self.alive, self.ready, self.pid, self.confinement = True, False, 4242, "confined"

        def wait_ready(self) -> None:
            self.ready = True

        def load(self, library: str, task: object) -> str:
            return f"remote {library}"

        def close(self) -> None:
            self.alive = False

    monkeypatch.setattr(loop, "Sandbox", OnlyOnce)
    monkeypatch.setattr(loop, "Arena", lambda nbytes: object())
    monkeypatch.setattr(loop, "_not_dumpable", lambda: None)
    calibrated: list = []
    monkeypatch.setattr(loop, "calibrate", lambda sandbox: calibrated.append(sandbox) or 3e-4)
    monkeypatch.setattr(loop, "Entry", lambda library, task: pytest.fail("the learner's code was loaded here"))
    events: list = []
    learners = loop.Learners(Job("grade", "/nowhere", [], 1, {}), Watch(reason="no GPU here"), events.append)
    learners.watch.adopt = lambda pid: None
    assert learners.load("lib.so", None) == "remote lib.so"
    learners.lost()                            # the learner's process crashed
    for library in ("lib2.so", "lib3.so"):
        with pytest.raises(SandboxDied, match="could not be started.*out of memory"):
            learners.load(library, None)
        assert learners.remote
    assert [type(e) for e in events] == [Isolation] and events[0].separate
    assert calibrated == started and started[0].switch_s == 3e-4     # measured once, before any load


def test_a_gpu_that_will_not_switch_between_the_processes_grades_in_process_and_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker times the learner's process by the pauses it sees in its own context. Where the
    GPU runs both at once (MPS), it sees none, before any learner code has loaded: the grading
    falls back to the checker's process, closes the learner's, and the report says why."""
    from grader.protocol import Isolation, Job
    from grader.worker import loop, observer as observing
    from grader.worker.foreign import Watch

    closed: list = []

    class Ready:
        def __init__(self, device: int, arena: object, wait: bool = True) -> None:
            self.alive, self.ready, self.pid = True, True, 4242

        def wait_ready(self) -> None:
            pass

        def request(self, **fields: object) -> dict:
            return {"event_s": 1e-6}

        def close(self) -> None:
            closed.append(self)

    class NoPauses:
        def observe(self, call):
            return call(), observing.Gaps(0.0, 0)

    monkeypatch.setattr(loop, "Sandbox", Ready)
    monkeypatch.setattr(loop, "Arena", lambda nbytes: object())
    monkeypatch.setattr(observing, "observer", NoPauses)
    monkeypatch.setattr(loop, "Entry", lambda library, task: ("in-process", library))
    events: list = []
    learners = loop.Learners(Job("grade", "/nowhere", [], 1, {}), Watch(reason="no GPU here"), events.append)
    assert learners.load("lib.so", None) == ("in-process", "lib.so")
    assert closed and [type(e) for e in events] == [Isolation] and not events[0].separate
    assert "without switching away from the grader's own work (is MPS running?)" in events[0].detail


@pytest.mark.parametrize("where", ["learner", "checker"])
def test_a_cuda_error_replaces_only_the_process_whose_context_it_broke(
        monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """A CUDA error in the learner's process fails that task and the next task gets a fresh
    learner's process. One in the checker's own context (its synchronisation, its baseline) ends
    this worker after the task, so that the rest are graded by a fresh one, not by a dead context."""
    from grader.protocol import Done, Job, TaskDone
    from grader.worker import loop
    from grader.worker.entry import RemoteSticky, Sticky
    from grader.worker.foreign import Watch

    error = RemoteSticky if where == "learner" else Sticky

    def run_task(emit, job, exercise, name, ceilings, watch, learners):
        if name == "a":
            raise error("cudaErrorIllegalAddress: an illegal memory access was encountered")
        return loop.TaskOutcome(name)

    lost: list = []
    learners = SimpleNamespace(remote=True, stage="checking", lost=lambda: lost.append(1))
    monkeypatch.setattr(loop, "run_task", run_task)
    events: list = []
    code = loop._grade_tasks(events.append, Job("grade", "/nowhere", ["a", "b"], 1, {}), None, {},
                             Watch(reason="no GPU here"), learners)
    done = [e for e in events if isinstance(e, TaskDone)]
    assert done[0].result.error.kind == "cuda error" and "illegal memory access" in done[0].result.error.message
    if where == "learner":
        assert code == 0 and lost and not done[0].sticky
        assert [d.task for d in done] == ["a", "b"] and isinstance(events[-1], Done)
    else:
        assert code == 1 and done[0].sticky and [d.task for d in done] == ["a"]


def test_s2s_sandbox_0_keeps_the_learners_code_in_the_checker(monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.protocol import Job
    from grader.worker import loop
    from grader.worker.foreign import Watch

    def no_sandbox(*args: object, **kwargs: object) -> None:
        raise AssertionError("no separate process was asked for")

    monkeypatch.setenv("S2S_SANDBOX", "0")
    monkeypatch.setattr(loop, "Sandbox", no_sandbox)
    monkeypatch.setattr(loop, "Entry", lambda library, task: "in-process")
    events: list = []
    learners = loop.Learners(Job("grade", "/nowhere", [], 1, {}), Watch(reason="no GPU here"), events.append)
    learners.prestart()
    assert learners.load("lib.so", None) == "in-process"
    assert [e.detail for e in events] == ["the learner's code runs inside the checker, because S2S_SANDBOX=0 asked for it"]


# --------------------------------------------------------------------------- the checker's side

LEARNER_C = r"""
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* What a learner's library might do on a call, chosen by n. */
void vector_add(const float* a, const float* b, float* c, int n) {
    if (n == 13) abort();
    if (n == 14) _exit(0);
    if (n == 15) {                       /* answers in the grader's stead, with a time of its choosing */
        const char* forged = "{\"event_s\": 1e-09, \"launch_error\": null}\n";
        write(atoi(getenv("S2S_SANDBOX_REPLIES")), forged, strlen(forged));
    }
    if (n == 16) {
        const char* garbage = "all tests passed\n";
        write(atoi(getenv("S2S_SANDBOX_REPLIES")), garbage, strlen(garbage));
    }
}
"""


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import shutil
    from grader.worker import remote
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler on PATH to build a stand-in for a learner's library")
    source = tmp_path / "learner.c"
    source.write_text(LEARNER_C)
    library = tmp_path / "learner.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    monkeypatch.setattr(remote, "SANDBOX_MODULE", "tests.fake_sandbox")
    monkeypatch.setenv("PYTHONPATH", str(repo_root()))

    class NoArena:
        def ipc_handle(self) -> str:
            return "00" * 64

    box = remote.Sandbox(0, NoArena())
    yield box, str(library)
    box.close()


def _task():
    from grader.spec import find
    return find("01").task("vector_add")


def test_the_checker_calls_the_learners_function_in_its_own_process(sandbox) -> None:
    box, library = sandbox
    entry = box.load(library, _task())
    entry([0, 0, 0, 1])
    assert entry.launch_problem() is None
    assert entry.timed([0, 0, 0, 1]) == pytest.approx(1e-3)
    assert entry.timed(None) == pytest.approx(1e-3)          # an empty call, for the checker's clock
    assert box.alive


def test_a_missing_function_is_named(sandbox) -> None:
    import dataclasses
    box, library = sandbox
    with pytest.raises(LookupError):
        box.load(library, dataclasses.replace(_task(), symbol="vector_ad"))


@pytest.mark.parametrize("n, says", [(13, "killed by SIGABRT"), (14, "exited with status 0")])
def test_a_learner_process_that_dies_costs_its_task_a_crash(sandbox, n: int, says: str) -> None:
    from grader.worker.remote import SandboxDied
    box, library = sandbox
    entry = box.load(library, _task())
    with pytest.raises(SandboxDied, match=says):
        entry([0, 0, 0, n])
    assert not box.alive


@pytest.mark.parametrize("n", [15, 16])
def test_what_the_learners_process_writes_into_the_channel_ends_it_as_a_crash(sandbox, n: int) -> None:
    """A reply the checker did not ask for, forged or garbled, is never taken for the answer to a
    request. (One forged with the right number is still only the events' hint, which the checker's
    own clock checks: grader.worker.timing.)"""
    from grader.worker.remote import SandboxDied
    box, library = sandbox
    entry = box.load(library, _task())
    with pytest.raises(SandboxDied, match="never asks for"):
        entry.timed([0, 0, 0, n])


def test_the_ipc_handle_reaches_the_driver_byte_for_byte() -> None:
    """The learner's process maps the grader's memory with the 64 bytes the grader exported; a
    handle of another length is refused before the driver sees it."""
    from grader.sandbox.driver import CudaError, Driver

    seen: list[bytes] = []

    class Lib:
        def cuIpcOpenMemHandle_v2(self, ptr, handle, flags):
            seen.append(bytes(handle))
            ptr._obj.value = 0x7F0000000000
            return 0

    driver = Driver.__new__(Driver)
    driver.lib = Lib()
    handle = bytes(range(1, 65))
    assert driver.open_ipc(handle) == 0x7F0000000000
    assert seen == [handle]
    with pytest.raises(CudaError, match="64 bytes, not 63"):
        driver.open_ipc(handle[:63])


def test_a_case_is_bound_at_the_arenas_address_in_the_learners_process(sandbox) -> None:
    """The case's buffers are carved out of the arena the learner's process mapped at start; the
    learner is handed the arena's base there plus each buffer's offset, and the checker's own
    addresses again once the call is over."""
    from types import SimpleNamespace

    from grader.worker.remote import SandboxDied
    box, library = sandbox
    entry = box.load(library, _task())
    assert entry.arena is box.arena

    class Memory:
        def __init__(self, offsets):
            self.bound: list[list] = []
            self.list = [SimpleNamespace(offset=o) for o in offsets]

        def buffers(self):
            return self.list

        def bind(self, bases):
            self.bound.append(list(bases))

    memory = Memory([0, 4096, 69632])
    with entry.attach(memory):
        assert memory.bound == [[box.arena_base, box.arena_base + 4096, box.arena_base + 69632]]
    assert memory.bound[-1] == [None, None, None]
    with pytest.raises(SandboxDied, match="outside the memory"):
        with entry.attach(Memory([0, None])):
            pass


def test_the_arena_lays_buffers_out_as_cudamalloc_would_and_always_has_room() -> None:
    """A large buffer carved from the arena starts on a 2 MiB boundary, like an allocation of its
    own; small ones pack at 256 bytes. The room reserved per buffer always covers the padding."""
    import random
    from grader.worker.memory import ALIGN, LARGE_ALIGN, _room, place

    rng = random.Random(7)
    offset, reserved = 0, 0
    for _ in range(500):
        nbytes = rng.choice([1, 300, 70_000, LARGE_ALIGN // 2, (256 << 20) + (128 << 10), 5 << 20])
        start, end = place(offset, nbytes)
        assert start >= offset and end - start >= nbytes and end % ALIGN == 0
        if nbytes >= LARGE_ALIGN // 2:
            assert start % LARGE_ALIGN == 0
        else:
            assert start == offset                            # small buffers pack
        offset, reserved = end, reserved + _room(nbytes)
        assert offset <= reserved


def _state(pid: int) -> str:
    """The process's state letter from /proc (T: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc (Linux)")
def test_between_requests_the_learners_process_is_stopped(sandbox) -> None:
    """No thread of the learner's process can start GPU work while the checker times the baseline:
    the process runs only from a request to its reply."""
    import time
    box, library = sandbox
    entry = box.load(library, _task())
    for _ in range(3):
        entry.timed([0, 0, 0, 1])
        deadline = time.monotonic() + 5
        while _state(box.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(box.pid) == "T"
    box.close()                                 # a stopped process still ends when told to
    assert not box.alive
