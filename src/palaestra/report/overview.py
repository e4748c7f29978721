"""The overview part of a report: headline metrics with intervals, and every chart, as one HTML fragment.

Built from summary rows plus ``metrics.json`` (the collector's numbers, so the report never disagrees with
the terminal), it is used by the static report and re-rendered by the live viewer as a run grows.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from palaestra.metrics.rows import PHASES, Row
from palaestra.report.charts import (
    FAILED_COLOR,
    PALETTE,
    bar_chart,
    esc,
    heatmap,
    histogram,
    line_chart,
)

__all__ = ["MAX_HEATMAP_TASKS", "build_overview"]

MAX_HEATMAP_TASKS = 150
MAX_HEATMAP_GROUPS = 4


def _pct(x: Any) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _num(x: Any, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _ci(ci: Any) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if isinstance(ci, (list, tuple)) and len(ci) == 2 else ""


def _card(label: str, value: str, sub: str = "", cls: str = "") -> str:
    return (f'<div class="card {cls}"><div class="clabel">{esc(label)}</div><div class="cvalue">{esc(value)}</div>'
            f'<div class="csub">{esc(sub)}</div></div>')


def _headline(block: Mapping[str, Any]) -> str:
    ks = sorted(int(k) for k in (block.get("pass_at_k") or {}))
    kmax = ks[-1] if ks else None
    failed = block.get("n_failed") or {}
    n_failed = sum(failed.values())
    cov = block.get("coverage")
    cards = [
        _card("mean reward", _num(block.get("mean_reward")), "95% CI " + (_ci(block.get("reward_ci95")) or "–")),
        _card("pass@1", _num((block.get("pass_at_k") or {}).get("1")),
              "95% CI " + (_ci(block.get("pass_at_1_ci95")) or "–")),
    ]
    if kmax and kmax > 1:
        cards.append(_card(f"pass@{kmax}", _num((block.get("pass_at_k") or {}).get(str(kmax))),
                           f"pass^{kmax} {_num((block.get('pass_hat_k') or {}).get(str(kmax)))}"))
    cards += [
        _card("coverage", _pct(cov), f"{block.get('n_rollouts_scored', 0)} of {block.get('n_expected') or '?'} "
              "rollouts scored", "warn" if cov is not None and cov < 1 else ""),
        _card("tasks", str(block.get("n_tasks", 0)), f"{block.get('n_tasks_scored', 0)} with a score"),
        _card("failed", str(n_failed), ", ".join(f"{k} {v}" for k, v in failed.items()) or "none",
              "bad" if n_failed else ""),
    ]
    return f'<div class="cards">{"".join(cards)}</div>'


def _groups_table(groups: Mapping[str, Mapping[str, Any]]) -> str:
    if len(groups) < 2:
        return ""
    head = "<tr><th>group</th><th>tasks</th><th>scored</th><th>coverage</th><th>mean reward [95% CI]</th>" \
           "<th>pass@1</th><th>failed</th></tr>"
    body = "".join(
        f"<tr><td>{esc(name)}</td><td>{b.get('n_tasks', 0)}</td><td>{b.get('n_rollouts_scored', 0)}</td>"
        f"<td>{_pct(b.get('coverage'))}</td><td>{_num(b.get('mean_reward'))} {esc(_ci(b.get('reward_ci95')))}</td>"
        f"<td>{_num((b.get('pass_at_k') or {}).get('1'))}</td><td>{sum((b.get('n_failed') or {}).values())}</td></tr>"
        for name, b in groups.items())
    return f'<table class="grid">{head}{body}</table>'


def _passk_chart(metrics: Mapping[str, Any]) -> str:
    groups = metrics.get("groups") or {}
    series: dict[str, list[tuple[float, float]]] = {}
    blocks = list(groups.items()) if len(groups) > 1 else [("", metrics.get("overall") or {})]
    for name, b in blocks:
        prefix = f"{name}: " if name else ""
        for key, label in (("pass_at_k", "pass@k"), ("pass_hat_k", "pass^k")):
            pts = [(float(k), float(v)) for k, v in (b.get(key) or {}).items() if v is not None]
            if pts and (key == "pass_at_k" or len(groups) <= 1):
                series[prefix + label] = pts
    return line_chart(series, title="pass@k and pass^k", xlabel="k (samples per task)", ylabel="rate")


def _reward_hist(rows: Sequence[Row]) -> str:
    rewards = [r.reward for r in rows if r.scored and r.reward is not None]
    edges = [i / 10 for i in range(11)] if rewards and min(rewards) >= 0 and max(rewards) <= 1 else None
    if edges:
        edges[-1] = 1.000001  # so that a reward of exactly 1 lands in the last bin
    return histogram(rewards, title="reward distribution (scored rollouts)", xlabel="reward", edges=edges,
                     color=PALETTE[2])


def _failures(all_rows: Sequence[Row], effective: Sequence[Row]) -> str:
    attempts = Counter(r.failure_kind for r in all_rows if not r.scored)
    final = Counter(r.failure_kind for r in effective if not r.scored)
    kinds = sorted(attempts, key=lambda k: (-attempts[k], str(k)))
    return bar_chart([str(k) for k in kinds], [attempts[k] for k in kinds], title="failed attempts by kind",
                     colors=[FAILED_COLOR] * len(kinds),
                     notes=[f"({final[k]} unrecovered)" if final[k] else "(all retried)" for k in kinds],
                     empty="no failed attempts")


def _mean_reward(line: Sequence[float | str | None]) -> float:
    """Mean over scored cells; a task with none sorts first (-1), with the worst."""
    vals = [v for v in line if isinstance(v, float)]
    return sum(vals) / len(vals) if vals else -1.0


def _heatmaps(effective: Sequence[Row]) -> str:
    by_policy: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for r in effective:  # by (env, agent, model): a row's group label is made once per group, not per row
        by_policy[(r.env, r.agent, r.model)].append(r)
    by_group: dict[str, list[Row]] = {}
    for rows in by_policy.values():
        by_group.setdefault(rows[0].group, []).extend(rows)
    out = []
    for group in sorted(by_group)[:MAX_HEATMAP_GROUPS]:
        rows = by_group[group]
        repeats = max(r.repeat for r in rows) + 1
        cells: dict[str, list[float | str | None]] = {}
        for r in rows:
            line = cells.setdefault(r.task_id, [None] * repeats)
            line[r.repeat] = r.reward if r.scored else (r.failure_kind or "failed")

        tasks = sorted(cells, key=lambda t: (_mean_reward(cells[t]), t))
        note = ""
        if len(tasks) > MAX_HEATMAP_TASKS:
            note = (f'<p class="muted">showing the {MAX_HEATMAP_TASKS} tasks with the lowest mean reward of '
                    f"{len(tasks)}; the viewer below has every rollout</p>")
            tasks = tasks[:MAX_HEATMAP_TASKS]
        title = "task × repeat (reward; grey = failed)" + (f" — {group}" if len(by_group) > 1 else "")
        out.append(heatmap(tasks, [str(j) for j in range(repeats)], [cells[t] for t in tasks], title=title)
                   + note)
    if len(by_group) > MAX_HEATMAP_GROUPS:
        out.append(f'<p class="muted">{len(by_group) - MAX_HEATMAP_GROUPS} more groups not drawn</p>')
    return "".join(out) or histogram([], title="task × repeat")


def _phase_hists(rows: Sequence[Row]) -> str:
    by_phase: dict[str, list[float]] = {}
    for r in rows:  # one pass over the rows: each phase's durations, in row order
        for phase, value in r.timings.items():
            if value >= 0:
                values = by_phase.get(phase)
                if values is None:
                    values = by_phase[phase] = []
                values.append(value)
    charts = []
    for phase in [*PHASES, *sorted(set(by_phase) - set(PHASES))]:
        values = by_phase.get(phase, [])
        if values:
            charts.append(histogram(values, title=f"{phase.removesuffix('_s')} time per rollout",
                                    xlabel="duration", color=PALETTE[0], width=300, height=180, unit="s"))
    return "".join(charts)


def _token_hists(rows: Sequence[Row]) -> str:
    out = []
    counts = (("prompt_tokens", [float(r.prompt_tokens) for r in rows if r.prompt_tokens], PALETTE[3]),
              ("completion_tokens", [float(r.completion_tokens) for r in rows if r.completion_tokens], PALETTE[4]))
    for name, values, color in counts:
        out.append(histogram(values, title=f"{name.replace('_', ' ')} per rollout", xlabel="tokens",
                             color=color, width=300, height=180))
    steps = [float(r.steps) for r in rows if r.steps]
    out.append(histogram(steps, title="agent steps per rollout", xlabel="steps", color=PALETTE[5], width=300,
                         height=180))
    return "".join(out)


def _run_info(manifest: Mapping[str, Any], effective: Sequence[Row]) -> str:
    cfg = manifest.get("config") or {}
    items = [("run", manifest.get("run_id")), ("created", manifest.get("created")),
             ("models", ", ".join(sorted({r.model for r in effective})) or cfg.get("model")),
             ("agents", ", ".join(sorted({r.agent for r in effective})) or cfg.get("agent")),
             ("repeats", manifest.get("repeats")), ("seed", manifest.get("seed")),
             ("palaestra", (manifest.get("versions") or {}).get("palaestra"))]
    for name, env in (manifest.get("envs") or {}).items():
        if isinstance(env, Mapping):
            items.append((f"env {name}", f"v{env.get('version')} · verifier {env.get('verifier_hash')}"))
    cells = "".join(f"<div><span class=\"muted\">{esc(k)}</span> {esc(v)}</div>"
                    for k, v in items if v not in (None, ""))
    return f'<div class="runinfo">{cells}</div>'


def build_overview(rows: Sequence[Row], metrics: Mapping[str, Any], manifest: Mapping[str, Any],
                   *, partial: bool = False) -> str:
    """The overview HTML fragment; ``partial`` marks numbers from a journal still being indexed."""
    effective = [r for r in rows if r.effective]
    overall = metrics.get("overall") or {}
    warn = ('<p class="warn">Indexing the journal: these numbers cover only the rollouts read so far.</p>'
            if partial else "")
    problems = list(metrics.get("invalid_records") or []) + list(metrics.get("journal_problems") or [])
    if problems:
        warn += (f'<details class="warn"><summary>{len(problems)} journal problem(s)</summary><pre>'
                 f'{esc(chr(10).join(problems[:50]))}</pre></details>')
    return (
        f"{warn}{_run_info(manifest, effective)}{_headline(overall)}{_groups_table(metrics.get('groups') or {})}"
        f'<h2>Scores</h2><div class="charts">{_passk_chart(metrics)}{_reward_hist(effective)}'
        f"{_failures(rows, effective)}</div>"
        f'<h2>Tasks × repeats</h2><p class="muted">Click a task to list its rollouts.</p>'
        f'<div class="charts scroll">{_heatmaps(effective)}</div>'
        f'<h2>Latency per phase</h2><div class="charts">{_phase_hists(effective)}</div>'
        f'<h2>Tokens and steps</h2><div class="charts">{_token_hists(effective)}</div>'
    )
