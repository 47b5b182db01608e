"""Usage lines of the `grade` commands in the usual form: ``grade exercise [OPTIONS] EXERCISE``.

Recent typer releases write a required argument in braces (``{exercise}``), which reads as a
placeholder left unfilled. Commands made with ``cls=Command`` name it plainly; an optional argument
keeps its brackets.
"""
from __future__ import annotations

import re

from typer.core import TyperCommand


class Command(TyperCommand):
    def collect_usage_pieces(self, ctx):  # noqa: ANN001, ANN201 - click's own signature
        return [re.sub(r"^\{(.+)\}(\.\.\.)?$", r"\1\2", piece) for piece in super().collect_usage_pieces(ctx)]
