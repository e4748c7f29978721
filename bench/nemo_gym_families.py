"""Every example row file NeMo Gym ships, run through Palaestra: which families load, score, fail or are refused.

For each resources server in the installed NeMo Gym wheel (``resources_servers/<server>/data/example*.jsonl``,
the recorded ``*rollouts*`` files left out), the rows are read as they are, routed by the mapping table
(``palaestra.adapters.nemo_gym_families.FAMILIES``) to the native environment of their family, checked, and
run in-process with the scripted oracle (``scripted:oracle``: each environment's ``reference``). A family
no native environment grades is still read, and is listed as refused at load with the reason Palaestra
gives; nothing is left out of the table silently.

    python bench/nemo_gym_families.py                       # all families; rewrites docs/nemo_gym_families.md
    python bench/nemo_gym_families.py --families mcqa,ifbench --limit 2 --no-write   # a smoke run

Columns: family, environment, rows (in the example files), loaded (passed the row checks), scored
(rollouts that got a verdict), mean reward (over scored rollouts), failed (rollouts that ended as an
infrastructure failure, by kind), refused at load (rows and the first reason), parity (agreement with
NeMo Gym's own verifier, filled in by the parity harness in tests/parity; "-" here). Judge rows are
graded by the offline keyword matcher (``judge_model=keyword``, labelled as such), since the bench
has no judge model; each rollout gets one attempt (an infrastructure failure is counted, not retried).

NeMo Gym comes from ``bash .ci/setup-nemo-gym.sh`` (located by ``tests/fixtures/nemo_gym.py``); without
it the script says why and exits 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import runpy
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "nemo_gym_families.md"
JUDGE = "keyword"


@dataclass
class FileResult:
    """One example file's counts."""

    family: str
    file: str
    env: str | None
    rows: int = 0
    loaded: int = 0
    scored: int = 0
    rewards: list[float] = field(default_factory=list)
    failed: Counter[str] = field(default_factory=Counter)
    refused: list[str] = field(default_factory=list)
    error: str | None = None


def servers_dir() -> Path:
    """``resources_servers`` of the installed NeMo Gym wheel; SystemExit(2) saying why when there is none."""
    locator = runpy.run_path(str(ROOT / "tests" / "fixtures" / "nemo_gym.py"))
    why = locator["missing"]()
    if why:
        print(f"nemo-gym: {why}", file=sys.stderr)
        raise SystemExit(2)
    found = sorted(locator["venv_dir"]().glob("lib/python3*/site-packages/resources_servers"))
    if not found:
        print("nemo-gym: the NeMo Gym venv has no resources_servers package", file=sys.stderr)
        raise SystemExit(2)
    return found[0]


def example_files(base: Path, families: set[str] | None) -> list[tuple[str, Path]]:
    """(family, file) for every example row file, in family order; recorded rollouts are not task rows."""
    out = []
    for path in sorted(base.glob("*/data/example*.jsonl")):
        family = path.parent.parent.name
        if "rollouts" in path.name or (families and family not in families):
            continue
        out.append((family, path))
    return out


def _limited(path: Path, limit: int | None, tmp: Path) -> Path:
    """The file itself, or a copy of its first ``limit`` rows."""
    if not limit:
        return path
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()][:limit]
    copy = tmp / f"{path.parent.parent.name}__{path.name}"
    copy.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return copy


async def run_file(family: str, path: Path, limit: int | None, tmp: Path, concurrency: int) -> FileResult:
    """Load, check and run one example file; every row ends up loaded or refused, every rollout counted."""
    from palaestra.adapters.nemo_gym_families import FAMILIES
    from palaestra.core.errors import PalaestraError
    from palaestra.orchestrator import run_eval
    from palaestra.rollout import rundir
    from palaestra.rollout.config import RunConfig
    from palaestra.rollout.journal import read_journal
    from palaestra.rollout.selection import select_tasks

    fam = FAMILIES.get(family)
    env = fam.env if fam else None
    res = FileResult(family, path.name, env)
    source = _limited(path, limit, tmp)
    res.rows = sum(1 for ln in source.read_text(encoding="utf-8").splitlines() if ln.strip())
    cfg = RunConfig.model_validate({
        "input": str(source), "env": env, "model": "scripted:oracle", "concurrency": concurrency,
        "skip_invalid": True, "judge_model": JUDGE, "max_attempts": 1, "out": str(tmp / f"run-{family}-{path.stem}"),
        "min_coverage": 0.0})
    try:
        tasks, skipped = select_tasks(cfg)
    except PalaestraError as exc:
        res.error = exc.message
        res.refused = [exc.message]
        return res
    except Exception as exc:
        res.error = f"reading the rows crashed: {type(exc).__name__}: {exc}"
        return res
    res.loaded = len(tasks)
    res.refused = list(skipped)
    if fam is not None and fam.env is None and not skipped and tasks:
        res.error = "rows loaded for a family marked unsupported"  # the table must not hide this
    if not tasks:
        return res
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            await run_eval(cfg)
    except PalaestraError as exc:
        res.error = f"{exc.message}" + (f" ({exc.hint})" if exc.hint else "")
        return res
    except Exception as exc:  # a crash is this file's result, in the table, not the end of the table
        res.error = f"the run crashed: {type(exc).__name__}: {exc}"
        return res
    records, _ = read_journal(Path(cfg.out or "") / rundir.JOURNAL, missing_ok=True)
    last: dict[tuple[str, int], dict[str, Any]] = {}
    for rec in records:
        last[(str(rec.get("task_id")), int(rec.get("repeat") or 0))] = rec
    for rec in last.values():
        outcome = rec.get("outcome") or {}
        if outcome.get("status") == "scored":
            res.scored += 1
            res.rewards.append(float((rec.get("verdict") or {}).get("reward") or 0.0))
        else:
            res.failed[str(outcome.get("kind") or "unknown")] += 1
    return res


def _reason(text: str) -> str:
    """A refusal line without its file:line prefix, cut to one readable line."""
    head, sep, rest = text.partition(": field ")
    body = rest.partition("': ")[2] or rest if sep else head
    body = body.split(" (fix:")[0]
    return (body[:157] + "...") if len(body) > 160 else body


def summarize(results: list[FileResult]) -> list[dict[str, Any]]:
    """One row per family: the files' counts added up."""
    from palaestra.adapters.nemo_gym_families import FAMILIES

    by_family: dict[str, list[FileResult]] = {}
    for r in results:
        by_family.setdefault(r.family, []).append(r)
    table = []
    for family, rs in by_family.items():
        fam = FAMILIES.get(family)
        rewards = [x for r in rs for x in r.rewards]
        failed: Counter[str] = Counter()
        for r in rs:
            failed.update(r.failed)
        refused = [x for r in rs for x in r.refused]
        errors = [r.error for r in rs if r.error]
        reason = fam.reason if fam is not None and fam.env is None else (_reason(refused[0]) if refused else "")
        scored = sum(r.scored for r in rs)
        table.append({
            "family": family, "env": fam.env if fam else None, "rows": sum(r.rows for r in rs),
            "loaded": sum(r.loaded for r in rs), "scored": scored,
            "mean_reward": round(sum(rewards) / len(rewards), 3) if rewards else None,
            "failed": dict(failed), "refused": len(refused), "reason": reason, "errors": errors,
            "scores_rows": scored > 0 and not failed and not errors,
            "parity": None,
        })
    return table


def markdown(table: list[dict[str, Any]], argv: list[str]) -> str:
    scoring = sum(1 for t in table if t["scores_rows"])
    native = sum(1 for t in table if t["env"])
    rows = sum(t["rows"] for t in table)
    scored = sum(t["scored"] for t in table)
    lines = [
        "# NeMo Gym example rows in Palaestra, family by family",
        "",
        "Generated by `python bench/nemo_gym_families.py" + (" " + " ".join(argv) if argv else "") + "` against the "
        "installed NeMo Gym wheel (do not edit by hand: rerun the script). Every `data/example*.jsonl` of every "
        "resources server (recorded `*rollouts*` files aside) is read as it is, routed by "
        "`palaestra.adapters.nemo_gym_families.FAMILIES` and run with `--model scripted:oracle` (the environment's "
        "reference answer). Judge rows are graded by the offline keyword matcher (`judge_model=keyword`); one "
        "attempt per rollout.",
        "",
        f"**{scoring} of {len(table)} families score their rows** ({100.0 * scoring / max(1, len(table)):.0f} %); "
        f"{native} have a native environment; {scored} of {rows} rows scored. A family that scores no row is "
        "refused at load, with the reason below: none is left out.",
        "",
        "Columns: *rows* in the example files; *loaded*: passed the row checks; *scored*: rollouts with a "
        "verdict; *reward*: their mean; *failed*: infrastructure failures by kind; *refused*: rows refused at "
        "load; *parity*: agreement with NeMo Gym's own verifier (tests/parity; `-` until measured there).",
        "",
        "| family | env | rows | loaded | scored | reward | failed | refused | reason | parity |",
        "|---|---|---:|---:|---:|---:|---|---:|---|---|",
    ]
    for t in table:
        failed = ", ".join(f"{k}: {v}" for k, v in sorted(t["failed"].items())) or "-"
        reward = "-" if t["mean_reward"] is None else f"{t['mean_reward']:.3f}"
        reason = "; ".join(filter(None, [t["reason"], *t["errors"]])).replace("|", "\\|") or "-"
        lines.append(f"| {t['family']} | {t['env'] or '-'} | {t['rows']} | {t['loaded']} | {t['scored']} | {reward} "
                     f"| {failed} | {t['refused']} | {reason} | {t['parity'] or '-'} |")
    from palaestra.adapters.nemo_gym_families import FAMILIES

    lines += ["", "## How each native family is graded", "",
              "From `FAMILIES` (the mapping table): the environment, and where its grading knowingly differs "
              "from NeMo Gym's verifier.", "", "| family | env | grading |", "|---|---|---|"]
    for name in sorted(t["family"] for t in table if t["env"]):
        fam = FAMILIES[name]
        lines.append(f"| {name} | {fam.env} | {fam.note.replace('|', chr(92) + '|') or 'as NeMo Gym'} |")
    return "\n".join(lines) + "\n"


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    base = servers_dir()
    families = set(args.families.split(",")) if args.families else None
    files = example_files(base, families)
    if families and not files:
        print(f"no example files for families {sorted(families)}", file=sys.stderr)
        raise SystemExit(2)
    results = []
    with tempfile.TemporaryDirectory(prefix="palaestra-nemo-families-") as tmp:
        for family, path in files:
            print(f"{family}/{path.name}", file=sys.stderr, flush=True)
            results.append(await run_file(family, path, args.limit, Path(tmp), args.concurrency))
    return summarize(results)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", help="comma-separated resources servers (default: all)")
    parser.add_argument("--limit", type=int, default=None, help="rows per file (default: all)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--no-write", action="store_true", help=f"print only; leave {DOC.relative_to(ROOT)} alone")
    parser.add_argument("--json", action="store_true", help="print the table as JSON lines instead of markdown")
    args = parser.parse_args(argv)
    table = asyncio.run(main_async(args))
    doc = markdown(table, [a for a in argv if a != "--no-write"])
    if args.json:
        for t in table:
            print(json.dumps(t, sort_keys=True))
    else:
        print(doc)
    if not args.no_write:
        DOC.write_text(doc, encoding="utf-8")
        print(f"wrote {DOC.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
