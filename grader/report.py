"""Rendering a GradeResult: a rich table for the terminal, HTML for notebooks."""
from __future__ import annotations

import html
from rich.console import Console, Group
from rich.measure import Measurement as RichMeasurement
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from grader.build import BuildResult
from grader.result import GradeResult, KernelProfile, Measurement, Profile, TaskResult

STATUS_STYLE = {"passed": "green", "failed": "red", "not run": "yellow"}


# --------------------------------------------------------------------------- cells (shared by both renderers)

def fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def compiled_cell(build: BuildResult | None) -> str:
    if build is None:
        return "-"
    if not build.ok:
        return "compile error"
    if not build.kernels:
        return "no kernel yet"
    regs = max(k.registers for k in build.kernels)
    spills = sum(k.spills for k in build.kernels)
    smem = max(k.shared_bytes for k in build.kernels)
    n = len(build.kernels)
    kernels = f"{n} kernels, " if n > 1 else ""
    return f"{kernels}{regs} regs, {spills} B spilled, {smem} B smem"


def correct_cell(t: TaskResult) -> str:
    if t.correct is None and not t.cases:
        return "-"
    return f"{t.cases_passed}/{t.cases_total}"


def time_cell(t: TaskResult) -> str:
    if not t.timing:
        return "-"
    sizes = t.timing.sizes
    return fmt_time(sizes[0].learner_s) if len(sizes) == 1 else f"{len(sizes)} sizes"


def speedup_cell(t: TaskResult) -> str:
    if not t.timing:
        return "-"
    mark = "✓" if t.timing.passed else "✗"
    mean = " geo-mean" if len(t.timing.sizes) > 1 else ""
    return f"{t.timing.speedup:.2f}x{mean} (needs {t.timing.min_speedup:g}x) {mark}"


def roofline_cell(t: TaskResult) -> str:
    if not t.timing:
        return "-"
    if len(t.timing.sizes) > 1:
        percent = t.timing.roofline_percent
        return "-" if percent is None else f"{percent:.0f}% geo-mean"
    r = t.timing.sizes[0].roofline
    if not r:
        return "-"
    if r.bound == "memory":
        return f"{r.percent:.0f}% ({r.achieved_gbs:.0f} GB/s)"
    return f"{r.percent:.0f}% ({r.achieved_tflops:.1f} TFLOP/s)"


def points_cell(t: TaskResult) -> str:
    return f"{t.points.total:g}/{t.points.max:g}" if t.points else "-"


def vendor_line(m: Measurement) -> str | None:
    if m.vendor_s is None:
        return None
    return (f"PyTorch's own implementation takes {fmt_time(m.vendor_s)}: yours runs at {m.vendor_ratio or 0.0:.2f}x "
            "its speed (information only; not graded)")


def roofline_line(m: Measurement) -> str | None:
    r = m.roofline
    if not r:
        return None
    limit = (f"{r.bandwidth_gbs:.0f} GB/s" if r.bound == "memory"
             else f"{r.compute_tflops:.0f} TFLOP/s")
    return (f"roofline: this work needs at least {fmt_time(r.floor_s)} ({r.bound}-bound at {limit}); "
            f"yours took {fmt_time(m.learner_s)}, {r.percent:.0f}% of the roofline. "
            f"Ceilings: {r.source}.")


def size_line(m: Measurement) -> str:
    """One benchmark size of several, in a line."""
    achieved = ""
    if m.roofline:
        r = m.roofline
        rate = f"{r.achieved_gbs:.0f} GB/s" if r.bound == "memory" else f"{r.achieved_tflops:.1f} TFLOP/s"
        achieved = f", {r.percent:.0f}% of the roofline ({rate})"
    vendor = f", {m.vendor_ratio:.2f}x PyTorch's speed" if m.vendor_ratio else ""
    return f"at {m.label}: {fmt_time(m.learner_s)}, {m.speedup:.2f}x the baseline{achieved}{vendor}"


def clock_line(m: Measurement, several: bool) -> str | None:
    """Where the grader's own clock overruled the events of the learner's process."""
    if m.clock != "grader" or m.learner_events_s is None:
        return None
    at = f" at {m.label}" if several else ""
    if m.events_missed_work:
        why = "work ran outside the events (another stream, a host thread), or the events were not what they seemed"
    else:
        why = ("your call outlasted a time slice, and the events also counted the slices the GPU gave the "
               "grader's own process meanwhile")
    return (f"The grader's own clock measured {fmt_time(m.learner_s)}{at} where the CUDA events in your "
            f"process said {fmt_time(m.learner_events_s)}: {why}, so the grader's figure stands.")


def degraded(isolation: str) -> bool:
    """The learner's code ran without the protections of a separate, confined process."""
    return bool(isolation) and (not isolation.startswith("a separate process") or "not confined" in isolation)


def timing_lines(t: TaskResult) -> list[str]:
    if not t.timing:
        return []
    sizes = t.timing.sizes
    clocks = [line for m in sizes if (line := clock_line(m, len(sizes) > 1))]
    if len(sizes) == 1:
        return [line for line in (roofline_line(sizes[0]), vendor_line(sizes[0])) if line] + clocks
    lines = [size_line(m) for m in sizes] + clocks
    if sizes[0].roofline:
        lines.append(f"Ceilings: {sizes[0].roofline.source}.")
    if t.timing.vendor_ratio:
        lines.append("(PyTorch's speed is information only; not graded)")
    return lines


def profile_lines(p: Profile | None) -> list[str]:
    if p is None:
        return []
    if not p.available or not p.kernels:
        return [f"Nsight Compute: {p.message}"] if p.message else []
    return [line for k in p.kernels for line in kernel_lines(k)]


def kernel_lines(k: KernelProfile) -> list[str]:
    launch = f"<<<{k.grid}, {k.block}>>>" if k.grid and k.block else ""
    lines = [f"{k.name}{launch}: {k.duration_us:.1f} µs"
             + (f", DRAM {k.dram_gbs:.0f} GB/s" if k.dram_gbs is not None else "")
             + (f"; memory {k.memory_pct:.0f}% and compute {k.compute_pct:.0f}% of peak"
                if k.memory_pct is not None and k.compute_pct is not None else "")]
    if k.achieved_occupancy_pct is not None:
        occ = (f"  occupancy {k.achieved_occupancy_pct:.0f}% achieved of {k.theoretical_occupancy_pct or 0:.0f}% "
               "theoretical")
        if k.occupancy_limiter:
            occ += f" (limited by {k.occupancy_limiter})"
        if k.registers:
            occ += f"; {k.registers} registers/thread"
        lines.append(occ)
    access = []
    if k.global_load_efficiency_pct is not None:
        access.append(f"global loads use {k.global_load_efficiency_pct:.0f}% of each fetched sector")
    if k.global_store_efficiency_pct is not None:
        access.append(f"stores {k.global_store_efficiency_pct:.0f}%")
    if k.bank_conflicts is not None and k.shared_instructions:
        # Per instruction, so that it reads the same at any size: 0 is conflict-free, 31 a 32-way conflict.
        access.append(f"shared memory: {k.bank_conflicts / k.shared_instructions:.2f} extra bank-conflict "
                      "wavefronts per instruction (0 is conflict-free, 31 a 32-way conflict)")
    elif k.bank_conflicts is not None and k.shared_instructions is None:
        access.append(f"{k.bank_conflicts:.0f} shared-memory bank conflicts")
    if access:
        lines.append("  " + "; ".join(access))
    if k.top_stalls:
        lines.append("  warps mostly stall on: " + ", ".join(f"{r} {p:.0f}%" for r, p in k.top_stalls))
    for advice in k.advice[:2]:
        lines.append(f"  ncu: {advice}")
    return lines


def header_lines(r: GradeResult) -> list[str]:
    lines = [f"Exercise {r.exercise}: {r.title}", f"submission: {r.submission}"]
    if r.device:
        dev = f"GPU: {r.device.name} ({r.device.arch})"
        if r.device.copy_gbs:
            dev += f", device copy bandwidth measured now: {r.device.copy_gbs:.0f} GB/s"
        lines.append(dev)
    return lines


def detail_lines(t: TaskResult) -> list[str]:
    lines = [t.summary] if t.summary else []
    if t.error and t.error.message:
        # The summary is usually the message's first line (the first finding, the compiler's first
        # error), with a prefix: the rest of the message is what the panel adds.
        more = t.error.message.strip().splitlines()
        if more and t.summary.endswith(more[0].strip()):
            more = more[1:]
        if "\n".join(more).strip():
            lines.append("\n".join(more))
    failing = next((c for c in t.cases if not c.passed), None)
    if failing and t.error is None:
        lines.append(f"case: {failing.case}")
    if t.build and t.build.ok and t.build.log:
        lines.append("compiler warnings:\n" + t.build.log)
    rest = t.sanitizer[1:]          # the summary holds the first finding
    for finding in rest[:5]:
        lines.append(f"{finding['tool']} at {finding['location']}: {finding['message']}")
    if len(rest) > 5:
        lines.append(f"... {len(rest) - 5} more (S2S_KEEP_SANITIZER_LOG=DIR keeps the full logs)")
    lines.extend(timing_lines(t))
    lines.extend(profile_lines(t.profile))
    return lines


# --------------------------------------------------------------------------- terminal

def summary_table(r: GradeResult) -> Table:
    table = Table(title=None, show_lines=False, header_style="bold")
    for col in ("task", "compiled", "correct", "time", "speedup vs naive", "roofline", "points"):
        table.add_column(col, no_wrap=col in ("task", "points"))
    for t in r.tasks:
        style = STATUS_STYLE.get(t.status, "")
        table.add_row(Text(t.name, style=style), compiled_cell(t.build), correct_cell(t), time_cell(t),
                      speedup_cell(t), roofline_cell(t), points_cell(t))
    return table


def report_width(r: GradeResult, console: Console) -> int:
    """Columns the report needs so that no cell of its table is cut (at least 100)."""
    widest = RichMeasurement.get(console, console.options.update(width=1000), summary_table(r)).maximum
    return max(100, widest)


def fitted(console: Console, renderable, least: int = 80) -> Console:
    """The console to print ``renderable`` on. A file or a pipe has no width, and rich would cut
    every line at 80 columns: there, a console on the same file as wide as ``renderable`` needs."""
    if console.is_terminal:
        return console
    widest = RichMeasurement.get(console, console.options.update(width=1000), renderable).maximum
    return Console(file=console.file, width=max(least, widest))


def render_rich(r: GradeResult) -> Group:
    table = summary_table(r)
    parts: list = [Text("\n".join(header_lines(r)), style="bold"), table]
    for t in r.tasks:
        lines = detail_lines(t)
        if lines:
            parts.append(Panel(Text("\n".join(lines)), title=f"{t.name}: {t.status}",
                               border_style=STATUS_STYLE.get(t.status, ""), title_align="left"))
    if r.output.strip():
        parts.append(Panel(Text(r.output.strip()[-2000:]), title="your code printed", title_align="left"))
    if r.notice:
        parts.append(Text(r.notice, style="yellow"))
    if degraded(r.isolation):
        parts.append(Text(f"Isolation: {r.isolation}.", style="yellow"))
    verdict = {0: ("all tasks passed", "bold green"), 1: ("some tasks failed", "bold red"),
               3: ("not fully graded", "bold yellow")}[int(r.exit_code)]
    parts.append(Text(f"{r.points:g}/{r.max_points:g} points: {verdict[0]} ({r.seconds:.1f} s)", style=verdict[1]))
    return Group(*parts)


# --------------------------------------------------------------------------- HTML

_CSS = """
<style>
.s2s {font-family: system-ui, sans-serif; font-size: 13px; line-height: 1.4}
.s2s table {border-collapse: collapse; margin: 6px 0}
.s2s th, .s2s td {border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top}
.s2s th {background: #f3f3f3}
.s2s .passed {color: #17803d; font-weight: 600} .s2s .failed {color: #b42318; font-weight: 600}
.s2s .notrun {color: #9a6700; font-weight: 600}
.s2s pre {background: #f7f7f7; padding: 6px; white-space: pre-wrap; margin: 4px 0}
.s2s .notice {background: #fff8e1; border-left: 4px solid #f0b400; padding: 6px 10px; margin: 6px 0}
.s2s details {margin: 4px 0}
</style>"""


def _h(text: str) -> str:
    return html.escape(str(text))


def render_html(r: GradeResult) -> str:
    rows = []
    for t in r.tasks:
        cls = {"passed": "passed", "failed": "failed"}.get(t.status, "notrun")
        cells = [f'<td class="{cls}">{_h(t.name)}</td>'] + [
            f"<td>{_h(c)}</td>" for c in (compiled_cell(t.build), correct_cell(t), time_cell(t),
                                         speedup_cell(t), roofline_cell(t), points_cell(t))]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    head = "".join(f"<th>{c}</th>" for c in
                   ("task", "compiled", "correct", "time", "speedup vs naive", "roofline", "points"))
    out = [_CSS, '<div class="s2s">', "<div><b>" + "<br>".join(_h(l) for l in header_lines(r)) + "</b></div>",
           f"<table><tr>{head}</tr>{''.join(rows)}</table>"]
    picture = _roofline_img(r)
    if picture:
        out.append(picture)
    for t in r.tasks:
        lines = detail_lines(t)
        if not lines:
            continue
        cls = {"passed": "passed", "failed": "failed"}.get(t.status, "notrun")
        out.append(f'<details open><summary><span class="{cls}">{_h(t.name)}: {_h(t.status)}</span></summary>'
                   f"<pre>{_h(chr(10).join(lines))}</pre></details>")
    if r.output.strip():
        out.append(f"<details><summary>your code printed</summary><pre>{_h(r.output.strip()[-2000:])}</pre></details>")
    if r.notice:
        out.append(f'<div class="notice">{_h(r.notice)}</div>')
    if degraded(r.isolation):
        out.append(f'<div class="notice">Isolation: {_h(r.isolation)}.</div>')
    out.append(f"<p><b>{r.points:g}/{r.max_points:g} points</b> ({r.seconds:.1f} s)</p></div>")
    return "".join(out)


def _roofline_img(r: GradeResult) -> str:
    """The roofline as an inline PNG; empty when nothing was timed or matplotlib is missing."""
    if not any(t.timing for t in r.tasks):
        return ""
    try:
        from grader.roofline_view import roofline_png
        png = roofline_png(r)
    except ImportError:
        return ""
    if not png:
        return ""
    import base64
    data = base64.b64encode(png).decode()
    return f'<div><img alt="roofline" style="max-width: 820px" src="data:image/png;base64,{data}"></div>'


# --------------------------------------------------------------------------- notebooks

def register_notebook_display() -> None:
    """Have IPython show a GradeResult as the HTML report (the result model knows no views)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["text/html"].for_type(GradeResult, render_html)
