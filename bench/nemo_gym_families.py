"""Every example row file NeMo Gym ships, run through Palaestra: which families load, score or fail, and why.

For each resources server in the installed NeMo Gym wheel (``resources_servers/<server>/data/example*.jsonl``,
the recorded ``*rollouts*`` files left out), the rows are read as they are, routed by the mapping table
(``palaestra.adapters.nemo_gym_families.FAMILIES``) to their environment, checked, and run with the
scripted oracle (``scripted:oracle``). The environment is the family's native one where Palaestra has
it, else NeMo Gym's own resources server run as it is (``nemo_gym:<server>``), whose own verify answers
the reward. The oracle plays each environment's reference: for a NeMo Gym server, the answer the row
carries (``expected_answer``, ``ground_truth``, ...; ``adapters/nemo_gym_references.py``) or, where the
row carries none, a fixed reply that still gets a real verdict. Servers whose verify calls a model (a
judge) get a scripted model on 127.0.0.1 (``nemo_gym_server.DEFAULT_JUDGE``), named in the table.

    python bench/nemo_gym_families.py                       # all families; rewrites docs/nemo_gym_families.md
    python bench/nemo_gym_families.py --families mcqa,blackjack --limit 2 --no-write   # a smoke run

Columns: family, environment, rows (in the example files), loaded (passed the row checks), scored
(rollouts that got a verdict), mean reward (over scored rollouts), policy (native reference, a row's
answer field, or the fixed reply), judge (the model behind a NeMo server's model calls), failed
(rollouts that ended as an infrastructure failure, by kind), reason (for a family that does not score:
the typed cause, e.g. ``needs_network: api.tavily.com``). Each rollout gets one attempt; each file has a
time limit (``--file-timeout``), and files run ``--parallel`` at a time.

NeMo Gym comes from ``bash .ci/setup-nemo-gym.sh`` (located by ``tests/fixtures/nemo_gym.py``); without
it the script says why and exits 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import re
import runpy
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "nemo_gym_families.md"
JUDGE = "keyword"  # native judge rows: the offline matcher; NeMo servers read it as "no judge named"
NATIVE_POLICY = "native reference"


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
    messages: list[str] = field(default_factory=list)  # the failed rollouts' messages, for the reason
    refused: list[str] = field(default_factory=list)
    policies: Counter[str] = field(default_factory=Counter)
    judge: str | None = None
    error: str | None = None
    seconds: float = 0.0


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


# ---- why a family does not score: one typed reason, read from what failed ------------------------------
_HOST = r"(?:https?://)?([a-z0-9.-]+\.[a-z]{2,})"
_CAUSES: list[tuple[str, str]] = [  # (pattern, reason template), first match wins
    (r"git', 'clone'.*?https?://([a-z0-9.-]+)", "needs_network: {0} (clones a repository at start-up)"),
    (r"No module named '([\w.]+)'", "missing_package: {0}"),
    (r"(?:Cannot connect to host|Failed to resolve|connect to) " + _HOST, "needs_network: {0}"),
    (r"(?:api_key|API key|API_KEY)[^.\n]*", "needs_credentials: an API key the config leaves to the user"),
    (r"(?:docker|podman)[^\n]{0,80}?(?:not found|No such file|daemon|socket)", "needs_docker"),
    (r"(?:CUDA|nvidia-smi|No GPU)", "needs_gpu"),
    (r"(?:Temporary failure in name resolution|Name or service not known|Network is unreachable|"
     r"ConnectError|ClientConnectorError)", "needs_network"),
    (r"FileNotFoundError: (?:\[Errno 2\] No such file or directory: )?'?([^'\s]+)'?", "missing_data: {0}"),
    (r"(\w*Judge\w*Error): ([^\n]{0,120})", "judge_reply: {0}: {1} (the scripted judge answers a fixed text)"),
    (r"(\w+)\s+Field required", "needs_config: {0} (a value its YAML leaves to the user)"),
]


_KINDS: list[tuple[str, str]] = [  # a reason that is not typed yet → its type, from what the server said
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
    for pattern, template in _KINDS:
        found = re.search(pattern, reason)
        if found is not None:
            return template.format(*found.groups())
    return f"server_error: {reason}"


def cause(messages: list[str]) -> str:
    """The typed reason a family failed, from its failure messages (``needs_network: api.tavily.com``);
    the last exception line the server logged where no known cause matches."""
    # paths inside the wheel are named from its package folder, never as this machine's absolute paths
    text = re.sub(r"/\S*/site-packages/", "", "\n".join(messages)).replace(str(Path.home()), "~")
    for pattern, template in _CAUSES:
        found = re.search(pattern, text)
        if found is not None:
            return template.format(*found.groups())
    lines = [ln.strip(" |") for ln in text.splitlines() if re.match(r"^[\s|]*\w[\w.]*(Error|Exception|Exit)\b", ln)]
    if "did not start" in text and lines:  # a start-up traceback: its own last exception line says why
        return f"start_failed: {lines[-1][:160]}"
    if any(re.search(pattern, text) for pattern, _ in _KINDS):  # a known shape names the kind
        return typed(text)
    last = lines[-1] if lines else (text.splitlines()[0] if text else "")
    return typed(last[:200])


async def run_file(family: str, path: Path, limit: int | None, tmp: Path, concurrency: int,
                   timeout_s: float) -> FileResult:
    """Load, check and run one example file; every row ends up loaded or refused, every rollout counted."""
    from palaestra.adapters import nemo_gym_references as nemo_refs
    from palaestra.adapters.nemo_gym_families import FAMILIES
    from palaestra.adapters.nemo_gym_launch import names_model_server
    from palaestra.adapters.nemo_gym_server import DEFAULT_JUDGE
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
    started = time.monotonic()
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
    for task in tasks:  # which policy the oracle plays for each row
        server = task.env.removeprefix("nemo_gym:") if task.env.startswith("nemo_gym:") else None
        res.policies[nemo_refs.reference_policy(server, task) if server else NATIVE_POLICY] += 1
        if server and names_model_server(server, None):
            res.judge = DEFAULT_JUDGE
    if not tasks:
        return res
    try:
        await asyncio.wait_for(run_eval(cfg), timeout_s)
    except TimeoutError:
        res.error = f"timeout: the file did not finish within {timeout_s:g} s"
    except PalaestraError as exc:
        res.error = f"{exc.message}" + (f" ({exc.hint})" if exc.hint else "")
    except Exception as exc:  # a crash is this file's result, in the table, not the end of the table
        res.error = f"the run crashed: {type(exc).__name__}: {exc}"
    res.seconds = time.monotonic() - started
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
            res.messages.append(str(outcome.get("message") or ""))
    return res


def _reason(text: str) -> str:
    """A refusal line without its file:line prefix, cut to one readable line."""
    head, sep, rest = text.partition(": field ")
    body = rest.partition("': ")[2] or rest if sep else head
    body = body.split(" (fix:")[0]
    return (body[:157] + "...") if len(body) > 160 else body


def _policy(policies: Counter[str]) -> str:
    if len(policies) == 1:
        return next(iter(policies))
    return ", ".join(f"{k} ×{n}" for k, n in sorted(policies.items()))


def summarize(results: list[FileResult]) -> list[dict[str, Any]]:
    """One row per family: the files' counts added up, and one typed reason where it does not score."""
    from palaestra.adapters.nemo_gym_families import FAMILIES

    by_family: dict[str, list[FileResult]] = {}
    for r in results:
        by_family.setdefault(r.family, []).append(r)
    table = []
    for family, rs in by_family.items():
        fam = FAMILIES.get(family)
        rewards = [x for r in rs for x in r.rewards]
        failed: Counter[str] = Counter()
        policies: Counter[str] = Counter()
        for r in rs:
            failed.update(r.failed)
            policies.update(r.policies)
        refused = [x for r in rs for x in r.refused]
        errors = [r.error for r in rs if r.error]
        messages = [m for r in rs for m in r.messages]
        scored = sum(r.scored for r in rs)
        scores_rows = scored > 0 and not failed and not errors
        reason = ""
        if failed or errors:
            reason = cause(messages + errors)
        elif refused:
            reason = _reason(refused[0])
        table.append({
            "family": family, "env": fam.env if fam else None, "native": bool(fam and fam.native),
            "rows": sum(r.rows for r in rs), "loaded": sum(r.loaded for r in rs), "scored": scored,
            "mean_reward": round(sum(rewards) / len(rewards), 3) if rewards else None,
            "policy": _policy(policies) if policies else "-", "judge": next((r.judge for r in rs if r.judge), None),
            "failed": dict(failed), "refused": len(refused), "reason": reason, "errors": errors,
            "scores_rows": scores_rows, "seconds": round(sum(r.seconds for r in rs), 1),
        })
    return table


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
        "(*reason*, a typed cause): none is left out.",
        "",
        "Columns: *rows* in the example files; *loaded*: passed the row checks; *scored*: rollouts with a "
        "verdict; *reward*: their mean; *failed*: infrastructure failures by kind; *refused*: rows refused at "
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
        lines.append(f"| {t['family']} | {t['env'] or '-'} | {t['rows']} | {t['loaded']} | {t['scored']} | {reward} "
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


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    base = servers_dir()
    families = set(args.families.split(",")) if args.families else None
    files = example_files(base, families)
    if families and not files:
        print(f"no example files for families {sorted(families)}", file=sys.stderr)
        raise SystemExit(2)
    gate = asyncio.Semaphore(args.parallel)  # each NeMo server start imports its app: CPU-bound for seconds

    async def one(family: str, path: Path, tmp: Path) -> FileResult:
        async with gate:
            print(f"{family}/{path.name}", file=sys.stderr, flush=True)
            return await run_file(family, path, args.limit, tmp, args.concurrency, args.file_timeout)

    with tempfile.TemporaryDirectory(prefix="palaestra-nemo-families-") as tmp, \
            contextlib.redirect_stdout(io.StringIO()):
        results = await asyncio.gather(*(one(f, p, Path(tmp)) for f, p in files))
    return summarize(list(results))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", help="comma-separated resources servers (default: all)")
    parser.add_argument("--limit", type=int, default=None, help="rows per file (default: all)")
    parser.add_argument("--concurrency", type=int, default=4, help="rollouts at a time within a file")
    parser.add_argument("--parallel", type=int, default=3, help="files at a time (default 3, for 2 cores)")
    parser.add_argument("--file-timeout", type=float, default=240.0, help="seconds one file may take (default 240)")
    parser.add_argument("--no-write", action="store_true", help=f"print only; leave {DOC.relative_to(ROOT)} alone")
    parser.add_argument("--json", action="store_true", help="print the table as JSON lines instead of markdown")
    parser.add_argument("--render", metavar="JSONL", nargs="+",
                        help="write the doc from saved --json runs instead of running (a later file's families "
                             "replace an earlier one's: a full run, then a rerun of some families)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    shown = [a for a in argv if a not in ("--no-write", "--json")]
    if args.render:
        by_family: dict[str, dict[str, Any]] = {}
        seconds, runs = 0.0, []
        for name in args.render:
            lines = [json.loads(ln) for ln in Path(name).read_text(encoding="utf-8").splitlines() if ln.strip()]
            run: dict[str, Any] = next((ln["run"] for ln in lines if "run" in ln), {})
            found = [ln for ln in lines if "family" in ln]
            by_family.update({ln["family"]: ln for ln in found})
            seconds += float(run.get("seconds") or 0.0)
            runs.append(f"{len(found)} families in {float(run.get('seconds') or 0.0) / 60:.0f} min")
        shown = ["--json"] + ([f"(then again for the families later fixes touched; merged with --render, a later "
                               f"run winning: {'; '.join(runs)})"] if len(runs) > 1 else [])
        table = [by_family[k] for k in sorted(by_family)]
    else:
        table = asyncio.run(main_async(args))
        seconds = time.monotonic() - started
    doc = markdown(table, shown, seconds)
    if args.json:
        for t in table:
            print(json.dumps(t, sort_keys=True))
        print(json.dumps({"run": {"seconds": round(seconds or 0.0, 1), "argv": shown}}))
    else:
        print(doc)
    if not args.no_write:
        DOC.write_text(doc, encoding="utf-8")
        print(f"wrote {DOC.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
