"""How a comparison is shown: rich tables for the terminal and a script-free HTML page — the paired
per-task differences, and next to them what each run scored and spent (calls, tokens, cost per model)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from rich.table import Table

from palaestra.report.charts import PALETTE, bar_chart, esc
from palaestra.report.compare import Comparison, RunSpend
from palaestra.report.page import render_static_page

__all__ = ["comparison_html", "comparison_table", "fmt_cost", "fmt_tokens", "spend_html", "spend_table",
           "write_comparison_html"]

MAX_BARS = 60


def _f(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "–"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def _p(p: float | None) -> str:
    if p is None:
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _peq(p: float | None) -> str:
    text = _p(p)
    return text.replace("<", "< ") if text.startswith("<") else f"= {text}"


def _ci(ci: tuple[float, float] | None) -> str:
    return f"[{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "–"


def _verdict(c: Comparison) -> str:
    p = c.p_holm if c.p_holm is not None else c.p_value
    if p is None or c.mean_diff is None:
        return "no paired tasks"
    if p >= 0.05:
        return "no sig. difference"
    return "better" if c.mean_diff > 0 else "worse"


def comparison_table(comparisons: Sequence[Comparison]) -> Table:
    metric = comparisons[0].metric if comparisons else "reward"
    label = "mean reward" if metric == "reward" else "pass rate"
    table = Table(title=f"paired comparison per task ({label}); baseline {comparisons[0].baseline}"
                  if comparisons else "paired comparison")
    for col in ("candidate", "tasks", "A→B", "Δ [95% CI]", "p (Holm)", "W/L/T", "verdict"):
        table.add_column(col, justify="left" if col in ("candidate", "verdict") else "right", overflow="fold")
    for c in comparisons:
        table.add_row(c.candidate, str(len(c.tasks)), f"{_f(c.mean_a)}→{_f(c.mean_b)}",
                      f"{_f(c.mean_diff, True)}\n{_ci(c.ci95)}", f"{_p(c.p_value)}\n({_p(c.p_holm)})",
                      f"{c.wins}/{c.losses}/{c.ties}", _verdict(c))
    return table


def fmt_cost(x: float | None) -> str:
    """Cost in the unit of ``model_prices`` (per million tokens); three significant digits below 1,
    because a scripted or small run costs fractions of a cent and rounding would show 0."""
    if x is None:
        return "–"
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:,.2f}" if x >= 1 else f"{x:#.3g}"


def fmt_tokens(n: int) -> str:
    return f"{n:,}"


SPEND_TITLE = "accuracy, tokens and cost per run"
SPEND_COLUMNS = ("run", "strategy / model", "reward", "pass@1", "scored", "calls", "tokens", "cost")


def _spend_notes(runs: Sequence[RunSpend]) -> list[str]:
    notes = [f"{r.name}: cost unknown, no price for {', '.join(r.unpriced)} in model_prices"
             for r in runs if r.unpriced]
    notes += [f"{r.name}: recomputed from the journal (metrics.json missing or older)"
              for r in runs if r.source == "journal"]
    return notes


def spend_table(runs: Sequence[RunSpend]) -> Table:
    """One row per run (its totals) and under it one row per answering model: a cascade's calls to the
    expensive model sit right below the expensive model's own run."""
    table = Table(title=SPEND_TITLE, caption="\n".join(_spend_notes(runs)) or None)
    for col in SPEND_COLUMNS:  # numbers never wrap (a folded "0.000112" misleads); long names fold instead
        if col in SPEND_COLUMNS[:2]:
            table.add_column(col, overflow="fold")
        else:
            table.add_column(col, justify="right", no_wrap=True)
    for i, r in enumerate(runs):
        table.add_row(r.name, r.strategy, _f(r.mean_reward), _f(r.pass_rate), str(r.n_rollouts_scored),
                      str(r.calls), fmt_tokens(r.tokens), fmt_cost(r.cost), style="bold")
        for name, m in r.models.items():
            table.add_row("", f"↳ {name}", "", "", "", str(m.calls), fmt_tokens(m.tokens), fmt_cost(m.cost),
                          style="dim", end_section=name == list(r.models)[-1] and i < len(runs) - 1)
    return table


def spend_html(runs: Sequence[RunSpend]) -> str:
    """The same numbers as ``spend_table``, as an HTML section (every text escaped)."""
    if not runs:
        return ""
    rows = []
    for r in runs:
        rows.append(f"<tr><td><b>{esc(r.name)}</b></td><td>{esc(r.strategy)}</td><td>{_f(r.mean_reward)}</td>"
                    f"<td>{_f(r.pass_rate)}</td><td>{r.n_rollouts_scored}</td><td>{r.calls}</td>"
                    f"<td>{fmt_tokens(r.tokens)}</td><td>{fmt_tokens(r.prompt_tokens)} + "
                    f"{fmt_tokens(r.completion_tokens)}</td><td>{esc(fmt_cost(r.cost))}</td></tr>")
        rows += [f'<tr class="muted"><td></td><td>↳ {esc(name)}</td><td></td><td></td><td></td><td>{m.calls}</td>'
                 f"<td>{fmt_tokens(m.tokens)}</td><td>{fmt_tokens(m.prompt_tokens)} + "
                 f"{fmt_tokens(m.completion_tokens)}</td><td>{esc(fmt_cost(m.cost))}</td></tr>"
                 for name, m in r.models.items()]
    notes = "".join(f'<p class="muted">{esc(n)}</p>' for n in _spend_notes(runs))
    head = "".join(f"<th>{esc(c)}</th>" for c in (*SPEND_COLUMNS[:-1], "prompt + completion", "cost"))
    return (f"<h2>{esc(SPEND_TITLE)}</h2>"
            '<p class="muted">Calls, tokens and cost count every attempt (failed ones were paid for too), per '
            "answering model: a routed call counts for the model that answered it. Cost is in the unit of the "
            "run's model_prices (per million tokens).</p>"
            f'<table class="grid"><tr>{head}</tr>{"".join(rows)}</table>{notes}')


def _section(c: Comparison) -> str:
    shown = sorted(c.tasks, key=lambda t: (-abs(t.diff), t.task))[:MAX_BARS]
    shown.sort(key=lambda t: (t.diff, t.task))
    colors = [PALETTE[2] if t.diff > 0 else PALETTE[1] if t.diff < 0 else PALETTE[6] for t in shown]
    chart = bar_chart([t.task for t in shown], [t.diff for t in shown], colors=colors, width=760,
                      title=f"per-task difference ({c.candidate} − {c.baseline})", value_fmt="{:+.3f}",
                      empty="no paired tasks")
    note = (f'<p class="muted">{MAX_BARS} largest of {len(c.tasks)} differences drawn; the table lists all.</p>'
            if len(c.tasks) > MAX_BARS else "")
    rows = "".join(f"<tr><td>{esc(t.task)}</td><td>{_f(t.a)}</td><td>{_f(t.b)}</td><td>{_f(t.diff, True)}</td>"
                   f"<td>{t.n_a} / {t.n_b}</td></tr>" for t in c.tasks)
    missing = ""
    for side, names in ((c.baseline, c.only_baseline), (c.candidate, c.only_candidate)):
        if names:
            missing += (f"<details><summary>{len(names)} task(s) scored only in {esc(side)} (left out)</summary>"
                        f"<pre>{esc(chr(10).join(names))}</pre></details>")
    cov = " · ".join(f"coverage {esc(n)} {'–' if v is None else f'{100 * v:.1f}%'}"
                     for n, v in zip((c.baseline, c.candidate), c.coverage, strict=True))
    return (f"<h2>{esc(c.candidate)} vs {esc(c.baseline)}: {esc(_verdict(c))}</h2>"
            f'<p>Δ = {_f(c.mean_diff, True)} {esc(_ci(c.ci95))} over {len(c.tasks)} paired tasks · '
            f"sign-flip p {_peq(c.p_value)} · Holm p {_peq(c.p_holm)} · wins/losses/ties {c.wins}/{c.losses}/"
            f'{c.ties} · {cov}</p>{chart}{note}{missing}'
            f'<details><summary>all {len(c.tasks)} paired tasks</summary><table class="grid"><tr><th>task</th>'
            f"<th>{esc(c.baseline)}</th><th>{esc(c.candidate)}</th><th>Δ</th><th>rollouts</th></tr>{rows}</table>"
            "</details>")


def comparison_html(comparisons: Sequence[Comparison], runs: Sequence[RunSpend] = ()) -> str:
    head = "".join(
        f"<tr><td>{esc(c.candidate)}</td><td>{len(c.tasks)}</td><td>{_f(c.mean_a)}</td><td>{_f(c.mean_b)}</td>"
        f"<td>{_f(c.mean_diff, True)}</td><td>{esc(_ci(c.ci95))}</td><td>{_p(c.p_value)}</td>"
        f"<td>{_p(c.p_holm)}</td><td>{c.wins}/{c.losses}/{c.ties}</td><td>{esc(_verdict(c))}</td></tr>"
        for c in comparisons)
    metric = comparisons[0].metric if comparisons else "reward"
    baseline = comparisons[0].baseline if comparisons else ""
    body = (f'<p class="muted">Baseline <b>{esc(baseline)}</b>. Per task, the {esc(metric)} score is the mean '
            "over its counted rollouts; Δ is the mean over tasks scored in both runs of (candidate − baseline). "
            "The interval is a paired bootstrap over tasks; p comes from a sign-flip permutation test, and "
            "Holm's correction adjusts it for the number of candidates.</p>"
            '<table class="grid"><tr><th>candidate</th><th>paired tasks</th><th>baseline</th><th>candidate</th>'
            f"<th>Δ</th><th>95% CI</th><th>p</th><th>p (Holm)</th><th>W/L/T</th><th>verdict</th></tr>{head}</table>"
            + spend_html(runs) + "".join(_section(c) for c in comparisons))
    return render_static_page(title=f"Palaestra comparison · {baseline}", body_html=body)


def write_comparison_html(comparisons: Sequence[Comparison], path: str | Path,
                          runs: Sequence[RunSpend] = ()) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(comparison_html(comparisons, runs), encoding="utf-8")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target
