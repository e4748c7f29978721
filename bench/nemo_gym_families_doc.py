"""The doc of ``bench/nemo_gym_families.py``: its committed results, the merge of later runs onto them, and
the markdown table of ``docs/nemo_gym_families.md``.

The per-family results are data in the repository (``bench/results/nemo_gym_families.jsonl``: one JSON line
per family, as ``--json`` prints it, then one ``{"run": ...}`` line per run merged into it). A run of some
families (``--families X,Y``) or a saved ``--json`` run given to ``--render`` is merged onto that file, a
later run's family replacing the earlier one, and the doc is written from the merged table, so the doc
always shows every family and can be rebuilt from the repository alone (``--render`` with no file).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "nemo_gym_families.md"
RESULTS = ROOT / "bench" / "results" / "nemo_gym_families.jsonl"


def read_results(path: Path) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """(family → its row, the runs) of one results or ``--json`` file; a missing file has neither."""
    if not path.is_file():
        return {}, []
    lines = [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return {ln["family"]: ln for ln in lines if "family" in ln}, [ln["run"] for ln in lines if "run" in ln]


def merge(paths: list[Path], base: Path = RESULTS) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The table of ``base`` with each file of ``paths`` merged onto it in order (a later file's family
    replaces the earlier row), sorted by family, and every run that went into it, each with the number of
    families it gave."""
    by_family: dict[str, dict[str, Any]] = {}
    runs: list[dict[str, Any]] = []
    for path in [base, *(p for p in paths if p.resolve() != base.resolve())]:
        found, its_runs = read_results(path)
        by_family.update(found)
        if path != base:  # a --json run: one run line, its families counted here
            its_runs = [{**run, "families": len(found)} for run in its_runs[-1:]] or [{"families": len(found)}]
        runs += [r for r in its_runs if r not in runs]  # a run rendered twice is named once
    return [by_family[k] for k in sorted(by_family)], runs


def write_results(table: list[dict[str, Any]], runs: list[dict[str, Any]], path: Path = RESULTS) -> None:
    """The merged table and its runs back to the results file, one JSON line each (stable key order)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(t, sort_keys=True) for t in table] + [json.dumps({"run": r}, sort_keys=True) for r in runs]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def generated_by(runs: list[dict[str, Any]]) -> tuple[list[str], float]:
    """The command line the doc names, and the minutes of all runs together."""
    seconds = sum(float(r.get("seconds") or 0.0) for r in runs)
    parts = [f"{r.get('families', '?')} families in {float(r.get('seconds') or 0.0) / 60:.0f} min" for r in runs]
    shown = ["--json"] + ([f"(then again for the families later fixes touched; merged onto "
                           f"{RESULTS.relative_to(ROOT)} by --render, a later run winning: {'; '.join(parts)})"]
                          if len(runs) > 1 else [])
    return shown, seconds


# ---- typed reasons: a reason the failure text does not type yet, typed by what the server said ----
KINDS: list[tuple[str, str]] = [  # a reason that is not typed yet → its type, from what the server said
    (r"Sandbox provider reference '(\w+)' is not defined",
     "needs_sandbox: a NeMo Gym sandbox provider (its '{0}' block) to run the task's image"),
    (r"answered (/\w+) with HTTP (4\d\d): ([^;]{0,140})", "rejected_request: {0} HTTP {1}: {2}"),
    (r"^empty: ", "no_prompt: the rows carry no input for the model (NeMo Gym's own agent builds it)"),
    (r"ships no resources server '(\w+)'", "not_a_server: '{0}' ships example rows but no app.py"),
    (r"uv is required", "needs_uv: builds a venv of its own with uv at start-up"),
    (r"^LookupError", "missing_data: NLTK data it downloads at first use"),
    (r"\$%7B(\w+)%7D", "needs_config: {0} (a value its YAML leaves to the user)"),
    (r"pocketshell", "missing_package: pocketshell"),
    (r"source: not found", "needs_bash: its start-up runs `source` under /bin/sh"),
    (r"_ensure_nltk_data|nltk", "missing_data: NLTK data it downloads at first use"),
    (r"did not start(?: \(exit status (-?\d+)\))?: (?:WARNING:[^\n]*\n)*([^;]{0,140})",
     "start_failed: exit status {0}: {1}"),  # the last resort
]


def typed(reason: str) -> str:
    """``reason`` as ``kind: detail``: already typed ones as they are, else by what the server said, else
    ``server_error: <its exception line>``."""
    if not reason or re.match(r"^[a-z_]+(:|$)", reason):
        return reason
    for pattern, template in KINDS:
        found = re.search(pattern, reason)
        if found is not None:
            return template.format(*found.groups())
    return f"server_error: {reason}"


def markdown(table: list[dict[str, Any]], argv: list[str], seconds: float | None) -> str:
    from palaestra.adapters.nemo_gym_families import FAMILIES
    from palaestra.adapters.nemo_gym_server import DEFAULT_JUDGE

    scoring = [t for t in table if t["scores_rows"]]
    native = sum(1 for t in table if t["native"])
    rows = sum(t["rows"] for t in table)
    scored = sum(t["scored"] for t in table)
    full = sum(1 for t in scoring if t["mean_reward"] == 1.0)
    lines = [
        "# NeMo Gym example rows in Palaestra, family by family",
        "",
        "Generated by `python bench/nemo_gym_families.py" + (" " + " ".join(argv) if argv else "") + "` against the "
        "installed NeMo Gym wheel (do not edit by hand: rerun the script). Every `data/example*.jsonl` of every "
        "resources server (recorded `*rollouts*` files aside) is read as it is, routed by "
        "`palaestra.adapters.nemo_gym_families.FAMILIES` to its native environment or, where there is none, to "
        "NeMo Gym's own resources server (`nemo_gym:<server>`, whose own verify gives the reward), and run with "
        "`--model scripted:oracle`: the native reference, the answer the row carries (*policy* `reference: "
        "<field>`), or a fixed reply where the row carries none (the first `<action>` its prompt shows, where it "
        "shows one: a move a game server can apply). A NeMo server whose verify calls a model gets "
        f"`{DEFAULT_JUDGE}` on 127.0.0.1 (*judge*: a fixed reply, in the JSON shape of the schema a request "
        "names in `response_format`); native judge rows the offline keyword matcher. A server defined only in a "
        "config variant runs with the variant that defines the rows' agent (`nemo_gym_launch.config_path`). "
        "One attempt per rollout" + (f"; the whole run took {seconds / 60:.0f} min." if seconds else "."),
        "",
        f"**{len(scoring)} of {len(table)} families score their rows** "
        f"({100.0 * len(scoring) / max(1, len(table)):.0f} %;"
        f" {full} of them with mean reward 1); {native} have a native environment, {len(table) - native} run on "
        f"NeMo Gym's own server; {scored} of {rows} rows scored. Every family that does not score says why "
        "(*reason*, a typed cause): none is left out."
        + (f" The rows of {old} families come from runs whose JSON output was lost, reconstructed once from this "
           "table as it stood at commit 5eac35c (`reconstructed` in the results file; their errors and seconds "
           "were not in the table, and reasons it cut with `...` stay cut)." if (old := sum(
               1 for t in table if t.get("reconstructed"))) else ""),
        "",
        "Columns: *rows* in the example files (`(×16)`: rollouts per row, for a server that grades a row's "
        "rollouts together, its `num_rollouts_per_prompt`); *loaded*: passed the row checks; *scored*: rows "
        "whose every rollout got a verdict; *reward*: the rollouts' mean; *failed*: rows whose rollout ended as an "
        "infrastructure failure, by kind; *refused*: rows refused at "
        "load; *parity* with NeMo Gym's verifier: `own` where NeMo Gym's own server graded (the verdict is its "
        "verify's), `tests/parity` for a native family (measured there, docs/nemo_gym_parity.md).",
        "",
        "| family | env | rows | loaded | scored | reward | policy | judge | failed | refused | reason | parity |",
        "|---|---|---:|---:|---:|---:|---|---|---|---:|---|---|",
    ]
    for t in table:
        failed = ", ".join(f"{k}: {v}" for k, v in sorted(t["failed"].items())) or "-"
        reward = "-" if t["mean_reward"] is None else f"{t['mean_reward']:.3f}"
        reason = (typed(t["reason"]) or "-").replace("|", "\\|").replace("\n", " ")
        rows = f"{t['rows']} (×{t['repeats']})" if t.get("repeats", 1) > 1 else str(t["rows"])  # rollouts per row
        lines.append(f"| {t['family']} | {t['env'] or '-'} | {rows} | {t['loaded']} | {t['scored']} | {reward} "
                     f"| {t['policy']} | {t['judge'] or '-'} | {failed} | {t['refused']} | {reason} "
                     f"| {'tests/parity' if t['native'] else 'own'} |")
    causes = Counter(typed(t["reason"]).split(":")[0] for t in table if not t["scores_rows"] and t["reason"])
    lines += ["", "## Why the others do not score", "",
              "| cause | families |", "|---|---:|"] + [f"| {k} | {n} |" for k, n in causes.most_common()]
    lines += ["", "## How each native family is graded", "",
              "From `FAMILIES` (the mapping table): the environment, and where its grading knowingly differs "
              "from NeMo Gym's verifier.", "", "| family | env | grading |", "|---|---|---|"]
    for name in sorted(t["family"] for t in table if t["native"]):
        fam = FAMILIES[name]
        lines.append(f"| {name} | {fam.env} | {fam.note.replace('|', chr(92) + '|') or 'as NeMo Gym'} |")
    return "\n".join(lines) + "\n"
