"""``palaestra export KIND RUN_DIR --out FILE``: a run's journal as training data, JSONL or Parquet.

The output format follows the file suffix (``.jsonl``/``.json`` or ``.parquet``). Parquet needs pyarrow
(extra ``[parquet]``). Columns whose shape varies from row to row (``tools``: arbitrary JSON schemas)
are JSON strings in Parquet, so one file always has one schema; in JSONL they stay as they are.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from palaestra.core.errors import ConfigError
from palaestra.core.records import Rollout
from palaestra.rollout import rundir
from palaestra.rollout.compact import CompactError, RunTasks, expand_record
from palaestra.rollout.journal_read import read_journal
from palaestra.train.advantages import NORMALISATIONS, Normalisation
from palaestra.train.rows import ExportStats, Row, dpo_rows, rl_rows, sft_rows
from palaestra.train.sequence import DRIFT_POLICIES, DriftPolicy

Kind = Literal["sft", "dpo", "rl"]
KINDS: tuple[str, ...] = ("sft", "dpo", "rl")
JSON_COLUMNS = ("tools",)


@dataclass
class ExportOptions:
    min_reward: float = 1.0  # sft
    pairs: str = "best_worst"  # dpo
    min_margin: float = 0.0  # dpo
    max_pairs_per_task: int = 4  # dpo
    normalisation: Normalisation = "group"  # rl
    on_drift: DriftPolicy = "per_turn"  # rl


def load_rollouts(run_dir: str | Path) -> tuple[list[Rollout], list[str]]:
    """Every valid record of ``RUN_DIR/rollouts.jsonl`` (a journal file may be given directly)."""
    path = Path(run_dir)
    journal = path / rundir.JOURNAL if path.is_dir() else path
    if not journal.is_file():
        raise ConfigError(f"no journal at {journal}",
                          hint="give a run directory written by `palaestra eval run` (it holds rollouts.jsonl)")
    records, problems = read_journal(journal)
    tasks = RunTasks(journal.parent / rundir.TASKS)  # compact records reference the task snapshot
    rollouts = []
    for i, record in enumerate(records):
        try:
            rollouts.append(Rollout.model_validate(expand_record(record, tasks)))
        except CompactError as exc:
            problems.append(f"{journal}: record {i + 1} cannot be expanded: {exc}")
        except ValueError as exc:
            problems.append(f"{journal}: record {i + 1} is not a rollout: {str(exc).splitlines()[0]}")
    return rollouts, problems


def make_rows(kind: str, rollouts: list[Rollout], options: ExportOptions | None = None
              ) -> tuple[list[Row], ExportStats]:
    opts = options or ExportOptions()
    if kind == "sft":
        return sft_rows(rollouts, opts.min_reward)
    if kind == "dpo":
        return dpo_rows(rollouts, pairs=opts.pairs, min_margin=opts.min_margin,
                        max_pairs_per_task=opts.max_pairs_per_task)
    if kind == "rl":
        if opts.normalisation not in NORMALISATIONS:
            raise ConfigError(f"unknown advantage normalisation {opts.normalisation!r}",
                              hint=f"use one of {', '.join(NORMALISATIONS)}")
        if opts.on_drift not in DRIFT_POLICIES:
            raise ConfigError(f"unknown drift policy {opts.on_drift!r}", hint=f"use one of {', '.join(DRIFT_POLICIES)}")
        return rl_rows(rollouts, normalisation=opts.normalisation, on_drift=opts.on_drift)
    raise ConfigError(f"unknown export kind {kind!r}", hint=f"use one of {', '.join(KINDS)}")


def output_format(out: Path) -> str:
    suffix = out.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    raise ConfigError(f"cannot tell the output format of {out}", hint="name the file *.jsonl or *.parquet")


def arrow_schema(kind: str) -> Any:
    """One fixed schema per kind, so every export of a kind concatenates with every other (inferring it
    would turn an always-empty list column into ``list<null>`` in one file and ``list<int64>`` in another)."""
    import pyarrow as pa

    ints, text, num = pa.list_(pa.int64()), pa.string(), pa.float64()
    call = pa.struct([("id", text), ("type", text), ("function", pa.struct([("name", text), ("arguments", text)]))])
    message = pa.list_(pa.struct([("role", text), ("content", text), ("tool_calls", pa.list_(call)),
                                  ("tool_call_id", text), ("name", text)]))
    fields = {
        "sft": [("messages", message), ("tools", text), ("reward", num), ("task_id", text), ("env", text),
                ("rollout_id", text)],
        "dpo": [("prompt", message), ("chosen", message), ("rejected", message), ("tools", text),
                ("chosen_reward", num), ("rejected_reward", num), ("task_id", text), ("env", text),
                ("chosen_rollout_id", text), ("rejected_rollout_id", text)],
        "rl": [("rollout_id", text), ("task_id", text), ("env", text), ("group", text), ("repeat", pa.int64()),
               ("sample_index", pa.int64()), ("num_samples", pa.int64()), ("prompt_ids", ints),
               ("completion_ids", ints), ("completion_mask", ints), ("completion_logprobs", pa.list_(num)),
               ("reward", num), ("advantage", num), ("turns", ints), ("drifted", pa.bool_()),
               ("drifted_turns", ints)],
    }
    return pa.schema(fields[kind]) if kind in fields else None


def write_rows(rows: list[Row], out: Path, kind: str | None = None) -> None:
    """Write atomically (a temporary file renamed into place): a half-written export is never mistaken
    for a whole one by a trainer that polls for it. ``kind`` gives Parquet its fixed schema."""
    fmt = output_format(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    if fmt == "jsonl":
        with tmp.open("wb") as fh:
            for row in rows:
                fh.write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY))
    else:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ConfigError("Parquet export needs pyarrow", hint="pip install 'palaestra[parquet]', or write "
                                                                  "*.jsonl") from None
        flat = [{k: (orjson.dumps(v).decode() if k in JSON_COLUMNS and v is not None else v)
                 for k, v in row.items()} for row in rows]
        pq.write_table(pa.Table.from_pylist(flat, schema=arrow_schema(kind) if kind else None), tmp)
    os.replace(tmp, out)


def export_run(kind: str, run_dir: str | Path, out: str | Path, options: ExportOptions | None = None
               ) -> ExportStats:
    """Read the run's journal, build ``kind`` rows and write them to ``out``. Refuses to write an empty
    file: it says why nothing qualified instead (a trainer given zero rows fails far less clearly)."""
    rollouts, problems = load_rollouts(run_dir)
    rows, stats = make_rows(kind, rollouts, options)
    for problem in problems:
        stats.skipped[f"unreadable journal record: {problem}"] += 1
    if not rows:
        reasons = "; ".join(f"{n} x {why}" for why, n in stats.skipped.most_common(5)) or "the journal is empty"
        hint = {"sft": "lower --min-reward", "dpo": "collect more repeats per task (--repeats) so rewards differ",
                "rl": "collect with the local model or an endpoint that returns token ids (--capture-tokens)"}
        raise ConfigError(f"no {kind} rows from {len(rollouts)} rollout(s) in {run_dir}: {reasons}",
                          hint=hint.get(kind))
    write_rows(rows, Path(out), kind)
    return stats
