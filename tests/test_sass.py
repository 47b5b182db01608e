"""What the compiler made of the hidden solutions: the instructions the lessons are about.

The bf16 attention solution must run on the tensor cores (HMMA, fed by LDSM) without local
memory; the memory-bound solutions of exercise 01 must move 16 bytes per access. Checked on the
SASS of the build the grader makes for an H200 (sm_90, or the task's build.arch target), on a CPU:
nvcc plus cuobjdump and nvdisasm (PyPI nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm).
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from grader.build import find_cuda_tool, gencode
from grader.spec import find, solutions_dir


def _cuobjdump() -> str | None:
    """The toolkit's cuobjdump, or else the one PyPI's nvidia-cuda-cuobjdump installs."""
    found = find_cuda_tool("cuobjdump")
    if found:
        return found
    try:
        import nvidia
    except ImportError:
        return None
    hits = [hit for base in nvidia.__path__ for hit in glob.glob(os.path.join(base, "**", "bin", "cuobjdump"),
                                                                  recursive=True)]
    return hits[0] if hits else None


NVCC, CUOBJDUMP = shutil.which("nvcc"), _cuobjdump()
pytestmark = pytest.mark.skipif(NVCC is None or CUOBJDUMP is None,
                                reason="needs nvcc and cuobjdump (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")


def sass(source: Path, tmp_path: Path, arch: str = "sm_90") -> dict[str, str]:
    cubin = tmp_path / (source.stem + ".cubin")
    subprocess.run([NVCC, "-O3", "-std=c++17", "-cubin", *gencode(arch), "-o", str(cubin), str(source)],
                   check=True, capture_output=True)
    # cuobjdump disassembles through nvdisasm, which the PyPI packages put in the same folder.
    env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(CUOBJDUMP), os.environ.get("PATH", "")]))
    text = subprocess.run([CUOBJDUMP, "--dump-sass", str(cubin)], check=True, capture_output=True,
                          text=True, env=env).stdout
    return {part.split("\n", 1)[0].strip(): part for part in re.split(r"\n\s+Function : ", text)[1:]}


def test_bf16_attention_solution_runs_on_tensor_cores(tmp_path: Path) -> None:
    """On Hopper: TMA loads and wgmma for both products, a kernel per head dim (64, 128); the
    mma.sync kernels it falls back to elsewhere keep their HMMA and ldmatrix."""
    target = find("04").task("attention_bf16").build.target("sm_90")
    kernels = sass(solutions_dir() / "04_sequence_models" / "attention_bf16.cu", tmp_path, target)
    hopper = {name: body for name, body in kernels.items() if "hopper" in name and "attention" in name}
    fallback = {name: body for name, body in kernels.items() if "mma_path" in name and "attention" in name}
    assert len(hopper) == 2 and len(fallback) == 2, f"a kernel per head dim (64, 128) on each path: {list(kernels)}"
    for name, body in hopper.items():
        assert len(re.findall(r"\bHGMMA\.64x\d+x16\.F32\.BF16\b", body)) >= 16, f"{name}: too few wgmma"
        assert re.search(r"\bUTMALDG\b", body), f"{name}: K and V should arrive by TMA"
        assert not re.search(r"\b(LDL|STL)\b", body), f"{name}: local memory (spills)"
    for name, body in fallback.items():
        assert len(re.findall(r"\bHMMA\.16816\.F32\.BF16\b", body)) >= 64, f"{name}: too few bf16 HMMA"
        assert re.search(r"\bLDSM\b", body), f"{name}: fragments should come through ldmatrix"
        assert not re.search(r"\b(LDL|STL)\b", body), f"{name}: local memory (spills) in the hot loop"


@pytest.mark.parametrize("task", ["vector_add", "reduce_sum"])
def test_memory_bound_solutions_use_16_byte_loads(task: str, tmp_path: Path) -> None:
    kernels = sass(solutions_dir() / "01_foundations" / f"{task}.cu", tmp_path)
    assert any(re.search(r"\bLDG\.E\.128\b", body) for body in kernels.values()), f"{task}: no 16-byte loads"


def _loop_bodies(body: str) -> list[str]:
    """The instructions of each loop in a kernel's SASS: from a backward branch's target up to it."""
    lines = re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", body)
    at = [(int(addr, 16), text.strip()) for addr, text in lines]
    loops = []
    for i, (addr, text) in enumerate(at):
        branch = re.search(r"\bBRA\s+(?:`\(\.L_x_\d+\)|0x([0-9a-f]+))", text)
        if branch and branch.group(1) and int(branch.group(1), 16) < addr:
            target = int(branch.group(1), 16)
            loops.append("\n".join(t for a, t in at[:i + 1] if a >= target))
    return loops


@pytest.mark.parametrize("element, load", [("f", r"LDS\b(?!\.)"), ("6float4", r"LDS\.128\b")])
def test_shared_memory_microbenchmark_issues_every_load_it_counts(element: str, load: str, tmp_path: Path) -> None:
    """`grade hardware` divides the bytes its loop asks for by the time taken; if the compiler
    merges loads that repeat an address, the figure exceeds what the hardware can do."""
    source = Path(__file__).resolve().parents[1] / "hardware" / "microbench.cu"
    per_trip = int(re.search(r"constexpr int kSmemLoads = (\d+);", source.read_text()).group(1))
    kernels = sass(source, tmp_path)
    body = kernels[f"_Z11smem_kernelI{element}EvPfi"]
    counts = [len(re.findall(load, loop)) for loop in _loop_bodies(body)]
    assert per_trip in counts, f"loads per loop trip in the SASS: {counts}, expected one loop with {per_trip}"
    assert all(c in (0, per_trip) for c in counts), f"loads per loop trip in the SASS: {counts}"


# --------------------------------------------------------------------------- exercise 02

def _hot_loop(body: str) -> list[str]:
    """The instructions of the loop with the most FFMA: a GEMM's main loop."""
    loops = _loop_bodies(body)
    assert loops, "no loop in the kernel"
    return max(loops, key=lambda loop: loop.count("FFMA")).splitlines()


@pytest.mark.parametrize("task", ["sgemm", "linear_forward", "linear_backward"])
def test_fp32_gemm_solutions_spend_their_issue_slots_on_fma(task: str, tmp_path: Path) -> None:
    """The lesson of the ladder in the SASS: a main loop of 8 steps of k with 64 FFMA each per
    thread (an 8 x 8 register tile), 4 LDS.128 per step, nothing in local memory, and FFMA at least
    three quarters of all it issues."""
    kernels = sass(solutions_dir() / "02_linear_layers" / f"{task}.cu", tmp_path)
    gemms = {name: body for name, body in kernels.items() if "gemm_kernel" in name}
    assert gemms, f"no GEMM kernel among {list(kernels)}"
    for name, body in gemms.items():
        assert not re.search(r"\b(LDL|STL)\b", body), f"{name}: local memory (spills)"
        loop = _hot_loop(body)
        ffma = sum(bool(re.search(r"\bFFMA\b", line)) for line in loop)
        lds128 = sum(bool(re.search(r"\bLDS\.128\b", line)) for line in loop)
        assert ffma == 8 * 64, f"{name}: {ffma} FFMA in the main loop"
        assert lds128 == 8 * 4, f"{name}: {lds128} LDS.128 in the main loop"
        assert ffma / len(loop) >= 0.75, f"{name}: FFMA are {ffma / len(loop):.0%} of the main loop"


def test_bf16_gemm_solution_runs_on_tensor_cores(tmp_path: Path) -> None:
    """The GEMM kernels run Hopper's wgmma (HGMMA) fed by TMA; only the fallback for operands TMA
    cannot describe (K % 8 != 0, misaligned pointers) is plain SIMT."""
    target = find("02").task("gemm_bf16").build.target("sm_90")
    kernels = sass(solutions_dir() / "02_linear_layers" / "gemm_bf16.cu", tmp_path, target)
    assert kernels
    wgmma = [name for name, body in kernels.items() if re.search(r"\bHGMMA\.\S*BF16", body)]
    assert wgmma, f"no kernel runs HGMMA: {sorted(kernels)}"
    assert all(re.search(r"\bUTMALDG", kernels[name]) for name in wgmma), "a wgmma kernel does not load with TMA"
    others = [name for name in kernels if name not in wgmma]
    assert all("simt" in name for name in others), f"kernels off the tensor cores: {others}"
    for name, body in kernels.items():
        assert not re.search(r"\b(LDL|STL)\b", body), f"{name}: local memory (spills)"


# Kernels of PyTorch that the worker launches, as the sanitizer sees them (mangled names from a
# CUDA build of PyTorch: a fill, a reduction, CUB's sort inside PyTorch, a c10 helper).
TORCH_KERNELS = [
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_",
    "_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIbNS0_14func_wrapper_tIbZZZNS0_14or_kernel_cudaERNS_"
    "14TensorIteratorEENKUlvE_clEvENKUlvE10_clEvEUlbbE_EEjbLi4ELi4EEEEEvT1_",
    "_ZN14at_cuda_detail3cub18DeviceRadixSortOnesweepKernelINS0_21DeviceRadixSortPolicyIlilE9Policy900EEb",
    "_ZN3c1010cuda_check_kernelEv",
]


@pytest.mark.parametrize("exercise, source", [("01_foundations", "reduce_sum.cu"), ("02_linear_layers", "sgemm.cu"),
                                              ("03_optimization", "adamw_multi.cu")])
def test_the_sanitizer_checks_the_learners_kernels_and_skips_pytorchs(exercise: str, source: str,
                                                                      tmp_path: Path) -> None:
    from grader.sanitize import GRADER_KERNELS
    kernels = sass(solutions_dir() / exercise / source, tmp_path)
    assert kernels
    checked = [name for name in kernels if not re.search(GRADER_KERNELS, name)]
    assert checked == list(kernels), f"learner kernels left out of the sanitizer's checks: " \
                                     f"{sorted(set(kernels) - set(checked))}"
    assert all(re.search(GRADER_KERNELS, name) for name in TORCH_KERNELS)
