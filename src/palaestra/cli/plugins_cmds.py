"""``palaestra plugins``: what is installed in each plugin group and where each came from (built-in, or
the distribution and version whose entry point declared it). A thin command over ``palaestra.plugins``."""

from __future__ import annotations

import json
from typing import Any

import typer

from palaestra.cli.common import fail


def plugins(
    group: list[str] = typer.Option([], "--group", "-g", help="Only these groups: environments, agents, "
                                    "sandboxes, models, exporters (repeatable)."),
    load: bool = typer.Option(False, "--load", help="Also import every plugin and report the ones that fail "
                              "(exit 1 when any does)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts."),
) -> None:
    """List environments, agents, sandbox providers, model backends and exporters, built-in and installed."""
    from palaestra.plugins.registry import GROUPS, all_registries

    unknown = [g for g in group if g not in GROUPS]
    if unknown:
        fail(f"unknown plugin group {', '.join(unknown)}", hint=f"groups: {', '.join(GROUPS)}")
    rows: dict[str, list[dict[str, Any]]] = {}
    broken = 0
    for reg in all_registries(group or None):
        out: list[dict[str, Any]] = []
        for plugin in reg.plugins():
            row = {**plugin.to_dict(), "source": plugin.source}
            row.pop("group")
            if load and plugin.shadowed_by is None:
                try:
                    plugin.load()
                    row["loads"] = True
                except Exception as exc:  # a broken plugin is reported, not fatal to the listing
                    row["loads"], row["error"] = False, str(exc)
                    broken += 1
            out.append(row)
        rows[reg.group] = out
    if as_json:
        typer.echo(json.dumps({"groups": {g: {"entry_point_group": GROUPS[g], "plugins": r}
                                          for g, r in rows.items()}}, indent=2))
    else:
        for g, items in rows.items():
            typer.echo(f"{g} ({GROUPS[g]})")
            width = max((len(r["name"]) for r in items), default=0)
            src_width = max((len(r["source"]) for r in items), default=0)
            for r in items:
                note = f"  (shadowed by {r['shadowed_by']})" if r["shadowed_by"] else ""
                if r.get("loads") is False:
                    note += f"  FAILS TO LOAD: {r['error']}"
                typer.echo(f"  {r['name']:<{width}}  {r['source']:<{src_width}}  {r['target']}{note}")
    if broken:
        raise typer.Exit(1)
