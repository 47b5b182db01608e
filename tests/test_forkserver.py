"""The fork server: a process that has imported the worker's libraries forks each grading's worker,
so a grading from the command line does not wait for those imports. Each worker is still a fresh
process; its exit status, its environment and its death with the grading are those of a worker the
grading started itself."""
from __future__ import annotations

import os
import time

import pytest

from grader import forkserver, runner
from grader.protocol import Libraries
from grader.spec import find


@pytest.fixture
def private_server(monkeypatch, tmp_path):
    """Fork servers of this test only: their own folder, a short idle time, the fake worker."""
    folder = tmp_path / "fs"
    monkeypatch.setenv("S2S_FORKSERVER", "1")
    monkeypatch.setenv("S2S_FORKSERVER_DIR", str(folder))
    monkeypatch.setenv("S2S_FORKSERVER_IDLE", "20")
    monkeypatch.setattr(runner, "WORKER_MODULE", "tests.fake_worker")
    parents = tmp_path / "parents"
    monkeypatch.setenv("S2S_FAKE_PARENT", str(parents))
    yield folder, parents           # the servers exit on their own after 20 idle seconds


def _grade():
    libs = {"vector_add": Libraries("/nonexistent/lib.so", "/nonexistent/base.so")}
    return runner.run_worker(find("01"), ["vector_add"], libs, seed=1)


def _parent_of_last(parents) -> int:
    return int(parents.read_text().split("\n")[-2].split()[1])


def _wait_for(path, seconds=60.0):
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.1)


def test_the_first_grading_starts_the_server_and_the_next_ones_are_forked_by_it(private_server):
    folder, parents = private_server
    first = _grade()
    assert first.results["vector_add"].correct
    assert _parent_of_last(parents) == os.getpid()          # no server yet: the grading's own child
    _wait_for(forkserver.socket_path())
    assert (folder.stat().st_mode & 0o777) == 0o700
    pids = set()
    for _ in range(2):
        outcome = _grade()
        assert not outcome.fatal and outcome.results["vector_add"].correct
        server = _parent_of_last(parents)
        assert server != os.getpid()
        pids.add(int(outcome.results["vector_add"].cases[0].label))
    assert len(pids) == 2                                    # a fresh process for every grading


def test_a_forked_worker_gets_the_gradings_environment_and_its_crash_is_reported(private_server, monkeypatch):
    _grade()
    _wait_for(forkserver.socket_path())
    monkeypatch.setenv("S2S_FAKE_CRASH", "1")                # read by the worker, after the fork
    outcome = _grade()
    assert _parent_of_last(private_server[1]) != os.getpid()
    assert outcome.fatal.startswith("the GPU worker failed before it graded anything (the process was killed "
                                    "by SIGSEGV"), outcome.fatal


def test_a_forked_worker_dies_with_the_grading_that_asked_for_it(private_server, tmp_path):
    _grade()
    path = forkserver.socket_path()
    _wait_for(path)
    log = open(tmp_path / "log", "wb")
    worker = forkserver.fork_worker(["tests.fake_worker", str(tmp_path / "events")], dict(os.environ),
                                    os.getcwd(), log.fileno())
    assert worker is not None and worker.poll() is None      # waiting for its job on stdin
    worker.close()                                           # the grading went away
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(worker.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the worker outlived the grading")


def test_no_server_is_used_in_a_folder_others_can_enter(private_server):
    folder, parents = private_server
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    assert forkserver.fork_worker(["tests.fake_worker", "x"], {}, "/", 1) is None
    assert _grade().results["vector_add"].correct
    assert _parent_of_last(parents) == os.getpid()
    assert not list(folder.glob("*.sock"))


def test_an_idle_server_exits_and_removes_its_socket(private_server, monkeypatch):
    monkeypatch.setenv("S2S_FORKSERVER_IDLE", "1")
    _grade()
    path = forkserver.socket_path()
    _wait_for(path)
    deadline = time.monotonic() + 30
    while path.exists():
        assert time.monotonic() < deadline, "the idle server did not exit"
        time.sleep(0.2)
