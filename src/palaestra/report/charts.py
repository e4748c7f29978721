"""Hand-written SVG charts: histograms, bars, lines and a heatmap, as strings.

Drawing in Python keeps the report one offline file with no chart library and no script needed to see
the numbers, and it makes charts testable as text. Every label goes through ``esc``: task ids, kinds and
group names come from users and models.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_left
from collections.abc import Sequence
from html import escape

__all__ = ["bar_chart", "esc", "fmt", "fmt_s", "heatmap", "histogram", "line_chart", "nice_top", "reward_color"]

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#ca8a04")
FAILED_COLOR = "#6b7280"
MISSING_COLOR = "#f3f4f6"


def esc(value: object) -> str:
    return escape(str(value), quote=True)


def fmt(x: float) -> str:
    """Short tick labels: 0.25, 12, 3.4k, 1.2e-05."""
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 10_000:
        return f"{x / 1000:.0f}k"
    if a >= 1000:
        return f"{x / 1000:.1f}k"
    if a >= 10:
        return f"{x:.0f}"
    if a >= 0.01:
        return f"{x:.2f}".rstrip("0").rstrip(".")
    return f"{x:.1e}"


def reward_color(r: float) -> str:
    """Red (0) through amber (0.5) to green (1); rewards outside [0, 1] are clamped."""
    t = min(1.0, max(0.0, r))
    stops = ((0.0, (220, 38, 38)), (0.5, (234, 179, 8)), (1.0, (22, 163, 74)))
    for (t0, c0), (t1, c1) in itertools.pairwise(stops):
        if t <= t1:
            f = (t - t0) / (t1 - t0)
            r_, g, b = (round(a + (bb - a) * f) for a, bb in zip(c0, c1, strict=True))
            return f"#{r_:02x}{g:02x}{b:02x}"
    return "#16a34a"


def _frame(width: int, height: int, title: str, body: list[str], cls: str = "chart") -> str:
    return (f'<svg class="{cls}" role="img" aria-label="{esc(title)}" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
            f'<title>{esc(title)}</title>{"".join(body)}</svg>')


def _empty(title: str, width: int, height: int, note: str = "no data") -> str:
    return _frame(width, height, title, [
        f'<text x="{width / 2}" y="14" text-anchor="middle" class="ctitle">{esc(title)}</text>',
        f'<text x="{width / 2}" y="{height / 2 + 8}" text-anchor="middle" class="muted">{esc(note)}</text>'])


def nice_top(vmax: float, *, integer: bool = False, ticks: int = 4) -> tuple[float, float]:
    """An axis top >= vmax and a round tick step (1, 2, 2.5 or 5 × 10^k; whole numbers for counts)."""
    if vmax <= 0:
        return 1.0, 1.0 if integer else 0.25
    raw = vmax / ticks
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw and not (integer and m == 2.5 and mag < 10))
    if integer:
        step = max(1.0, round(step))
    return math.ceil(vmax / step - 1e-9) * step, step


def _y_axis(x0: float, y0: float, y1: float, vmax: float, body: list[str], vmin: float = 0.0,
            step: float | None = None) -> None:
    step = step or (vmax - vmin) / 4
    n = max(1, round((vmax - vmin) / step))
    for i in range(n + 1):
        v = vmin + step * i
        y = y0 - (y0 - y1) * i / n
        body.append(f'<line x1="{x0}" x2="{x0 - 4}" y1="{y:.1f}" y2="{y:.1f}" class="axis"/>'
                    f'<text x="{x0 - 6}" y="{y + 3:.1f}" text-anchor="end" class="tick">{esc(fmt(v))}</text>')
    body.append(f'<line x1="{x0}" x2="{x0}" y1="{y0}" y2="{y1}" class="axis"/>')


def _bins(values: Sequence[float], bins: int, log: bool | None) -> tuple[list[float], bool]:
    lo, hi = min(values), max(values)
    if log is None:
        positive = [v for v in values if v > 0]
        log = bool(positive) and len(positive) == len(values) and hi / min(positive) > 100
    if log:
        lo_l, hi_l = math.log10(lo), math.log10(hi)
        if hi_l - lo_l < 1e-9:
            hi_l = lo_l + 1
        return [10 ** (lo_l + (hi_l - lo_l) * i / bins) for i in range(bins + 1)], True
    if hi - lo < 1e-12:  # one value: a window around it that stays on its side of zero
        pad = abs(lo) * 0.25 or 0.5
        lo, hi = (max(0.0, lo - pad) if lo >= 0 else lo - pad), hi + pad
    return [lo + (hi - lo) * i / bins for i in range(bins + 1)], False


def fmt_s(x: float) -> str:
    """Seconds as people read latencies: 350µs, 12ms, 1.4s, 2.5min."""
    if x == 0:
        return "0"
    if x < 0:
        return "-" + fmt_s(-x)
    if x < 1e-3:
        return f"{x * 1e6:.0f}µs"
    if x < 1:
        return f"{x * 1e3:.3g}ms"
    if x < 120:
        return f"{x:.3g}s"
    return f"{x / 60:.3g}min"


def _integer_edges(values: Sequence[float]) -> list[float] | None:
    """One bin per integer for small integer data (steps, k): ticks like 3.4 steps mean nothing."""
    lo, hi = min(values), max(values)
    if hi - lo > 40 or any(v != int(v) for v in values):
        return None
    return [lo - 0.5 + i for i in range(int(hi - lo) + 2)]


def bin_counts(values: Sequence[float], edges: Sequence[float]) -> list[int]:
    """How many values fall in each bin ``[edges[i], edges[i+1])``; values below the first edge count in
    the first bin and values from the last edge on in the last one. Found by bisecting the sorted values
    once per edge rather than the edges once per value: a report draws nine histograms of every rollout."""
    ordered = sorted(values)
    below = [bisect_left(ordered, e) for e in edges[1:-1]]  # values under each inner edge
    bounds = [0, *below, len(ordered)]
    return [bounds[i + 1] - bounds[i] for i in range(len(edges) - 1)]


def histogram(values: Sequence[float], *, title: str, xlabel: str = "", bins: int = 20,
              edges: Sequence[float] | None = None, log: bool | None = None, color: str = PALETTE[0],
              width: int = 360, height: int = 200, unit: str = "") -> str:
    """Counts per bin; log-spaced bins when the values span more than two decades (latencies do).
    ``unit="s"`` labels ticks as durations."""
    if not values:
        return _empty(title, width, height)
    integer = False
    if edges is None and unit != "s" and (iedges := _integer_edges(values)) is not None:
        edges, integer, log = iedges, True, False
    if edges is None:
        edges, log = _bins(values, bins, log)
    edges = list(edges)
    label_of = fmt_s if unit == "s" else fmt
    counts = bin_counts(values, edges)
    ml, mr, mt, mb = 42, 16, 22, 34
    x0, x1, y0, y1 = ml, width - mr, height - mb, mt
    top, step = nice_top(max(counts), integer=True)
    bw = (x1 - x0) / len(counts)
    body = [f'<text x="{width / 2}" y="14" text-anchor="middle" class="ctitle">{esc(title)}</text>']
    _y_axis(x0, y0, y1, top, body, step=step)
    for i, c in enumerate(counts):
        h = (y0 - y1) * c / top
        span = f"{label_of(edges[i] + 0.5)}" if integer else f"{label_of(edges[i])} – {label_of(edges[i + 1])}"
        body.append(f'<rect x="{x0 + i * bw + 0.5:.1f}" y="{y0 - h:.1f}" width="{max(bw - 1, 1):.1f}" '
                    f'height="{h:.1f}" fill="{color}"><title>{esc(span)}: {c}</title></rect>')
    if integer:
        step = max(1, len(counts) // 8)
        ticks = [(x0 + (i + 0.5) * bw, label_of(edges[i] + 0.5), "middle") for i in range(0, len(counts), step)]
    else:
        n = len(edges) - 1
        step = max(1, math.ceil(n / max(2, (width - 60) // 60)))  # labels at least ~60px apart
        picks = sorted(set(range(0, n + 1, step)) | {n})
        if len(picks) > 2 and picks[-1] - picks[-2] < step / 2:
            picks.pop(-2)  # keep the last label clear of its neighbour
        ticks = [(x0 + i * bw, label_of(edges[i]), "start" if i == 0 else "end" if i == n else "middle")
                 for i in picks]
    for x, text, anchor in ticks:
        body.append(f'<text x="{x:.1f}" y="{y0 + 13}" text-anchor="{anchor}" class="tick">{esc(text)}</text>')
    label = xlabel + (" (log scale)" if log else "")
    body.append(f'<line x1="{x0}" x2="{x1}" y1="{y0}" y2="{y0}" class="axis"/>'
                f'<text x="{(x0 + x1) / 2}" y="{height - 4}" text-anchor="middle" class="label">'
                f'{esc(label)}</text>')
    return _frame(width, height, title, body)


def bar_chart(labels: Sequence[str], values: Sequence[float], *, title: str,
              colors: Sequence[str] | None = None, notes: Sequence[str] | None = None, width: int = 420,
              value_fmt: str = "{:g}", empty: str = "none") -> str:
    """Horizontal bars, one per label; negative values extend left of a zero line (paired differences)."""
    if not labels:
        return _empty(title, width, 80, empty)
    row_h, mt = 20, 24
    height = mt + row_h * len(labels) + 10
    label_w = min(180, 8 + 7 * max(len(str(x)) for x in labels))
    texts = [value_fmt.format(v) + (f" {notes[i]}" if notes and notes[i] else "") for i, v in enumerate(values)]
    x_left, x_right = label_w, width - 10 - 6 * max(len(t) for t in texts)
    lo, hi = min(0.0, *values), max(0.0, *values)
    span = (hi - lo) or 1.0
    zero = x_left + (x_right - x_left) * (-lo) / span
    body = [f'<text x="{width / 2}" y="14" text-anchor="middle" class="ctitle">{esc(title)}</text>',
            f'<line x1="{zero:.1f}" x2="{zero:.1f}" y1="{mt - 4}" y2="{height - 6}" class="axis"/>']
    for i, (label, v) in enumerate(zip(labels, values, strict=True)):
        y = mt + i * row_h
        w = (x_right - x_left) * abs(v) / span
        x = zero if v >= 0 else zero - w
        color = colors[i] if colors else PALETTE[0]
        text = texts[i]
        short = label if len(label) <= 26 else label[:25] + "…"
        body.append(f'<text x="{label_w - 6}" y="{y + 13}" text-anchor="end" class="tick">{esc(short)}</text>'
                    f'<rect x="{x:.1f}" y="{y + 3}" width="{max(w, 1):.1f}" height="{row_h - 6}" '
                    f'fill="{color}"><title>{esc(label)}: {esc(text)}</title></rect>'
                    f'<text x="{(x + w + 4) if v >= 0 else (x - 4):.1f}" y="{y + 13}" '
                    f'text-anchor="{"start" if v >= 0 else "end"}" class="tick">{esc(text)}</text>')
    return _frame(width, height, title, body)


def line_chart(series: dict[str, list[tuple[float, float]]], *, title: str, xlabel: str, ylabel: str,
               ylim: tuple[float, float] = (0.0, 1.0), width: int = 420, height: int = 240,
               log2_x: bool = True) -> str:
    """Lines with markers and a legend; x on a log2 axis by default (k = 1, 2, 4, ...)."""
    points = [p for s in series.values() for p in s]
    if not points:
        return _empty(title, width, height)
    legend_h = 14 * len(series)
    ml, mr, mt, mb = 42, 14, 22, 36 + legend_h
    x0, x1, y0, y1 = ml, width - mr, height - mb, mt

    def tx(v: float) -> float:
        return math.log2(v) if log2_x and v > 0 else v

    xs = sorted({p[0] for p in points})
    xlo, xhi = tx(xs[0]), tx(xs[-1])
    xspan = (xhi - xlo) or 1.0
    lo, hi = ylim

    def px(v: float) -> float:
        return x0 + (x1 - x0) * ((tx(v) - xlo) / xspan if xhi > xlo else 0.5)

    def py(v: float) -> float:
        return y0 - (y0 - y1) * (min(hi, max(lo, v)) - lo) / ((hi - lo) or 1.0)

    body = [f'<text x="{width / 2}" y="14" text-anchor="middle" class="ctitle">{esc(title)}</text>']
    _y_axis(x0, y0, y1, hi, body, vmin=lo)
    body.append(f'<line x1="{x0}" x2="{x1}" y1="{y0}" y2="{y0}" class="axis"/>')
    for x in xs:
        body.append(f'<text x="{px(x):.1f}" y="{y0 + 13}" text-anchor="middle" class="tick">{esc(fmt(x))}</text>')
    body.append(f'<text x="{(x0 + x1) / 2}" y="{y0 + 27}" text-anchor="middle" class="label">{esc(xlabel)}'
                f'</text><text x="10" y="{(y0 + y1) / 2}" transform="rotate(-90 10 {(y0 + y1) / 2})" '
                f'text-anchor="middle" class="label">{esc(ylabel)}</text>')
    for n, (name, pts) in enumerate(series.items()):
        color = PALETTE[n % len(PALETTE)]
        pts = sorted(pts)
        path = " ".join(f"{'M' if i == 0 else 'L'}{px(x):.1f},{py(y):.1f}" for i, (x, y) in enumerate(pts))
        body.append(f'<path d="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in pts:
            body.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{color}">'
                        f'<title>{esc(name)} k={esc(fmt(x))}: {y:.3f}</title></circle>')
        ly = y0 + 40 + 14 * n
        body.append(f'<rect x="{x0}" y="{ly - 8}" width="10" height="10" fill="{color}"/>'
                    f'<text x="{x0 + 14}" y="{ly + 1}" class="tick">{esc(name)}</text>')
    return _frame(width, height, title, body)


Cell = float | str | None  # a reward, "failed:KIND" / "timeout", or None when the slot never ran


def heatmap(row_labels: Sequence[str], col_labels: Sequence[str], cells: Sequence[Sequence[Cell]], *,
            title: str, cell: int = 14, max_width: int = 900) -> str:
    """Task × repeat grid; each cell is clickable in the page (``data-task`` opens the viewer filtered)."""
    if not row_labels:
        return _empty(title, 360, 80)
    label_w = min(280, 14 + 7 * max(len(r) for r in row_labels))
    cw = max(4, min(cell, (max_width - label_w - 10) // max(1, len(col_labels))))
    width = max(label_w + cw * len(col_labels) + 10, 7 * len(title) + 20)
    height = 38 + cell * len(row_labels)
    body = [f'<text x="10" y="14" class="ctitle">{esc(title)}</text>']
    if len(col_labels) <= 40:
        for j, c in enumerate(col_labels):
            body.append(f'<text x="{label_w + j * cw + cw / 2:.1f}" y="30" text-anchor="middle" '
                        f'class="tick">{esc(c)}</text>')
    for i, (label, row) in enumerate(zip(row_labels, cells, strict=True)):
        y = 34 + i * cell
        short = label if len(label) <= 42 else label[:41] + "…"
        body.append(f'<text x="{label_w - 4}" y="{y + cell - 3}" text-anchor="end" class="tick" '
                    f'data-task="{esc(label)}">{esc(short)}</text>')
        for j, value in enumerate(row):
            if value is None:
                fill, tip = MISSING_COLOR, "not run"
            elif isinstance(value, str):
                fill, tip = FAILED_COLOR, value
            else:
                fill, tip = reward_color(value), f"reward {value:.3g}"
            body.append(f'<rect x="{label_w + j * cw}" y="{y}" width="{cw - 1}" height="{cell - 1}" '
                        f'fill="{fill}" data-task="{esc(label)}" data-repeat="{j}" class="cell">'
                        f'<title>{esc(label)} · repeat {j}: {esc(tip)}</title></rect>')
    return _frame(width, height, title, body, cls="chart heatmap")
