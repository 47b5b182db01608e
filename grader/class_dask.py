"""Where a class's gradings run: the GPUs of this host, and the Dask cluster (our own, one worker
pinned to each GPU, or a running scheduler's) that grades one submission per GPU at a time; with one
worker, this process grades them one after the other (see grader.class_grading)."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence

from grader.class_student import STOP_POLL_S, StudentJob, StudentOutcome, grade_student
from grader.course import CourseError

SCHEDULER_WAIT_S = 30.0             # how long to wait for a scheduler's first worker


# ================================================================== GPUs of this host

def visible_gpus(env: dict[str, str] | None = None) -> list[str]:
    """The GPUs gradings on this host may use, as CUDA_VISIBLE_DEVICES names them.

    Found without initialising CUDA: CUDA_VISIBLE_DEVICES when it is set, else ``nvidia-smi -L``,
    else NVML (nvidia-ml-py) if it is installed. Empty where there is none.
    """
    env = os.environ if env is None else env
    if "CUDA_VISIBLE_DEVICES" in env:
        return [d.strip() for d in env["CUDA_VISIBLE_DEVICES"].split(",") if d.strip() and not d.strip().startswith("-")]
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False)
        if listed.returncode == 0:
            found = parse_nvidia_smi(listed.stdout)
            if found:
                return found
    except (OSError, subprocess.TimeoutExpired):
        pass
    return _nvml_gpus()


def parse_nvidia_smi(text: str) -> list[str]:
    """UUIDs from ``nvidia-smi -L``: each GPU's, or its MIG instances' where it is partitioned."""
    gpus: list[list[str]] = []
    for line in text.splitlines():
        uuid_part = line.rsplit("(UUID: ", 1)[-1].rstrip(")").strip() if "(UUID: " in line else ""
        if line.startswith("GPU ") and uuid_part:
            gpus.append([uuid_part])
        elif line.strip().startswith("MIG ") and uuid_part and gpus:
            if gpus[-1][0].startswith("GPU-"):
                gpus[-1] = []
            gpus[-1].append(uuid_part)
    return [d for devices in gpus for d in devices]


def _nvml_gpus() -> list[str]:
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
        try:
            return [_text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)))
                    for i in range(pynvml.nvmlDeviceGetCount())]
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        return []


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def default_workers() -> int:
    """One worker per GPU of this host; one where none is found."""
    return max(1, len(visible_gpus()))


def pinned_env(worker: int | str, gpus: Sequence[str]) -> dict[str, str]:
    """The environment that pins worker number ``worker`` to its GPU (round robin past the last)."""
    if not gpus:
        return {}
    return {"CUDA_VISIBLE_DEVICES": gpus[int(worker) % len(gpus)]}


# ================================================================== the gradings, inline or on Dask

def inline(jobs: Sequence[StudentJob]) -> Iterator[StudentOutcome]:
    for job in jobs:
        yield grade_student(job)


def _stop_requested(name: str) -> Callable[[], bool]:
    def asked() -> bool:
        from distributed import Event
        try:
            return bool(Event(name).is_set())
        except Exception:   # noqa: BLE001 (a scheduler that does not answer is no reason to stop a grading)
            return False
    return asked


def _dask_task(job: StudentJob) -> StudentOutcome:
    return grade_student(job, _stop_requested(job.stop_event) if job.stop_event else None)


def connect(workers: int, scheduler: str | None, gpus: Sequence[str]):
    """A Dask client, and the cluster we started for it (None for a running scheduler)."""
    from distributed import Client, LocalCluster, Nanny

    if scheduler is None:
        class PinnedNanny(Nanny):
            """A nanny whose worker process sees one GPU: the one at its place in ``gpus``."""

            def __init__(self, *args, **kwargs):
                env = {**(kwargs.pop("env", None) or {}), **pinned_env(kwargs.get("name", 0), gpus)}
                super().__init__(*args, env=env, **kwargs)

        # Ctrl-C is the driver's to handle: the worker processes (and the nbgrader runs they start)
        # inherit an ignored SIGINT and are stopped by the driver, which waits for them.
        with _sigint_ignored():
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, resources={"GPU": 1},
                                   worker_class=PinnedNanny, dashboard_address=None)
        return Client(cluster), cluster
    try:
        client = Client(scheduler)
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        raise CourseError(f"could not reach the Dask scheduler at {scheduler} ({exc}); start one with "
                          "`dask scheduler` and give the address it prints (tcp://HOST:8786)") from None
    try:
        client.wait_for_workers(1, timeout=SCHEDULER_WAIT_S)
    except (TimeoutError, OSError):
        client.close()
        raise CourseError(f"the Dask scheduler at {scheduler} has no worker after {SCHEDULER_WAIT_S:g} s; start "
                          "one per GPU: `dask worker ADDRESS --nworkers 1 --nthreads 1 --resources GPU=1`") from None
    with_gpu = [w for w in client.scheduler_info()["workers"].values()
                if w.get("resources", {}).get("GPU", 0) >= 1]
    if not with_gpu:
        client.close()
        raise CourseError(f"no worker of the Dask scheduler at {scheduler} offers a GPU resource, so nothing "
                          "could run; start each worker with `--resources GPU=1`")
    return client, None


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@contextlib.contextmanager
def on_dask(client, jobs: Sequence[StudentJob], say: Callable[[str], None]) -> Iterator[Iterator[StudentOutcome]]:
    """The outcomes of ``jobs`` as they finish on the cluster; on an early exit, stops what runs."""
    from distributed import Event, as_completed, wait

    futures = []
    try:
        by_key = {}
        for job in jobs:
            key = f"autograde-{job.assignment}-{job.student}-{uuid.uuid4().hex[:8]}"
            future = client.submit(_dask_task, job, key=key, resources={"GPU": 1}, pure=False)
            futures.append(future)
            by_key[future.key] = job.student

        def outcomes() -> Iterator[StudentOutcome]:
            for future in as_completed(futures):
                try:
                    yield future.result()
                except Exception as exc:    # noqa: BLE001 (a worker died, a task could not run: that student only)
                    yield StudentOutcome(by_key[future.key], False,
                                         f"the Dask worker grading it failed: {type(exc).__name__}: {exc}")

        yield outcomes()
    finally:
        unfinished = [f for f in futures if not f.done()]
        if unfinished:
            # Stopped early (Ctrl-C): every grading under way stops its nbgrader and cleans its folder
            # within STOP_POLL_S; those not started return at once.
            say("stopping the gradings under way (a few seconds; Ctrl-C again not to wait)")
            try:
                Event(jobs[0].stop_event, client=client).set()
                wait(unfinished, timeout=STOP_POLL_S + 15)
            except (KeyboardInterrupt, TimeoutError, OSError):
                pass
            with contextlib.suppress(OSError, TimeoutError):
                client.cancel(unfinished)

def disconnect(client, cluster) -> None:
    client.close()
    if cluster is not None:
        cluster.close()
