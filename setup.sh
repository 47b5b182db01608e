#!/usr/bin/env bash
# Everything a learner and the test suite need, in a virtual environment: run from the clone,
#
#     ./setup.sh && source .venv/bin/activate
#
# PyTorch is the CUDA build where an NVIDIA GPU answers nvidia-smi, and PyTorch's own CPU build
# (its CPU index, as pytorch.org documents) anywhere else; then the grader with JupyterLab and the
# test tools (extras course and test, plus gpu with CuPy and NVML where there is a GPU). The browser
# test of the JupyterLab path needs Chromium; it is installed when this machine can (Debian or
# Ubuntu as root), and otherwise the test run says it skipped that test and why.
# S2S_VENV names another folder for the environment (default .venv).
set -euo pipefail
cd "$(dirname "$0")"
venv="${S2S_VENV:-.venv}"
say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "setup.sh: Python 3.11 or newer is needed as python3 (found: $(python3 --version 2>&1))" >&2
    exit 2
fi
say "virtual environment in $venv"
python3 -m venv "$venv"
# shellcheck disable=SC1091
source "$venv/bin/activate"
python -m pip install --quiet --upgrade pip

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    say "PyTorch with CUDA (an NVIDIA GPU is here)"
    python -m pip install --quiet torch
    extras="gpu,test,course,capstone"
else
    say "PyTorch's CPU build (no NVIDIA GPU here)"
    # Only torch itself, from PyTorch's CPU index: the "+cpu" build exists there (and in a mirror of
    # it), never on PyPI. Its dependencies come with the grader's below, from your usual index.
    # --extra-index-url keeps that index (and any mirror) in the search; no retries where PyTorch's
    # index cannot be reached.
    python -m pip install --quiet --retries 0 --no-deps "torch==2.13.0+cpu" \
        --extra-index-url https://download.pytorch.org/whl/cpu
    extras="test,course,capstone"
fi
say "the grader, JupyterLab, nbgrader and the test tools"
python -m pip install --quiet -e ".[$extras]"

if [ ! -x /usr/bin/chromium ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "Chromium, for the test that drives JupyterLab"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null ||
            echo "Chromium could not be installed: the JupyterLab browser test will be skipped."
    else
        echo "Chromium is not at /usr/bin/chromium: the JupyterLab browser test will be skipped" \
             "(sudo apt-get install chromium lets it run)."
    fi
fi
command -v nvcc >/dev/null 2>&1 || echo "nvcc is not on PATH: install the CUDA toolkit (13.0 or newer) to compile" \
                                         "the exercises; until then the grader says so and the compile tests skip."
say "done: source $venv/bin/activate, then grade exercise 01 or python -m pytest -q"
