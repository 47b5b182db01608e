"""Hardware counters with Nsight Compute: run ncu on the learner's kernels only,
read the report with NVIDIA's ``ncu_report`` module, and keep what teaches.

The worker runs each task's entry point once at its first benchmark size between
cudaProfilerStart/Stop, inside an NVTX range named after the task; ncu is started
with ``--profile-from-start off`` so the grader's own kernels are never profiled,
and the NVTX range tells which task each kernel belongs to.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from grader.build import find_cuda_tool
from grader.protocol import Job, Libraries
from grader.result import KernelProfile, Profile
from grader.runner import worker_env
from grader.spec import Exercise

NCU_TIMEOUT_S = float(os.environ.get("S2S_NCU_TIMEOUT", "180"))
MAX_KERNELS = 24
NVTX_PREFIX = "s2s/"
SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis", "WarpStateStats")
EXTRA_METRICS = (
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "smsp__sass_inst_executed_op_shared_ld.sum",
    "smsp__sass_inst_executed_op_shared_st.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
)
PERMISSION_HELP = (
    "Nsight Compute may not read this GPU's performance counters (ERR_NVGPUCTRPERM). Run the grader as "
    "an administrator, or allow all users once with `echo 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' "
    "| sudo tee /etc/modprobe.d/ncu.conf` and a reboot. Everything else was graded; only the counters are missing.")


def find_ncu() -> str | None:
    return find_cuda_tool("ncu")


def import_ncu_report(ncu: str | None = None):
    """The ncu_report module: the PyPI package, else the copy inside Nsight Compute
    (``extras/python`` next to the ncu binary), else None."""
    try:
        import ncu_report
        return ncu_report
    except ImportError:
        pass
    ncu = ncu or find_ncu()
    if ncu is None:
        return None
    base = Path(ncu).resolve().parent
    for candidate in (base / "extras" / "python", base.parent / "extras" / "python"):
        if (candidate / "ncu_report.py").is_file():
            sys.path.append(str(candidate))
            try:
                import ncu_report
                return ncu_report
            except ImportError:
                return None
    return None


def profile_tasks(exercise: Exercise, tasks: list[str], libraries: dict[str, Libraries], seed: int,
                  device: int = 0) -> dict[str, Profile]:
    """One ncu run for all tasks; a Profile per task (unavailable ones say why)."""
    ncu = find_ncu()
    if ncu is None:
        return _all(tasks, Profile(False, "Nsight Compute (ncu) was not found on PATH, so there are no hardware "
                                          "counters. Install Nsight Compute (it ships with the CUDA toolkit) "
                                          "and put its folder on PATH."))
    if import_ncu_report(ncu) is None:
        return _all(tasks, Profile(False, "the Python module ncu_report is missing, so the counters cannot be "
                                          "read: `pip install ncu-report`."))
    with tempfile.TemporaryDirectory(prefix="s2s-ncu-") as tmp:
        report = Path(tmp) / "profile.ncu-rep"
        events = Path(tmp) / "events.jsonl"
        job = Job(mode="profile", exercise_folder=str(exercise.folder), order=tasks, seed=seed,
                  tasks=libraries, device=device, nvtx_prefix=NVTX_PREFIX)
        cmd = [ncu, "--profile-from-start", "off", "--clock-control", "none", "--nvtx",
               "--launch-count", str(MAX_KERNELS), "--target-processes", "all",
               *[a for s in SECTIONS for a in ("--section", s)],
               "--metrics", ",".join(EXTRA_METRICS),
               "--export", str(report), "--force-overwrite",
               sys.executable, "-m", "grader.worker", str(events)]
        try:
            proc = subprocess.run(cmd, input=job.to_json(), capture_output=True, text=True,
                                  timeout=NCU_TIMEOUT_S, env=worker_env(), cwd=str(exercise.folder),
                                  start_new_session=True)
        except subprocess.TimeoutExpired:
            return _all(tasks, Profile(False, f"Nsight Compute did not finish within {NCU_TIMEOUT_S:g} s; "
                                              "the grade is complete without counters."))
        output = proc.stdout + proc.stderr
        if "ERR_NVGPUCTRPERM" in output:
            return _all(tasks, Profile(False, PERMISSION_HELP))
        if not report.is_file():
            tail = "\n".join(line for line in output.splitlines() if "==ERROR==" in line or "==WARNING==" in line)
            return _all(tasks, Profile(False, "Nsight Compute produced no report" +
                                       (f": {tail.strip()[:500]}" if tail.strip() else ".")))
        keep = os.environ.get("S2S_KEEP_NCU_REPORT")
        if keep:  # for recording test fixtures
            shutil.copy(report, keep)
        return summarize(report, tasks)


def _all(tasks: list[str], profile: Profile) -> dict[str, Profile]:
    return {t: profile for t in tasks}


def summarize(report: Path, tasks: list[str]) -> dict[str, Profile]:
    """Turn an ncu report into a short teaching summary per task."""
    ncu_report = import_ncu_report()
    ctx = ncu_report.load_report(str(report))
    per_task: dict[str, list[KernelProfile]] = {t: [] for t in tasks}
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for i in range(rng.num_actions()):
            action = rng.action_by_idx(i)
            task = _task_of(action, tasks)
            if task is not None:
                per_task[task].append(kernel_profile(action))
    out = {}
    for t, kernels in per_task.items():
        out[t] = Profile(True, "", kernels) if kernels else Profile(
            True, "no kernel was launched at the benchmark size, so there is nothing to profile", [])
    return out


def _task_of(action: Any, tasks: list[str]) -> str | None:
    state = action.nvtx_state()
    if state is None:
        return tasks[0] if len(tasks) == 1 else None
    for domain_id in state.domains():
        domain = state.domain_by_id(domain_id)
        for name in domain.push_pop_ranges():
            if name.startswith(NVTX_PREFIX) and name[len(NVTX_PREFIX):] in tasks:
                return name[len(NVTX_PREFIX):]
    return None


def _metric(action: Any, name: str) -> float | None:
    m = action.metric_by_name(name)
    if m is None:
        return None
    try:
        return float(m.as_double())
    except (TypeError, ValueError):
        return None


STALL_LABELS = {
    "long_scoreboard": "waiting on global/local memory (long scoreboard)",
    "short_scoreboard": "waiting on shared memory or special math (short scoreboard)",
    "barrier": "waiting at __syncthreads (barrier)",
    "membar": "waiting on a memory fence (membar)",
    "lg_throttle": "global/local memory queue full (lg throttle)",
    "mio_throttle": "shared-memory/special-instruction queue full (mio throttle)",
    "math_pipe_throttle": "arithmetic pipe busy (math pipe throttle)",
    "wait": "fixed-latency dependency (wait)",
    "not_selected": "ready but another warp was picked (not selected)",
    "selected": "issuing (selected)",
    "no_instruction": "instruction cache miss (no instruction)",
    "branch_resolving": "resolving a branch (branch resolving)",
    "dispatch_stall": "dispatch stall",
    "drain": "draining memory writes at exit (drain)",
    "imc_miss": "constant cache miss (imc miss)",
    "tex_throttle": "texture queue full (tex throttle)",
    "sleeping": "sleeping",
    "misc": "miscellaneous",
    "gmma": "waiting on warpgroup MMA (gmma)",
}


def kernel_profile(action: Any) -> KernelProfile:
    ncu_report = import_ncu_report()
    m = lambda name: _metric(action, name)  # noqa: E731
    limits = {
        "registers": m("launch__occupancy_limit_registers"),
        "shared memory": m("launch__occupancy_limit_shared_mem"),
        "warps per SM": m("launch__occupancy_limit_warps"),
        "blocks per SM": m("launch__occupancy_limit_blocks"),
        "barriers": m("launch__occupancy_limit_barriers"),
    }
    known = {k: v for k, v in limits.items() if v is not None}
    theoretical = m("sm__maximum_warps_per_active_cycle_pct")
    # Name a limiter only when occupancy is actually limited below 100%.
    limiter = min(known, key=known.get) if known and theoretical is not None and theoretical < 99.5 else None
    stalls = []
    for reason, label in STALL_LABELS.items():
        value = m(f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio")
        if value and reason != "selected":
            stalls.append((label, value))
    total = sum(v for _, v in stalls) or 1.0
    top = [(label, 100.0 * v / total) for label, v in sorted(stalls, key=lambda x: -x[1])[:3]]
    advice = []
    for rule in action.rule_results_as_dicts():
        msg = rule.get("rule_message") or {}
        if msg.get("type") in (ncu_report.MsgType_OPTIMIZATION, ncu_report.MsgType_WARNING) and msg.get("message") \
                and "could not be found" not in msg["message"]:
            text = _clean(msg["message"])
            title = msg.get("title") or rule.get("name", "")
            advice.append(f"{title}: {text}" if title else text)
    ld, st = (m("smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio"),
              m("smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio"))
    conflicts = [v for v in (m("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"),
                             m("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum")) if v is not None]
    dram = m("dram__bytes.sum.per_second")
    block, grid = m("launch__block_size"), m("launch__grid_size")
    return KernelProfile(
        name=action.name(ncu_report.IAction.NameBase_FUNCTION),
        duration_us=(m("gpu__time_duration.sum") or 0.0) / 1e3,
        memory_pct=m("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
        compute_pct=m("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        dram_gbs=dram / 1e9 if dram is not None else None,
        achieved_occupancy_pct=_pct(m("sm__warps_active.avg.pct_of_peak_sustained_active")),
        theoretical_occupancy_pct=m("sm__maximum_warps_per_active_cycle_pct"),
        occupancy_limiter=limiter,
        registers=int(m("launch__registers_per_thread") or 0) or None,
        block=str(int(block)) if block else None,
        grid=str(int(grid)) if grid else None,
        global_load_efficiency_pct=100.0 * ld / 32.0 if ld else None,
        global_store_efficiency_pct=100.0 * st / 32.0 if st else None,
        bank_conflicts=sum(conflicts) if conflicts else None,
        shared_instructions=_sum_or_none(m("smsp__sass_inst_executed_op_shared_ld.sum"),
                                         m("smsp__sass_inst_executed_op_shared_st.sum")),
        dram_bytes=_sum_or_none(m("dram__bytes_read.sum"), m("dram__bytes_write.sum")),
        fp32_flops=_fp32_flops(m),
        tensor_pipe_pct=m("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"),
        top_stalls=top,
        advice=advice[:4],
    )


def _pct(value: float | None) -> float | None:
    """Sampled percentages can land a hair above 100; a learner should never read 100.01%."""
    return None if value is None else min(max(value, 0.0), 100.0)


def _sum_or_none(*values: float | None) -> float | None:
    return None if any(v is None for v in values) else float(sum(values))


def _fp32_flops(m) -> float | None:
    fadd = m("smsp__sass_thread_inst_executed_op_fadd_pred_on.sum")
    fmul = m("smsp__sass_thread_inst_executed_op_fmul_pred_on.sum")
    ffma = m("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum")
    if fadd is None or fmul is None or ffma is None:
        return None
    return fadd + fmul + 2.0 * ffma


def _clean(text: str) -> str:
    """ncu's rule text links sections as @section:Id:Title@; keep the title."""
    import re
    text = re.sub(r"@section:[^:@]*:([^@]*)@", r"\1", text)
    text = re.sub(r"@[a-z_]+:[^:@]*:([^@]*)@", r"\1", text)
    return " ".join(text.split())
