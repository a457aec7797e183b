"""A matplotlib figure that shows as an image in a notebook whatever backend is active.

IPython shows a figure as a PNG only while matplotlib's inline backend is on: after
``matplotlib.use("Agg")`` (common in scripts and CI) a returned figure shows as ``<Figure size …>``.
:class:`ImageFigure` renders itself (``_repr_png_``) so the plots of this library always show.
This module imports matplotlib: import it only where a plot is made.
"""

from __future__ import annotations

import io

from matplotlib.figure import Figure


class ImageFigure(Figure):
    """A ``Figure`` that displays as a PNG in IPython under any backend (the inline backend's own
    formatter, when active, still takes precedence)."""

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", bbox_inches="tight")
        return buffer.getvalue()
