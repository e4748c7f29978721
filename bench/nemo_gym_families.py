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

    python bench/nemo_gym_families.py                  # all families: rewrites the results and the doc
    python bench/nemo_gym_families.py --families genrm_compare,wordle   # those, merged onto the results
    python bench/nemo_gym_families.py --families X,Y --json --no-write > run.jsonl   # print only
    python bench/nemo_gym_families.py --render run.jsonl   # merge a saved run onto the results, write both
    python bench/nemo_gym_families.py --render             # the doc again from the committed results alone
    python bench/nemo_gym_families.py --families mcqa,blackjack --limit 2 --no-write   # a smoke run

The per-family results are committed (``bench/results/nemo_gym_families.jsonl``, ``nemo_gym_families_doc``):
a run of some families replaces their rows there, and the doc is always written from the whole table.

Columns: family, environment, rows (in the example files), loaded (passed the row checks), scored
(rows whose every rollout got a verdict), mean reward (over scored rollouts), policy (native reference, a
row's answer field, or the fixed reply), judge (the model behind a NeMo server's model calls), failed
(rows whose rollout ended as an infrastructure failure, by kind), reason (for a family that does not score:
the typed cause, e.g. ``needs_network: api.tavily.com``). Each rollout gets one attempt; each file has a
time limit (``--file-timeout``), and files run ``--parallel`` at a time. A server that grades a row's
rollouts together (``genrm_compare``: ``num_rollouts_per_prompt`` 16) gets that many rollouts of each row,
all in flight at once (``nemo_gym_launch.cohort_size``).

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

import nemo_gym_families_doc as doc  # bench/ is on sys.path: this script's folder
from nemo_gym_families_doc import DOC, KINDS, RESULTS, ROOT, typed

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
    repeats: int = 1  # rollouts per row: a cohort server's num_rollouts_per_prompt


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
    (r"git clone (?:-\S+ )*https?://([a-z0-9.-]+)", "needs_network: {0} (clones a repository at start-up)"),
    (r"needs_cohort: [^\n]*", "{0}"),  # a cohort server run with fewer repeats than its cohort: said as it is
    # SciCode's verify needs its test_data.h5 (numeric targets of every sub-step), which NeMo Gym leaves to the user
    (r"test_data_fpath is not configured", "missing_data: SciCode's test_data.h5 (about 1 GB, from Google Drive; "
     "set the server's test_data_fpath)"),
    (r"No module named '([\w.]+)'", "missing_package: {0}"),
    (r"(?:Cannot connect to host|Failed to resolve|connect to) " + _HOST, "needs_network: {0}"),
    (r"(?:api_key|API key|API_KEY)[^.\n]*", "needs_credentials: an API key the config leaves to the user"),
    (r"RuntimeError: (\w+) must be set", "needs_credentials: {0} (a token the server reads from its environment)"),
    (r"(?:docker|podman)[^\n]{0,80}?(?:not found|No such file|daemon|socket)", "needs_docker"),
    (r"(?:CUDA|nvidia-smi|No GPU)", "needs_gpu"),
    (r"Failed to load SEC ticker data", "needs_network: www.sec.gov (its company_tickers.json, fetched at start-up)"),
    (r"(?:Temporary failure in name resolution|Name or service not known|Network is unreachable|"
     r"ConnectError|ClientConnectorError|net::ERR_NAME_NOT_RESOLVED)", "needs_network"),
    # a path its YAML leaves to the user (tavily_search: ${exclude_domains_file_path}), read as it is written
    (r"No such file or directory: '[^'\s]*\$\{(\w+)\}", "needs_config: {0} (a value its YAML leaves to the user)"),
    (r"FileNotFoundError: (?:\[Errno 2\] No such file or directory: )?'?([^'\s]+)'?", "missing_data: {0}"),
    (r"(\w*Judge\w*Error): ([^\n]{0,120})", "judge_reply: {0}: {1} (the scripted judge answers a fixed text)"),
    (r"(\w+)\s+Field required", "needs_config: {0} (a value its YAML leaves to the user)"),
]


# What a server needs that its failure here does not say in so many words, read from its code (used only when
# the family fails, in place of the untyped server_error or start_failed its failure text gives).
KNOWN: dict[str, str] = {
    "bigcodebench": "needs_network: raw.githubusercontent.com (its start-up builds a Python 3.10 venv with uv and "
                    "installs BigCodeBench's requirements-eval.txt from GitHub)",
    "bird_sql": "needs_network: bird-bench.oss-cn-beijing.aliyuncs.com (BIRD's dev.zip: the SQLite databases the "
                "rows name, fetched at start-up)",
    "spider2_lite": "needs_network: drive.usercontent.google.com (the Spider 2.0-lite SQLite databases, fetched "
                    "from Google Drive at start-up)",
    "competitive_coding_challenges": "needs_sandbox: NeMo Skills' code-execution sandbox (a container its verify "
                                     "posts to at NEMO_SKILLS_SANDBOX_HOST:PORT, 127.0.0.1:6000 by default)",
    "gdpval": "needs_config: persist_deliverables_dir (the Stirrup agent's config wants an absolute folder the user "
              "chooses for the deliverables; past it, its rubric judges are frontier models behind API keys)",
    "longmt_eval": "needs_gpu: its verify scores with COMETKiwi on Ray GPU actors (comet_num_shards: 8; here Ray's "
                   "start times out first), from the git-only SEGALE package and the Unbabel/wmt22-cometkiwi-da "
                   "checkpoint on the Hugging Face hub",
}


def cause(messages: list[str]) -> str:
    """The typed reason a family failed, from its failure messages (``needs_network: api.tavily.com``);
    the last exception line the server logged where no known cause matches."""
    # paths inside the wheel are named from its package folder, never as this machine's absolute paths
    text = re.sub(r"/\S*/site-packages/", "", "\n".join(messages)).replace(str(Path.home()), "~")
    # our own connection to a server that died at start-up is not the network the server needs
    text = re.sub(r"did not answer (/\w+): ConnectError\('All connection attempts failed'\)", r"did not answer \1",
                  text)
    for pattern, template in _CAUSES:
        found = re.search(pattern, text)
        if found is not None:
            typed_cause = template.format(*(found.groups() or (found.group(0),)))
            host = re.search(r"https?://((?!127\.|localhost)[a-z0-9.-]+\.[a-z]{2,})", text)
            if typed_cause == "needs_network" and host:  # the host it tried, where the text names one
                typed_cause += f": {host.group(1)}"
            return typed_cause
    lines = [ln.strip(" |") for ln in text.splitlines() if re.match(r"^[\s|]*\w[\w.]*(Error|Exception|Exit)\b", ln)]
    if "did not start" in text and lines:  # a start-up traceback: its own last exception line says why
        return f"start_failed: {lines[-1][:160]}"
    if any(re.search(pattern, text) for pattern, _ in KINDS):  # a known shape names the kind
        return typed(text)
    last = lines[-1] if lines else (text.splitlines()[0] if text else "")
    return typed(last[:200])


async def run_file(family: str, path: Path, limit: int | None, tmp: Path, concurrency: int,
                   timeout_s: float) -> FileResult:
    """Load, check and run one example file; every row ends up loaded or refused, every rollout counted."""
    from palaestra.adapters import nemo_gym_references as nemo_refs
    from palaestra.adapters.nemo_gym_families import FAMILIES
    from palaestra.adapters.nemo_gym_launch import cohort_size, names_model_server
    from palaestra.adapters.nemo_gym_server import DEFAULT_JUDGE
    from palaestra.core.errors import PalaestraError
    from palaestra.orchestrator import run_eval
    from palaestra.rollout import rundir
    from palaestra.rollout.config import RunConfig
    from palaestra.rollout.journal_read import read_journal
    from palaestra.rollout.selection import select_tasks

    fam = FAMILIES.get(family)
    env = fam.env if fam else None
    res = FileResult(family, path.name, env)
    source = _limited(path, limit, tmp)
    res.rows = sum(1 for ln in source.read_text(encoding="utf-8").splitlines() if ln.strip())
    # A server that grades a row's rollouts together (genrm_compare: 16) gets that many of each row, at once.
    res.repeats = cohort_size(env.removeprefix("nemo_gym:"), None) if env and env.startswith("nemo_gym:") else 1
    cfg = RunConfig.model_validate({
        "input": str(source), "env": env, "model": "scripted:oracle", "repeats": res.repeats,
        "concurrency": max(concurrency, res.repeats),
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
    by_row: dict[str, list[dict[str, Any]]] = {}
    for (task_id, _), rec in sorted(last.items()):
        by_row.setdefault(task_id, []).append(rec)
    for recs in by_row.values():  # a row is scored when every rollout of it is; else its first failure counts
        outcomes = [rec.get("outcome") or {} for rec in recs]
        failure = next((o for o in outcomes if o.get("status") != "scored"), None)
        if failure is None:
            res.scored += 1
            res.rewards += [float((rec.get("verdict") or {}).get("reward") or 0.0) for rec in recs]
        else:
            res.failed[str(failure.get("kind") or "unknown")] += 1
            res.messages.append(str(failure.get("message") or ""))
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
            if family in KNOWN and re.match(r"(server_error|start_failed)\b|needs_network$", reason):
                reason = KNOWN[family]
        elif refused:
            reason = _reason(refused[0])
        table.append({
            "family": family, "env": fam.env if fam else None, "native": bool(fam and fam.native),
            "rows": sum(r.rows for r in rs), "loaded": sum(r.loaded for r in rs), "scored": scored,
            "mean_reward": round(sum(rewards) / len(rewards), 3) if rewards else None,
            "policy": _policy(policies) if policies else "-", "judge": next((r.judge for r in rs if r.judge), None),
            "failed": dict(failed), "refused": len(refused), "reason": reason, "errors": errors,
            "scores_rows": scores_rows, "seconds": round(sum(r.seconds for r in rs), 1),
            "repeats": max(r.repeats for r in rs),
        })
    return table


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
    parser.add_argument("--limit", type=int, default=None, help="rows per file (default: all; a run with a "
                        "limit is never merged into the committed results)")
    parser.add_argument("--concurrency", type=int, default=4, help="rollouts at a time within a file")
    parser.add_argument("--parallel", type=int, default=3, help="files at a time (default 3, for 2 cores)")
    parser.add_argument("--file-timeout", type=float, default=240.0, help="seconds one file may take (default 240)")
    parser.add_argument("--no-write", action="store_true",
                        help=f"print only; leave {DOC.relative_to(ROOT)} and {RESULTS.relative_to(ROOT)} alone")
    parser.add_argument("--json", action="store_true", help="print the table as JSON lines instead of markdown")
    parser.add_argument("--render", metavar="JSONL", nargs="*",
                        help=f"run nothing: merge saved --json runs, in order, onto {RESULTS.relative_to(ROOT)} "
                             "(a later run's family replaces the earlier row) and write the doc and the results "
                             "from the merged table; with no file, rebuild the doc from the committed results")
    args = parser.parse_args(argv)
    started = time.monotonic()
    if args.render is not None:
        table, runs = doc.merge([Path(p) for p in args.render])
        if not table:
            print(f"no results in {RESULTS.relative_to(ROOT)} or the files given", file=sys.stderr)
            return 2
        if args.json:  # the merged table, as the results file holds it
            for t in table:
                print(json.dumps(t, sort_keys=True))
            for r in runs:
                print(json.dumps({"run": r}, sort_keys=True))
    else:
        ran = asyncio.run(main_async(args))
        run = {"seconds": round(time.monotonic() - started, 1),
               "argv": [a for a in argv if a not in ("--no-write", "--json")], "families": len(ran)}
        if args.json:
            for t in ran:
                print(json.dumps(t, sort_keys=True))
            print(json.dumps({"run": run}))
        if args.no_write or args.limit:
            if not args.json:
                print(doc.markdown(ran, run["argv"], run["seconds"]))
            if args.limit and not args.no_write:
                print("a run with --limit is not merged into the results: nothing written", file=sys.stderr)
            return 0
        if args.families:  # some families: merged onto the committed results, a full run replaces them
            base, runs = doc.read_results(RESULTS)
            base.update({t["family"]: t for t in ran})
            table, runs = [base[k] for k in sorted(base)], [*runs, run]
        else:
            table, runs = ran, [run]
    shown, seconds = doc.generated_by(runs)
    text = doc.markdown(table, shown, seconds)
    if args.render is not None and not args.json:
        print(text)
    if not args.no_write:
        doc.write_results(table, runs)
        DOC.write_text(text, encoding="utf-8")
        print(f"wrote {DOC.relative_to(ROOT)} and {RESULTS.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
