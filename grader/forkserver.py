"""A fork server: one process that has imported PyTorch and CuPy forks each grading's worker, so
that a grading started from the command line does not wait seconds for those imports.

Every worker is still a fresh process that has run no learner code: the server itself runs none
and never touches the GPU (neither import creates a CUDA context), and it forks once per worker.
It listens on a Unix socket in a folder only its user may enter, is keyed by the Python, the
grader's own sources and the module search path (a changed grader gets a new server), and exits
after IDLE_S without a request. A grading that finds no server starts one for the next grading and
starts its own worker as before. ``S2S_FORKSERVER=0`` turns it off.

    python -m grader.forkserver SOCKET        (started by grader.runner, detached)

One request per connection: the client sends the worker's argv, environment and folder as JSON
with two file descriptors (the worker's stdin, and the file for its stdout and stderr); the server
answers the worker's process id, then, once it has exited, its wait status. The worker dies with
the connection: a grading killed outright does not leave its worker on the GPU.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

IDLE_S = 900.0                      # seconds a server waits for its next request (S2S_FORKSERVER_IDLE)
CONNECT_TIMEOUT_S = 2.0


def enabled() -> bool:
    return os.environ.get("S2S_FORKSERVER", "1") != "0" and sys.platform.startswith("linux")


def socket_path() -> Path:
    """Where this Python and this grader's server listens."""
    folder = Path(os.environ.get("S2S_FORKSERVER_DIR") or Path(tempfile.gettempdir()) / f"s2s-forkserver-{os.getuid()}")
    return folder / f"{_grader_key(sys.executable, os.environ.get('PYTHONPATH', ''))}.sock"


@functools.cache
def _grader_key(python: str, pythonpath: str) -> str:
    """The Python, its module path and the grader's sources as this process loaded them: read
    once a process, since a source changed later on disk is not what this process runs."""
    digest = hashlib.sha256(python.encode())
    digest.update(pythonpath.encode())
    for source in sorted(Path(__file__).parent.rglob("*.py")):
        stat = source.stat()
        digest.update(f"{source}:{stat.st_mtime_ns}:{stat.st_size}".encode())
    return digest.hexdigest()[:16]


def _private_folder(folder: Path) -> bool:
    """The socket's folder exists, is ours and no one else's (made so if it did not exist)."""
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    stat = folder.lstat()
    return stat.st_uid == os.getuid() and (stat.st_mode & 0o777) == 0o700 and not folder.is_symlink()


# ---------------------------------------------------------------------------- client side

class Forked:
    """A worker forked by the server, with what the runner uses of a subprocess.Popen."""

    def __init__(self, conn: socket.socket, pid: int, stdin_fd: int, args: list[str]):
        self.conn, self.pid, self.args = conn, pid, args
        self.stdin = os.fdopen(stdin_fd, "wb")
        self.returncode: int | None = None
        self._buffer = b""

    def poll(self) -> int | None:
        if self.returncode is None:
            self._receive(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._receive(left)
        return self.returncode

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)

    def close(self) -> None:
        self.conn.close()

    def _receive(self, timeout: float | None) -> None:
        self.conn.settimeout(timeout)
        try:
            chunk = self.conn.recv(4096)
        except (BlockingIOError, TimeoutError, socket.timeout):
            return
        except OSError:
            chunk = b""
        if not chunk:               # the server went away: the worker went with it
            self.returncode = self.returncode if self.returncode is not None else -signal.SIGKILL
            return
        self._buffer += chunk
        if b"\n" in self._buffer:
            status = json.loads(self._buffer.split(b"\n", 1)[0])["status"]
            self.returncode = os.waitstatus_to_exitcode(status)


def fork_worker(argv: list[str], env: dict[str, str], cwd: str, log_fd: int) -> Forked | None:
    """A worker from the running server, or None when there is none (one is then started for the
    next grading)."""
    path = socket_path()
    if not _private_folder(path.parent):
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(CONNECT_TIMEOUT_S)
    try:
        conn.connect(str(path))
    except OSError:
        conn.close()
        start_server(path, env)
        return None
    read_fd, write_fd = os.pipe()
    try:
        request = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()
        socket.send_fds(conn, [request], [read_fd, log_fd])
        conn.settimeout(CONNECT_TIMEOUT_S)
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = conn.recv(4096)
            if not chunk:
                raise OSError("the fork server closed the connection")
            reply += chunk
        pid = json.loads(reply)["pid"]
    except (OSError, ValueError, KeyError):
        conn.close()
        os.close(write_fd)
        return None
    finally:
        os.close(read_fd)
    return Forked(conn, pid, write_fd, argv)


def start_server(path: Path, env: dict[str, str]) -> None:
    """Start a server, detached, in the workers' environment (where the grader can be imported):
    it outlives this grading and serves the next ones."""
    with contextlib.suppress(OSError):
        subprocess.Popen([sys.executable, "-m", "grader.forkserver", str(path)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                         close_fds=True, env=env)


# ---------------------------------------------------------------------------- server side

def _warm() -> None:
    """What every worker imports, imported once here. Neither import initialises CUDA."""
    for module in ("torch", "cupy", "grader.worker.loop", "grader.worker.timing", "grader.worker.checking"):
        with contextlib.suppress(Exception):
            __import__(module)


def serve(path: Path) -> None:
    if not _private_folder(path.parent):
        return
    _warm()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lock = path.with_suffix(".starting")
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)   # one server per path
    except FileExistsError:
        if time.time() - lock.stat().st_mtime < 60:
            return
        lock.unlink(missing_ok=True)
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)
    try:
        path.unlink(missing_ok=True)
        listener.bind(str(path))
        listener.listen(16)
        _loop(listener)
    finally:
        path.unlink(missing_ok=True)
        lock.unlink(missing_ok=True)
        listener.close()


def _loop(listener: socket.socket) -> None:
    idle_s = float(os.environ.get("S2S_FORKSERVER_IDLE") or IDLE_S)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    last = time.monotonic()
    while children or time.monotonic() - last < idle_s:
        for key, _ in selector.select(timeout=max(0.5, idle_s - (time.monotonic() - last))):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                last = time.monotonic()
                pid = _fork(conn, listener)
                if pid is not None:
                    children[pid] = conn
            else:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"status": status}).encode() + b"\n")
                conn.close()
            last = time.monotonic()


def _fork(conn: socket.socket, listener: socket.socket) -> int | None:
    try:
        conn.settimeout(CONNECT_TIMEOUT_S)
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 2)
        request = json.loads(message)
        if len(fds) != 2:
            raise ValueError("two file descriptors expected")
    except (OSError, ValueError):
        conn.close()
        return None
    pid = os.fork()
    if pid == 0:
        listener.close()
        _become_worker(conn, fds, request)
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    except OSError:
        os.kill(pid, signal.SIGKILL)
    return pid


def _become_worker(conn: socket.socket, fds: list[int], request: dict[str, Any]) -> None:
    """In the forked child: the worker's streams, session, folder, environment and limits, then
    the worker itself. Never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        stdin_fd, log_fd = fds
        os.dup2(stdin_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(stdin_fd)
        os.close(log_fd)
        os.setsid()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        from grader.crash import cap_output
        cap_output()
        _die_with(conn)
        sys.stdin = open(0, encoding="utf-8", closefd=False)
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", closefd=False)
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)
        argv = request["argv"]
        sys.argv = argv
        import runpy
        runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the worker's own crash, shown in its output
        import traceback
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _die_with(conn: socket.socket) -> None:
    """A thread that kills this worker when the grading that asked for it goes away (its end of the
    connection closes), as PR_SET_PDEATHSIG does for a worker that is the grading's own child."""
    import threading

    def watch() -> None:
        conn.settimeout(None)
        with contextlib.suppress(OSError):
            while conn.recv(4096):
                pass
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=watch, daemon=True).start()


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
