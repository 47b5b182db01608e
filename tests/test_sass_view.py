"""`grade exercise NN --sass`: each kernel's hot loop in SASS, the instructions that matter marked and
counted per iteration.

Read from SASS recorded here (tests/fixtures/sass/*.sass.gz: nvcc 13.0 for sm_90, or sm_90a where a
task's build asks for it, then `cuobjdump --dump-sass`, normalised by grader.sass.normalise) of every
task's hidden solution and stub in exercises 01 to 05; one test runs the command itself where nvcc and
cuobjdump are installed.
"""
from __future__ import annotations

import gzip
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader import sass
from grader.spec import discover

FIXTURES = Path(__file__).parent / "fixtures" / "sass"
EXERCISES = [ex for ex in discover() if (FIXTURES / f"{ex.slug}.solutions.sass.gz").is_file()]


def recorded(slug: str, which: str) -> dict[str, tuple[str, list[sass.KernelSass]]]:
    """task -> (target, learner kernels) from one fixture."""
    text = gzip.decompress((FIXTURES / f"{slug}.{which}.sass.gz").read_bytes()).decode()
    out = {}
    for part in re.split(r"^Task : ", text, flags=re.M)[1:]:
        head, body = part.split("\n", 1)
        task, target = head.split()
        out[task] = (target, sass.learner_kernels(sass.parse(body)))
    return out


def hot(slug: str, task: str, kernel: str) -> dict[str, int]:
    kernels = [k for k in recorded(slug, "solutions")[task][1] if kernel in k.name]
    assert kernels, f"no kernel named like {kernel} in {task}"
    loop = kernels[0].hot_loop
    assert loop is not None, f"{kernel}: no loop"
    return loop.counts()


def test_every_exercise_with_tasks_has_recorded_sass():
    assert [ex.slug for ex in EXERCISES] == ["01_foundations", "02_linear_layers", "03_optimization",
                                             "04_sequence_models", "05_production"]


@pytest.mark.parametrize("ex", EXERCISES, ids=[ex.slug for ex in EXERCISES])
def test_every_solution_kernel_gets_a_view_with_marked_instructions(ex):
    tasks = recorded(ex.slug, "solutions")
    assert sorted(tasks) == sorted(t.name for t in ex.tasks)
    for task in ex.tasks:
        target, kernels = tasks[task.name]
        assert target == task.build.target("sm_90")
        assert kernels, f"{task.name}: no kernel"
        for kernel in kernels:
            view = sass.render_kernel(kernel)
            assert view.startswith(f"kernel {kernel.pretty}")
            if kernel.hot_loop is None:
                assert "no loop: every instruction runs once per thread" in view
                continue
            loop = kernel.hot_loop
            assert loop.start < loop.end and loop.instructions
            # the branch that closes the loop goes back to its first instruction
            assert any(i.target() == loop.start for i in kernel.instructions if i.address == loop.end)
            assert "per iteration:" in view and sass.MARK in view, f"{task.name}/{kernel.pretty}: nothing marked"


@pytest.mark.parametrize("ex", EXERCISES, ids=[ex.slug for ex in EXERCISES])
def test_a_stub_shows_that_it_holds_no_kernel_yet(ex):
    tasks = recorded(ex.slug, "stubs")
    for task in ex.tasks:
        target, kernels = tasks[task.name]
        assert kernels == []
        view = sass.TaskSass(task.name, task.source, target, kernels).render()
        assert view == f"== {task.name} ({task.source}, {target})\n  no kernel in this file yet"


def test_float4_loads_show_as_128_bit_loads():
    kernels = {k.pretty: k for k in recorded("01_foundations", "solutions")["vector_add"][1]}
    assert kernels["vadd_vec4"].counts()["LDG.E.128"] >= 2
    assert "LDG.E.128" not in kernels["vadd_scalar"].counts()
    view = sass.render_kernel(kernels["vadd_scalar"])
    assert re.search(r"\u25b6 /\*[0-9a-f]+\*/ LDG\.E\S* .*global load, 4 B a thread", view)


def test_the_gemm_main_loop_is_64_ffma_and_4_lds128_per_step_of_k():
    counts = hot("02_linear_layers", "sgemm", "gemm_kernel")
    assert counts["FFMA"] == 8 * 64 and counts["LDS.128"] == 8 * 4 and counts["BAR"] == 1


def test_tensor_core_loops_win_over_longer_epilogues():
    """gemm_bf16's wgmma kernel has an epilogue loop with hundreds of stores; its hot loop is the one
    that issues HGMMA."""
    counts = hot("02_linear_layers", "gemm_bf16", "gemm_bf16_wgmma")
    assert any(label.startswith("HGMMA.64x") for label in counts), counts
    assert any(label.startswith("HMMA.16816.F32") for label in hot("04_sequence_models", "attention_bf16",
                                                                     "flash_attention_bf16"))
    w8a8 = hot("05_production", "gemm_w8a8", "w8a8_imma")
    assert w8a8["IMMA.16832.S8"] > 0 and w8a8["LDSM"] > 0 and w8a8["LDGSTS.E.128"] > 0


def test_adam_shows_its_special_function_unit_and_fp8_its_conversions():
    assert hot("03_optimization", "adamw", "adamw_scalar")["MUFU.RSQ"] > 0
    quant = {k.pretty: k for k in recorded("05_production", "solutions")["quantize_fp8"][1]}
    held = next(k for name, k in quant.items() if name.startswith("quant::rows_held"))
    assert any(label.startswith("F2FP.E4M3") for label in held.counts())


# ------------------------------------------------------------------ the parser on hand-made SASS

NESTED = """
Function : _Z6nestedPfi
/*0000*/ MOV R1, c[0x0][0x28] ;
/*0010*/ LDG.E.128 R4, desc[UR4][R2.64] ;
/*0020*/ FFMA R0, R4, R5, R0 ;
/*0030*/ FFMA R0, R6, R7, R0 ;
/*0040*/ @P0 BRA 0x10 ;
/*0050*/ LDS R8, [R9] ;
/*0060*/ @!P1 BRA 0x50 ;
/*0070*/ BAR.SYNC.DEFER_BLOCKING 0x0 ;
/*0080*/ @P2 BRA 0x0 ;
/*0090*/ STG.E desc[UR4][R2.64], R0 ;
/*00a0*/ EXIT ;
/*00b0*/ BRA 0xb0 ;
"""


def test_nested_loops_count_their_own_body_and_the_trap_at_the_end_is_no_loop():
    (kernel,) = sass.parse(NESTED)
    spans = sorted((lp.start, lp.end, lp.inner) for lp in kernel.loops)
    assert spans == [(0x0, 0x80, 2), (0x10, 0x40, 0), (0x50, 0x60, 0)]
    outer = next(lp for lp in kernel.loops if lp.end == 0x80)
    assert [i.address for i in outer.instructions] == [0x0, 0x70, 0x80]
    assert kernel.hot_loop.start == 0x10 and kernel.hot_loop.end == 0x40
    assert kernel.hot_loop.counts() == {"LDG.E.128": 1, "FFMA": 2}


def test_two_branches_back_to_one_place_make_one_loop():
    """A `continue` branches back to the loop's head as the loop's end does."""
    (kernel,) = sass.parse("Function : k\n/*0000*/ FFMA R0, R1, R2, R0 ;\n/*0010*/ @P0 BRA 0x0 ;\n"
                           "/*0020*/ FFMA R0, R1, R2, R0 ;\n/*0030*/ @P1 BRA 0x0 ;\n/*0040*/ EXIT ;\n")
    assert [(lp.start, lp.end, lp.counts()) for lp in kernel.loops] == [(0x0, 0x30, {"FFMA": 2})]


def test_a_raw_dump_and_its_normalised_form_read_the_same():
    raw = ("\t\tFunction : _Z1kv\n\t.headerflags\t@\"EF_CUDA_SM90\"\n"
           "        /*0000*/                   LDG.E.64 R2, desc[UR4][R2.64] ;   /* 0x0000000402027981 */\n"
           "                                                                     /* 0x000ea8000c1e1b00 */\n"
           "        /*0010*/              @!P0 BRA 0x0 ;                          /* 0x0000000000148947 */\n")
    assert [(k.name, [i.text for i in k.instructions]) for k in sass.parse(raw)] == \
        [(k.name, [i.text for i in k.instructions]) for k in sass.parse(sass.normalise(raw))]
    assert sass.parse(raw)[0].hot_loop.counts() == {"LDG.E.64": 1}


@pytest.mark.parametrize("opcode, label, width", [
    ("LDG.E.128.CONSTANT", "LDG.E.128", 16), ("LDS.U8", "LDS.8", 1), ("STG.E", "STG.E", 4),
    ("LDGSTS.E.BYPASS.128", "LDGSTS.E.128", 16), ("HMMA.16816.F32.BF16", "HMMA.16816.F32", None),
    ("MUFU.EX2", "MUFU.EX2", None), ("HFMA2.MMA", "HFMA2.MMA", None)])
def test_labels_keep_the_width_and_drop_the_rest(opcode, label, width):
    ins = sass.Instruction(0, f"{opcode} R0, R1")
    assert sass.access_bytes(opcode) == width
    if opcode == "HFMA2.MMA":      # the compiler's idiom for a register move, not an FMA
        assert ins.kind is None
    else:
        assert ins.label == label


# ------------------------------------------------------------------ the command

NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None or sass.cuobjdump() is None,
                    reason="needs nvcc and cuobjdump (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
def test_grade_exercise_sass_shows_the_hot_loops_of_a_submission(tmp_path):
    from grader.spec import solutions_dir
    env_cache = {"S2S_CACHE": str(tmp_path / "cache")}
    import os
    proc = subprocess.run([sys.executable, "-m", "grader.cli", "exercise", "01", "--sass", "--task", "vector_add",
                           "--submission", str(solutions_dir() / "01_foundations")],
                          capture_output=True, text=True, env={**os.environ, **env_cache}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "== vector_add (vector_add.cu, sm_90)" in proc.stdout
    assert "kernel vadd_vec4" in proc.stdout and "LDG.E.128 x" in proc.stdout
    stub = subprocess.run([sys.executable, "-m", "grader.cli", "exercise", "01", "--sass", "--task", "vector_add"],
                          capture_output=True, text=True, env={**os.environ, **env_cache}, timeout=300)
    assert stub.returncode == 0 and "no kernel in this file yet" in stub.stdout
