"""Compiling CUDA with nvcc: every exercise file builds, the ptxas report is read, errors
point at the learner's file and line, builds are cached by content, and a missing or
hanging compiler gives a clear message instead of a traceback.

Tests that run nvcc skip where it is not installed; the ptxas parser and the toolchain
search run everywhere.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader import build, spec
from grader.inspect_source import check_build
from grader.build import BuildResult, Toolchain, ToolchainError, compile_cuda, exported_symbols, parse_ptxas

ROOT = Path(__file__).resolve().parents[1]
ARCH = "sm_90"
CU_FILES = sorted((ROOT / "exercises").rglob("*.cu")) + sorted((ROOT / "solutions").rglob("*.cu"))
CU_IDS = [str(p.relative_to(ROOT)) for p in CU_FILES]


def _targets() -> dict[Path, str]:
    """The target the grader builds each task's stub, baseline and solution for on an sm_90 GPU:
    sm_90, or what the task's build.arch asks for (sm_90a for wgmma)."""
    out = {}
    for ex in spec.discover():
        for task in ex.tasks:
            for path in (ex.folder / task.source, ex.folder / task.baseline,
                         ROOT / "solutions" / ex.slug / task.source):
                out[path] = task.build.target(ARCH)
    return out


TARGETS = _targets()

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None,
                                reason="nvcc (the CUDA toolkit) is not on PATH, so nothing can be compiled here")

# Captured from real compiles with nvcc 13.0 for sm_90 (`-Xptxas -v`): the reference solution of
# vector_add (two kernels in an anonymous namespace), then a template kernel limited to 24
# registers so that it spills.
PTXAS_VECTOR_ADD = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN46_GLOBAL__N__c3222c2f_13_vector_add_cu_a3efb10311vadd_scalarEPKfS1_Pfxx' for 'sm_90'
ptxas info    : Function properties for _ZN46_GLOBAL__N__c3222c2f_13_vector_add_cu_a3efb10311vadd_scalarEPKfS1_Pfxx
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers
ptxas info    : Compile time = 14.130 ms
ptxas info    : Compiling entry function '_ZN46_GLOBAL__N__c3222c2f_13_vector_add_cu_a3efb1039vadd_vec4EPK6float4S2_PS0_x' for 'sm_90'
ptxas info    : Function properties for _ZN46_GLOBAL__N__c3222c2f_13_vector_add_cu_a3efb1039vadd_vec4EPK6float4S2_PS0_x
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 43 registers, used 0 barriers
ptxas info    : Compile time = 5.612 ms
"""
PTXAS_SPILLING_TEMPLATE = """\
ptxas info    : Overriding maximum register limit 256 for '_Z5heavyILi64EEvPKfPf' with  24 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z5heavyILi64EEvPKfPf' for 'sm_90'
ptxas info    : Function properties for _Z5heavyILi64EEvPKfPf
    56 bytes stack frame, 56 bytes spill stores, 56 bytes spill loads
ptxas info    : Used 24 registers, used 1 barriers, 56 bytes cumulative stack size, 1024 bytes smem
ptxas info    : Compile time = 14.586 ms
"""

demangler = pytest.mark.skipif(not (shutil.which("cu++filt") or shutil.which("c++filt")),
                               reason="c++filt (binutils) is not installed, so kernel names stay mangled")


# --------------------------------------------------------------------------- ptxas report (no nvcc needed)

def test_parse_ptxas_registers_and_spills():
    kernels = parse_ptxas(PTXAS_VECTOR_ADD)
    assert [(k.registers, k.shared_bytes, k.stack_bytes, k.spills) for k in kernels] == [(32, 0, 0, 0), (43, 0, 0, 0)]
    spilling = parse_ptxas(PTXAS_SPILLING_TEMPLATE)
    assert len(spilling) == 1
    k = spilling[0]
    assert (k.registers, k.shared_bytes, k.stack_bytes) == (24, 1024, 56)
    assert (k.spill_store_bytes, k.spill_load_bytes, k.spills) == (56, 56, 112)


@demangler
def test_parse_ptxas_demangles_names_the_learner_wrote():
    assert [k.name for k in parse_ptxas(PTXAS_VECTOR_ADD)] == ["vadd_scalar", "vadd_vec4"]


@demangler
def test_template_kernel_name_has_no_return_type():
    assert [k.name for k in parse_ptxas(PTXAS_SPILLING_TEMPLATE)] == ["heavy<64>"]


def test_parse_ptxas_of_errors_or_nothing_is_empty():
    assert parse_ptxas("") == []
    assert parse_ptxas('bad.cu(3): error: expected a ";"\n1 error detected in the compilation of "bad.cu".') == []


def test_build_result_round_trips_through_dict():
    result = BuildResult("a.cu", True, "/x/lib.so", parse_ptxas(PTXAS_SPILLING_TEMPLATE), "warning", 1.5, False, ARCH)
    assert BuildResult.from_dict(result.to_dict()) == result


@pytest.mark.parametrize("arch, flag", [
    ("sm_80", "-gencode=arch=compute_80,code=sm_80"),
    ("sm_89", "-gencode=arch=compute_89,code=sm_89"),
    ("sm_90", "-gencode=arch=compute_90,code=sm_90"),
    ("sm_90a", "-gencode=arch=compute_90a,code=sm_90a"),
    ("sm_100", "-gencode=arch=compute_100,code=sm_100"),
])
def test_gencode(arch, flag):
    assert build.gencode(arch) == [flag]


def test_gencode_rejects_nonsense():
    with pytest.raises(ToolchainError, match="expected something like sm_90"):
        build.gencode("hopper")


# --------------------------------------------------------------------------- finding nvcc (no nvcc needed)

def fake_nvcc(folder: Path, release: str = "12.4") -> Path:
    nvcc = folder / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.99'\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return nvcc


def test_toolchain_honours_cuda_home(tmp_path, monkeypatch):
    nvcc = fake_nvcc(tmp_path / "cuda-12.4")
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda-12.4"))
    found = Toolchain.find()
    assert found.nvcc == nvcc
    assert found.version == "12.4"


def test_cuda_home_wins_over_path(tmp_path, monkeypatch):
    home = fake_nvcc(tmp_path / "home", "12.8")
    on_path = fake_nvcc(tmp_path / "path", "11.8")
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.setenv("CUDA_HOME", str(home.parent.parent))
    assert Toolchain.find().nvcc == home


def test_no_nvcc_anywhere_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    # The default install location (/usr/local/cuda) may exist on this machine: hide it too.
    monkeypatch.setattr(build.os, "access", lambda path, mode: False)
    with pytest.raises(ToolchainError) as err:
        Toolchain.find()
    message = str(err.value)
    assert "nvcc, the CUDA compiler, was not found" in message
    assert "Install the CUDA toolkit" in message
    assert "CUDA_HOME" in message and "PATH" in message


# --------------------------------------------------------------------------- compiling (nvcc needed)

@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One build cache for this module (and the CLI tests), so each file is compiled once."""
    folder = tmp_path_factory.getbasetemp() / "s2s-cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("S2S_CACHE", str(folder))
        yield folder


@pytest.fixture(scope="module")
def toolchain():
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc (the CUDA toolkit) is not on PATH, so nothing can be compiled here")
    return Toolchain.find()


@pytest.fixture(scope="module")
def builds(cache, toolchain) -> dict[Path, BuildResult]:
    """Every .cu file of the repository, compiled in parallel (nvcc spends much of its time waiting)."""
    with ThreadPoolExecutor(max_workers=max(4, os.cpu_count() or 1)) as pool:
        results = pool.map(lambda p: compile_cuda(p, TARGETS.get(p, ARCH), toolchain, display_root=ROOT), CU_FILES)
        return dict(zip(CU_FILES, results))


@needs_nvcc
@pytest.mark.parametrize("path", CU_FILES, ids=CU_IDS)
def test_every_source_compiles(builds, path):
    result = builds[path]
    assert result.ok, f"{result.source}: {result.error}\n{result.log}"
    assert result.arch == TARGETS.get(path, ARCH)
    assert result.source == str(path.relative_to(ROOT))
    assert Path(result.library).is_file()
    assert "warning" not in result.log.lower(), result.log
    if "solutions" in path.parts or "baselines" in path.parts:
        assert result.kernels, "a solution or baseline defines at least one kernel"
        assert all(0 < k.registers <= 255 for k in result.kernels)
    if "solutions" in path.parts:
        spilled = {k.name: k.spills for k in result.kernels if k.spills}
        assert not spilled, f"register spills in a reference solution: {spilled}"


@needs_nvcc
def test_no_source_of_the_repository_calls_a_foreign_library(builds):
    """Stubs, baselines and solutions need nothing beyond the CUDA and C/C++ runtimes."""
    foreign = {str(path.relative_to(ROOT)): build.foreign_symbols(Path(result.library))
               for path, result in builds.items() if result.ok}
    assert all(found is not None for found in foreign.values()), "nm, readelf or ldconfig is missing"
    assert {name: found for name, found in foreign.items() if found} == {}


@needs_nvcc
def test_a_library_call_whose_name_the_preprocessor_pastes_is_found(tmp_path, cache, toolchain):
    src = tmp_path / "pasted.cu"
    src.write_text('#define CAT(a, b) a##b\nextern "C" int CAT(cufft, Plan1d)(int*, int, int, int);\n'
                   'extern "C" void f() { int plan; CAT(cufft, Plan1d)(&plan, 8, 0x29, 1); }\n')
    result = compile_cuda(src, ARCH, toolchain)
    assert result.ok, result.log
    assert build.foreign_symbols(Path(result.library)) == ["cufftPlan1d"]


@needs_nvcc
def test_exported_symbols_find_the_entry_point(builds):
    stub = ROOT / "exercises" / "01_foundations" / "vector_add.cu"
    symbols = exported_symbols(Path(builds[stub].library))
    assert "vector_add" in symbols
    assert "s2s_last_error" in symbols          # the grader's probe header is compiled in


@needs_nvcc
def test_exported_symbols_show_the_mangled_name_without_extern_c(tmp_path, cache, toolchain):
    src = tmp_path / "vector_add.cu"
    src.write_text("void vector_add(const float* a, const float* b, float* c, int n) {}\n")
    result = compile_cuda(src, ARCH, toolchain)
    assert result.ok, result.log
    symbols = exported_symbols(Path(result.library))
    assert "vector_add" not in symbols
    assert "_Z10vector_addPKfS0_Pfi" in symbols


@needs_nvcc
def test_compile_error_names_the_file_and_line(tmp_path, cache, toolchain):
    src = tmp_path / "bad.cu"
    src.write_text('#include <cuda_runtime.h>\n\nextern "C" void f(int n) { int x = n }\n')
    result = compile_cuda(src, ARCH, toolchain, display_root=tmp_path)
    assert not result.ok
    assert result.library is None
    assert result.error.startswith("bad.cu(3): error")
    assert "bad.cu(3): error" in result.log
    assert str(tmp_path) not in result.log          # paths shown as the learner knows them


@needs_nvcc
def test_second_compile_is_cached_and_a_change_rebuilds(tmp_path, cache, toolchain):
    src = tmp_path / "k.cu"
    body = '__global__ void k(float* y) {{ y[threadIdx.x] = {}; }}\nextern "C" void f(float* y) {{ k<<<1, 32>>>(y); }}\n'
    src.write_text(f"// {tmp_path.name}\n" + body.format("1.0f"))
    first = compile_cuda(src, ARCH, toolchain)
    second = compile_cuda(src, ARCH, toolchain)
    assert first.ok and not first.cached
    assert second.cached
    assert second.library == first.library and second.kernels == first.kernels
    src.write_text(f"// {tmp_path.name}\n" + body.format("2.0f"))
    third = compile_cuda(src, ARCH, toolchain)
    assert third.ok and not third.cached
    assert third.library != first.library


@needs_nvcc
def test_a_changed_header_next_to_the_source_rebuilds(tmp_path, cache, toolchain):
    src = tmp_path / "k.cu"
    (tmp_path / "tile.cuh").write_text(f"// {tmp_path.name}\nconstexpr int kTile = 32;\n")
    src.write_text('#include "tile.cuh"\n__global__ void k(float* y) { y[threadIdx.x] = kTile; }\n')
    first = compile_cuda(src, ARCH, toolchain)
    (tmp_path / "tile.cuh").write_text(f"// {tmp_path.name}\nconstexpr int kTile = 64;\n")
    second = compile_cuda(src, ARCH, toolchain)
    assert first.ok and second.ok
    assert not second.cached


@needs_nvcc
def test_compile_timeout_is_a_result_not_an_exception(tmp_path, cache, toolchain):
    src = tmp_path / "slow.cu"
    src.write_text(f"// {tmp_path.name}\n__global__ void k(float* y) {{ y[0] = 1.0f; }}\n")
    result = compile_cuda(src, ARCH, toolchain, display_root=tmp_path, timeout_s=0.05)
    assert not result.ok
    assert result.library is None
    assert "slow.cu took longer than 0.05 s and was stopped" in result.error
    leftovers = [p.name for p in (cache / "build").iterdir() if "." in p.name]   # half-built "<key>.xxxx" folders
    assert leftovers == []


@needs_nvcc
def test_missing_source_is_a_result(tmp_path, cache, toolchain):
    result = compile_cuda(tmp_path / "gone.cu", ARCH, toolchain, display_root=tmp_path)
    assert not result.ok
    assert result.error == "gone.cu does not exist"


@needs_nvcc
def test_compiler_output_of_bytes_that_are_not_utf8_is_a_result(tmp_path, cache, toolchain):
    """nvcc quotes the offending source line; bytes that are not UTF-8 there must not crash the build,
    nor leave a half-built folder in the cache."""
    src = tmp_path / "latin1.cu"
    src.write_bytes(f"// {tmp_path.name}\nextern \"C\" void f() {{ int caf\xe9 = 1; }}\n".encode("latin-1"))
    result = compile_cuda(src, ARCH, toolchain, display_root=tmp_path)
    assert not result.ok and "latin1.cu" in result.error
    assert "\ufffd" in result.log                  # the byte shown as a replacement character
    leftovers = [p.name for p in (cache / "build").iterdir() if "." in p.name]
    assert leftovers == []


def test_a_cached_library_that_changed_is_built_again(tmp_path, monkeypatch, toolchain):
    """The cache hands out a library only while it is the file that was built: one rewritten after
    the build (by whatever ran since) is built again, never trusted on its build.json."""
    monkeypatch.setenv("S2S_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "k.cu"
    source.write_text('extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n')
    first = compile_cuda(source, "sm_90", toolchain)
    assert first.ok and not first.cached
    assert compile_cuda(source, "sm_90", toolchain).cached
    with open(first.library, "ab") as library:
        library.write(b"\0tampered")
    again = compile_cuda(source, "sm_90", toolchain)
    assert again.ok and not again.cached
    assert hashlib.sha256(Path(again.library).read_bytes()).hexdigest() == again.sha256


def test_the_build_lists_every_header_the_compiler_read(tmp_path, monkeypatch, toolchain):
    """An #include that a macro spells is still in the list (the library rules read it)."""
    monkeypatch.setenv("S2S_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "k.cu"
    source.write_text('#define H(x) <x/version.cuh>\n#include H(cub)\nextern "C" void f() {}\n')
    result = compile_cuda(source, "sm_90", toolchain)
    assert result.ok
    assert any(h.endswith("cub/version.cuh") for h in result.headers)
    assert check_build(result.headers, []) and "CUB's header cub/version.cuh" in check_build(result.headers, [])[0].message


@needs_nvcc
def test_an_exercises_tasks_compile_side_by_side_and_report_in_order(tmp_path, monkeypatch):
    """The grader compiles an exercise's tasks at once (S2S_BUILD_JOBS at a time): each task keeps
    its own verdict, in the exercise's order, and the progress line counts the files done."""
    from grader.pipeline import Options, grade

    monkeypatch.setenv("S2S_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("S2S_BUILD_JOBS", "3")
    exercise = spec.find("01")
    submission = tmp_path / "submission"
    submission.mkdir()
    for task in exercise.tasks:
        shutil.copy(ROOT / "solutions" / exercise.slug / task.source, submission)
    broken = exercise.tasks[1]
    (submission / broken.source).write_text("this is not CUDA\n")
    said: list[str] = []
    result = grade("01", Options(submission=submission, profile=False), progress=said.append)
    assert [t.name for t in result.tasks] == [t.name for t in exercise.tasks]
    for task, t in zip(exercise.tasks, result.tasks):
        if task is broken:
            assert t.status == "failed" and t.summary.startswith("does not compile:"), t.summary
        else:
            assert t.build is not None and t.build.ok and t.status != "failed", t.summary
    n = len(exercise.tasks)
    assert f"compiling {n} sources, 3 at a time" in said
    done = [m for m in said if m.startswith("compiled ")]
    assert sorted(m.split()[1] for m in done) == sorted(t.source for t in exercise.tasks)
    assert [m.split()[-1] for m in done] == [f"({i}/{n})" for i in range(1, n + 1)]
