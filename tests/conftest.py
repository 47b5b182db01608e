"""Shared test set-up: GPU tests skip, with the reason, where there is no GPU."""
from __future__ import annotations

import importlib.util

import pytest

from grader.device import probe


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--release", action="store_true",
                     help="the GPU suite as for a release: 20 gradings an exercise (not 2), every solution "
                          "under the sanitizers (not exercise 01's alone), a class of twelve (not five)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("release"):
        # A release check repeats on every exercise what a lighter one already shows on one; left
        # out (and counted as deselected) unless --release.
        left_out = [item for item in items if item.get_closest_marker("release") is not None]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if item.get_closest_marker("release") is None]
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    found = probe()
    if found.gpu is None:
        reason = f"needs an NVIDIA GPU: {found.reason}"
    elif importlib.util.find_spec("cupy") is None:
        reason = "needs CuPy for the GPU worker: pip install -e '.[gpu]'"
    else:
        return
    for item in gpu_items:
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _no_shared_fork_server(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests without a GPU start their workers themselves: a fork server shared across tests (and
    left running after them) would make them depend on each other. tests/test_forkserver.py runs
    private ones; the GPU tests use the grader as it ships."""
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setenv("S2S_FORKSERVER", "0")
