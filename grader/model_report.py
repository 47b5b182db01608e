"""The report of `grade model`: its plots as PNG, its headline, and the terminal and notebook views
of a :class:`~grader.model_result.ModelResult`."""
from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

from grader.model_result import ModelResult, Plot
from grader.result import ExitCode


def plot_png(plot: Plot) -> bytes | None:
    """The plot as a PNG, or None where matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for s in plot.series:
        x = s.x if s.x is not None else list(range(1, len(s.y) + 1))
        ax.plot(x, s.y, color=s.color, alpha=s.alpha, linewidth=s.width, label=s.label or None)
    if plot.log_y:
        ax.set_yscale("log")
    ax.set_xlabel(plot.xlabel)
    ax.set_ylabel(plot.ylabel)
    ax.set_title(plot.title)
    ax.grid(True, which="both", alpha=0.3)
    if any(s.label for s in plot.series):
        ax.legend()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def _status_mark(status: str) -> str:
    return {"ready": "ready", "missing": "MISSING", "failed": "FAILED", "not run": "not run"}[status]


def headline(r: ModelResult) -> str:
    missing = [k for k in r.kernels if k.status in ("missing", "failed")]
    if missing:
        return ("These kernels are missing or not yet correct, and nothing stands in for them: "
                + ", ".join(f"{k.task} ({k.exercise})" for k in missing)
                + ". Finish them in their exercises; the PyTorch twin below shows what the model will reach.")
    if r.run.fatal:
        return f"The training did not finish: {r.run.fatal}"
    if r.run.error:
        return f"Training on your kernels stopped: {r.run.error}"
    if r.exit_code == ExitCode.NOT_GRADED:
        return r.notice or r.run.notice or "Your kernels were not run here."
    if r.exit_code == ExitCode.PASSED:
        return "Passed: a model trained and served on nothing but your kernels matches PyTorch."
    return "Not yet: the model trained on your kernels misses a bar (below)."


def render_rich(r: ModelResult):
    from rich.console import Group
    from rich.table import Table as RichTable
    from rich.text import Text

    parts: list[Any] = [Text(f"Capstone: {r.model or 'a model'} trained on your kernels", style="bold")]
    if r.run.about:
        parts.append(Text(f"{r.run.about}; device: {r.run.device}"))
    code = r.exit_code
    style = {ExitCode.PASSED: "bold green", ExitCode.FAILED: "bold red"}.get(code, "bold yellow")
    parts.append(Text(headline(r), style=style))
    if r.run.notice and r.run.notice != headline(r):
        parts.append(Text(r.run.notice))

    kernels = RichTable(title="Your kernels", title_justify="left")
    for col in ("exercise", "kernel", "used for", "status"):
        kernels.add_column(col, overflow="fold")
    for k in r.kernels:
        kernels.add_row(k.exercise, k.task, k.role, f"{_status_mark(k.status)}: {k.summary}")
    parts.append(kernels)

    if r.bars and any(b.passed is not None for b in r.bars):
        table = RichTable(title="Bars", title_justify="left")
        for col in ("", "needed", "got", ""):
            table.add_column(col)
        for b in r.bars:
            table.add_row(b.what, b.needed, b.got, "-" if b.passed is None else ("passed" if b.passed else "MISSED"))
        parts.append(table)
    for t in r.tables:
        if not t.rows:
            continue
        table = RichTable(title=t.title, title_justify="left")
        for col in t.columns:
            table.add_column(col, overflow="fold")
        for row in t.rows:
            table.add_row(*row)
        parts.append(table)
    for line in _footer(r):
        parts.append(Text(line))
    return Group(*parts)


def _footer(r: ModelResult) -> list[str]:
    out = Path(r.out) if r.out else None
    lines = [f"{Path(p).stem.replace('_', ' ')}: {out / p}" for p in r.plots if out and (out / p).is_file()]
    lines += r.lines
    if r.run.fatal and r.run.output:
        lines.append("its last output:\n" + r.run.output)
    return lines


def render_html(r: ModelResult) -> str:
    """The notebook's view: the same tables, and the plots inline."""
    from rich.console import Console

    # force_jupyter=False: in a notebook, rich would otherwise show what it prints as well, and the
    # report would appear twice.
    console = Console(record=True, width=120, file=io.StringIO(), force_jupyter=False)
    console.print(render_rich(r))
    html = console.export_html(inline_styles=True, code_format="<pre style='font-size:12px'>{code}</pre>")
    for name in r.plots:
        png = Path(r.out) / name
        if png.is_file():
            html += f'<img src="data:image/png;base64,{base64.b64encode(png.read_bytes()).decode()}"/>'
    return html
