"""Charts as server-side SVG: no chart library, no script, nothing fetched at run time.

A chart is a list of times and, per series, one value per time (None: no data).
Values are escaped; colours are fixed per series order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from html import escape

from markupsafe import Markup

COLOURS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563")
_W, _H = 640, 180
_LEFT, _RIGHT, _TOP, _BOTTOM = 44, 8, 10, 22


def line_chart(
    times: Sequence[datetime],
    series: Mapping[str, Sequence[float | None]],
    *,
    label: str,
    unit: str = "",
) -> Markup:
    """A line per series over `times`, with the y axis from 0 to the largest value."""
    peak = max((v for values in series.values() for v in values if v is not None), default=0.0)
    top = _nice(peak)
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    n = max(len(times) - 1, 1)

    def x(i: int) -> float:
        return _LEFT + plot_w * i / n

    def y(v: float) -> float:
        return _TOP + plot_h * (1 - v / top)

    parts = [
        f'<svg class="chart" viewBox="0 0 {_W} {_H}" role="img" aria-label="{escape(label)}">',
        f'<line x1="{_LEFT}" y1="{_TOP + plot_h}" x2="{_W - _RIGHT}" y2="{_TOP + plot_h}" '
        'class="axis"/>',
        f'<text x="{_LEFT - 4}" y="{_TOP + 4}" class="tick" text-anchor="end">'
        f"{_fmt(top)}{escape(unit)}</text>",
        f'<text x="{_LEFT - 4}" y="{_TOP + plot_h}" class="tick" text-anchor="end">0</text>',
    ]
    if times:
        parts.append(
            f'<text x="{_LEFT}" y="{_H - 6}" class="tick">{times[0]:%H:%M}</text>'
            f'<text x="{_W - _RIGHT}" y="{_H - 6}" class="tick" text-anchor="end">'
            f"{times[-1]:%H:%M}</text>"
        )
    for k, (name, values) in enumerate(series.items()):
        colour = COLOURS[k % len(COLOURS)]
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values) if v is not None)
        if points:
            parts.append(
                f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2">'
                f"<title>{escape(name)}</title></polyline>"
            )
    parts.append("</svg>")
    legend = "".join(  # swatches are SVG: the page's CSP allows no inline style
        f'<span class="key"><svg width="10" height="10" aria-hidden="true"><rect width="10" '
        f'height="10" rx="2" fill="{COLOURS[k % len(COLOURS)]}"/></svg> {escape(name)}</span>'
        for k, name in enumerate(series)
    )
    return Markup("".join(parts) + f'<div class="legend">{legend or "no data yet"}</div>')


def _nice(peak: float) -> float:
    """The smallest of 1, 2, 5 x 10^k at or above peak (at least 1)."""
    if peak <= 1:
        return 1.0
    scale = 1.0
    while True:
        for step in (1, 2, 5):
            if step * scale >= peak:
                return step * scale
        scale *= 10


def _fmt(value: float) -> str:
    return f"{value:g}"
