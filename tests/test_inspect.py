"""Static checks of a learner's source: the signature the grader calls, extern "C",
and libraries or process-level calls that are not accepted. Each finding names the line.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from grader import spec
from grader.inspect_source import check, normalize_param, strip_comments

TASK = spec.find("01").task("vector_add")
GOOD = 'extern "C" void vector_add(const float* a, const float* b, float* c, int n) {\n}\n'


def findings_of(tmp_path: Path, text: str, task: spec.Task = TASK):
    path = tmp_path / "vector_add.cu"
    path.write_text(text)
    return check(path, task)


@pytest.mark.parametrize("param, expected", [
    ("const float* a", "const float*"),
    ("float const * a", "const float*"),
    ("const float * __restrict__ a", "const float*"),
    ("float const* __restrict x", "const float*"),
    ("float* c", "float*"),
    ("float *c", "float*"),
    ("float* __restrict__ c", "float*"),
    ("int n", "int"),
    ("const int n", "int"),            # a const scalar is the same ABI
    ("unsigned int n", "unsigned int"),
    ("long long n", "int64_t"),
    ("int64_t n", "int64_t"),
    ("long n", "int64_t"),
    ("std::int64_t n", "int64_t"),
    ("const int64_t* __restrict__ sizes", "const int64_t*"),
    ("float* const* p", "float* const*"),
    ("const float* const* g", "const float* const*"),
    ("float const* const* __restrict__ g", "const float* const*"),
    ("float* const* const p", "float* const*"),   # the pointer array's own const is top level
    ("nv_bfloat16* y", "__nv_bfloat16*"),
    ("const __nv_fp8_e4m3* W", "const __nv_fp8_e4m3*"),
    ("const __nv_bfloat16* q", "const __nv_bfloat16*"),
    ("float* const c", "float*"),      # a const pointer (not pointee) is still float*
    ("float", "float"),                # an unnamed parameter
    ("const float*", "const float*"),
    ("float** p", "float**"),
])
def test_normalize_param(param, expected):
    assert normalize_param(param) == expected


def test_good_source_has_no_findings(tmp_path):
    assert findings_of(tmp_path, "#include <cuda_runtime.h>\n" + GOOD) == []


def test_equivalent_spellings_are_accepted(tmp_path):
    text = ('extern "C" void vector_add(float const* __restrict__ a, const float *__restrict__ b,\n'
            '                           float* __restrict__ c, const int n) {\n}\n')
    assert findings_of(tmp_path, text) == []


def test_wrong_signature_is_reported_with_the_line(tmp_path):
    text = "#include <cuda_runtime.h>\n\n" + GOOD.replace("int n", "size_t n")
    (finding,) = findings_of(tmp_path, text)
    assert finding.line == 3
    assert "vector_add takes (const float*, const float*, float*, size_t)" in finding.message
    assert "(const float*, const float*, float*, int)" in finding.message
    assert TASK.prototype() in finding.message


def test_missing_const_is_a_wrong_signature(tmp_path):
    (finding,) = findings_of(tmp_path, GOOD.replace("const float* a", "float* a"))
    assert "takes (float*, const float*, float*, int)" in finding.message


def test_missing_parameter_is_a_wrong_signature(tmp_path):
    (finding,) = findings_of(tmp_path, GOOD.replace(", int n", ""))
    assert finding.line == 1
    assert "grader calls it with" in finding.message


def test_missing_extern_c_is_reported(tmp_path):
    text = "#include <cuda_runtime.h>\n" + GOOD.replace('extern "C" ', "")
    (finding,) = findings_of(tmp_path, text)
    assert finding.line == 2
    assert 'not declared extern "C"' in finding.message
    assert "mangles" in finding.message


def test_extern_c_block_is_accepted(tmp_path):
    text = ('#include <cuda_runtime.h>\nextern "C" {\n\n'
            "void vector_add(const float* a, const float* b, float* c, int n) {\n    if (n) {}\n}\n\n}\n")
    assert findings_of(tmp_path, text) == []


def test_closed_extern_c_block_does_not_cover_later_code(tmp_path):
    text = ('extern "C" {\nint helper(void) { return 0; }\n}\n'
            "void vector_add(const float* a, const float* b, float* c, int n) {\n}\n")
    (finding,) = findings_of(tmp_path, text)
    assert finding.line == 4 and 'extern "C"' in finding.message


def test_entry_defined_elsewhere_is_left_to_the_build(tmp_path):
    """Without a definition there is nothing to compare; the missing symbol is reported after the build."""
    assert findings_of(tmp_path, "__global__ void k() {}\n") == []


@pytest.mark.parametrize("line, library", [
    ("#include <cublas_v2.h>", "cuBLAS"),
    ('#include "cublasLt.h"', "cuBLAS"),
    ("#include <cub/cub.cuh>", "CUB"),
    ("#include <thrust/reduce.h>", "Thrust"),
    ("#include <cudnn.h>", "cuDNN"),
    ("#include <cutlass/gemm/device/gemm.h>", "CUTLASS"),
    ("  #  include <thrust/device_ptr.h>", "Thrust"),
])
def test_library_includes_are_rejected(tmp_path, line, library):
    text = "#include <cuda_runtime.h>\n" + line + "\n" + GOOD
    (finding,) = findings_of(tmp_path, text)
    assert finding.line == 2
    assert f"uses {library}" in finding.message
    assert "library implementations are not accepted" in finding.message


def test_library_call_is_rejected_at_its_line(tmp_path):
    text = GOOD.replace("{\n}", "{\n    cublasSaxpy(handle, n, &one, a, 1, c, 1);\n}")
    (finding,) = findings_of(tmp_path, text)
    assert finding.line == 2
    assert "uses cuBLAS (cublasSaxpy(" in finding.message


def test_every_call_into_a_library_is_named_once(tmp_path):
    body = ("{\n    cublasHandle_t h;\n    cublasCreate(&h);\n    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, 1, 1,"
            " &one, a, n, b, 1, &zero, c, n);\n    cublasSgemm (h, CUBLAS_OP_T, CUBLAS_OP_N, 1, 1, 1, &one, a, 1,"
            " b, 1, &zero, c, 1);\n    cublasDestroy(h);\n}")
    text = "#include <cuda_runtime.h>\n#include <cublas_v2.h>\n" + GOOD.replace("{\n}", body)
    (finding,) = findings_of(tmp_path, text)
    assert finding.line == 2
    assert finding.message.startswith("uses cuBLAS (#include <cublas_v2.h>, cublasCreate(), cublasSgemm(), "
                                      "cublasDestroy()); this task is about writing the kernel yourself")


def test_a_long_list_of_library_calls_is_counted(tmp_path):
    names = ("axpy", "copy", "scal", "dot", "nrm2", "asum", "rot", "swap")
    calls = "".join(f"    cublasS{name}(h);\n" for name in names)
    (finding,) = findings_of(tmp_path, GOOD.replace("{\n}", "{\n" + calls + "}"))
    assert "uses cuBLAS (cublasSaxpy(), cublasScopy(), cublasSscal(), cublasSdot(), cublasSnrm2(), cublasSasum() " \
           "and 2 more);" in finding.message


@pytest.mark.parametrize("text", [
    "// not allowed: #include <cub/cub.cuh>\n",
    "/* we could call cublasSgemm(...) or use\n   #include <thrust/sort.h> but we do not */\n",
    'const char* note = "cublasSgemm(handle) and #include <cub/cub.cuh>";\n',
    "// cudaDeviceReset() would break the grader\n",
])
def test_mentions_in_comments_and_strings_are_ignored(tmp_path, text):
    assert findings_of(tmp_path, text + GOOD) == []


def test_comments_do_not_shift_line_numbers(tmp_path):
    text = "/* a\n   long\n   comment */\n// more\n#include <thrust/sort.h>\n" + GOOD
    (finding,) = findings_of(tmp_path, text)
    assert finding.line == 5


def test_cuda_device_reset_is_rejected(tmp_path):
    text = GOOD.replace("{\n}", "{\n    cudaDeviceReset();\n}")
    (finding,) = findings_of(tmp_path, text)
    assert finding.line == 2
    assert "cudaDeviceReset() destroys the CUDA context" in finding.message


def test_every_problem_is_reported(tmp_path):
    text = "#include <cub/cub.cuh>\n" + GOOD.replace('extern "C" ', "").replace("{\n}", "{ cudaDeviceReset(); }")
    messages = [f.message for f in findings_of(tmp_path, text)]
    assert len(messages) == 3
    assert any("CUB" in m for m in messages)
    assert any("cudaDeviceReset" in m for m in messages)
    assert any('extern "C"' in m for m in messages)


def test_missing_file_is_a_finding(tmp_path):
    (finding,) = check(tmp_path / "nothere.cu", TASK)
    assert "nothere.cu does not exist" in finding.message


def test_strip_comments_keeps_lines_and_include_paths():
    text = '#include "probe.cuh"\nint x; // note\n/* a\nb */ const char* s = "cub";\n'
    stripped = strip_comments(text)
    assert stripped.count("\n") == text.count("\n")
    assert '#include "probe.cuh"' in stripped
    assert "note" not in stripped and "cub" not in stripped
    assert 'const char* s = "' in stripped


def test_bf16_task_signature(tmp_path):
    task = spec.find("04").task("attention_bf16")
    good = ('#include <cuda_bf16.h>\nextern "C" void attention_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k,'
            " const __nv_bfloat16* v, __nv_bfloat16* o, int bh, int seq, int dim, int causal) {\n}\n")
    assert findings_of(tmp_path, good, task) == []
    (finding,) = findings_of(tmp_path, good.replace("__nv_bfloat16* o", "float* o"), task)
    assert "float*" in finding.message and finding.line == 2


@pytest.mark.parametrize("data, where, fragment", [
    (b'extern "C" void vector_add() {}\n// caf\xe9\n', 2, "byte 38 (0xe9) is not UTF-8"),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00", 1, "is not text: it holds a NUL byte"),
])
def test_a_file_that_is_not_utf8_text_is_rejected_with_the_line(tmp_path, data, where, fragment):
    path = tmp_path / "vector_add.cu"
    path.write_bytes(data)
    (finding,) = check(path, TASK)
    assert finding.line == where and fragment in finding.message and "UTF-8" in finding.message
