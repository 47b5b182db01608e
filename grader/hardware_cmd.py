"""`grade hardware`: measure this GPU's real ceilings and show them beside its spec sheet."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from grader import gpulock
from grader.build import Toolchain, ToolchainError, cache_dir
from grader.device import probe
from grader.result import ExitCode


def run(refresh: bool = False) -> int:
    from hardware.measure import MeasureError, comparison_rows, measure
    from hardware.specs import spec_for

    out, err = Console(), Console(stderr=True)
    found = probe()
    if found.gpu is None:
        err.print(f"[yellow]Measuring needs an NVIDIA GPU, and none was found on this machine ({found.reason}).[/yellow]")
        return int(ExitCode.NOT_GRADED)
    try:
        toolchain = Toolchain.find()
    except ToolchainError as exc:
        err.print(f"[red]{exc}[/red]")
        return int(ExitCode.NOT_GRADED)
    gpu = found.gpu
    try:
        with err.status(f"measuring {gpu.name}") as status:
            with gpulock.exclusive(gpu.uuid or f"gpu{gpu.index}", "grade hardware", status.update):
                measured = measure(str(toolchain.nvcc), gpu.arch, cache_dir() / "hardware", refresh=refresh,
                                   progress=lambda line: status.update(f"measuring {gpu.name}: {line.strip()}"))
    except (MeasureError, gpulock.GpuBusy) as exc:
        err.print(f"[red]Could not measure this GPU:[/red] {exc}")
        return int(ExitCode.NOT_GRADED)
    spec = spec_for(gpu.name)
    table = Table(title=f"{gpu.name} ({gpu.arch}), {gpu.sms} SMs: measured here vs "
                        f"{spec.name + ' spec sheet' if spec else 'no spec sheet known for this GPU'}",
                  header_style="bold")
    for col in ("quantity", "measured", "spec sheet", "measured / spec"):
        table.add_column(col, justify="left" if col == "quantity" else "right")
    for row in comparison_rows(measured, spec):
        table.add_row(*row)
    out.print(table)
    out.print(f"Cached in {cache_dir() / 'hardware'}; the grader's roofline now uses these ceilings "
              "(`grade hardware --refresh` measures again).")
    return int(ExitCode.PASSED)
