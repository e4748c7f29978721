"""Commands for interoperability and scaffolding: ``env new``, ``env import harbor`` / ``terminal-bench``,
``export nemo-gym``.

Mounted by ``cli/main.py``: ``env_new`` as ``palaestra env new``, ``import_app`` as ``palaestra env
import``, ``export_app`` as ``palaestra export``. Thin wrappers: the logic lives in
``palaestra.scaffold`` and ``palaestra.adapters``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from palaestra.cli.common import fail

import_app = typer.Typer(no_args_is_help=True, help="Import other libraries' tasks as Palaestra task rows.")
export_app = typer.Typer(no_args_is_help=True, help="Export a run in other libraries' formats.")


def env_new(
    name: str = typer.Argument(..., help="The environment's name (lowercase, digits, '-' or '_')."),
    directory: Path | None = typer.Option(None, "--dir", help="Where to write it (default: ./NAME)."),
) -> None:
    """Scaffold an environment package (env.py, data, README, test) that passes `env check` as generated."""
    from palaestra.core.errors import PalaestraError
    from palaestra.scaffold import class_name, new_env

    try:
        files = new_env(name, directory)
    except PalaestraError as exc:
        fail(exc.message, exc.hint)
        return
    root = files[0].parent
    for path in files:
        typer.echo(f"wrote {path}")
    typer.echo(f"next: palaestra env check {root.as_posix()}/env.py:{class_name(name)}")


@import_app.command("harbor")
def import_harbor_cmd(
    directory: Path = typer.Argument(..., help="A Harbor task directory, or a folder of them."),
    out: Path | None = typer.Option(None, "--out", help="Write the rows to this JSONL file (default: stdout)."),
    env: str = typer.Option("harbor", help="The environment the rows are for (harbor: image built from the "
                            "Dockerfile; terminal: the local sandbox, approximate)."),
    id_prefix: str = typer.Option("harbor-", help="Prefix of every task id."),
    base_image: str | None = typer.Option(None, "--base-image", help="A local image to build on where a "
                                          "Dockerfile's FROM image is not on this machine (recorded per verdict)."),
) -> None:
    """Read Harbor task directories (instruction.md, task.toml, environment/, tests/test.sh) into task rows;
    Terminal-Bench 1 task directories are converted first, as by `env import terminal-bench`."""

    from palaestra.adapters.harbor import find_task_dirs, import_harbor
    from palaestra.adapters.terminal_bench import find_tb1_dirs
    from palaestra.core.errors import PalaestraError

    try:
        if not find_task_dirs(directory) and find_tb1_dirs(directory):  # Terminal-Bench 1 tasks: convert them
            _import_tb1(directory, out, None, env=env, id_prefix="tb1-" if id_prefix == "harbor-" else id_prefix,
                        base_image=base_image)
            return
        result = import_harbor(directory, env=env, id_prefix=id_prefix, base_image=base_image)
    except PalaestraError as exc:
        fail(exc.message, exc.hint)
        return
    _emit_rows(result, out, "")


@import_app.command("terminal-bench")
def import_terminal_bench_cmd(
    directory: Path = typer.Argument(..., help="A Terminal-Bench 1 task directory (task.yaml), or a folder of them."),
    out: Path | None = typer.Option(None, "--out", help="Write the rows to this JSONL file (default: stdout)."),
    tasks_dir: Path | None = typer.Option(None, "--tasks-dir", help="Where the converted task directories go "
                                          "(default: OUT's name + '.tasks' beside it, or ./terminal-bench-tasks)."),
    env: str = typer.Option("harbor", help="The environment the rows are for (harbor: image built from the "
                            "Dockerfile; terminal: the local sandbox, approximate)."),
    id_prefix: str = typer.Option("tb1-", help="Prefix of every task id."),
    base_image: str | None = typer.Option(None, "--base-image", help="A local image to build on where a "
                                          "Dockerfile's FROM image is not on this machine (recorded per verdict)."),
) -> None:
    """Convert Terminal-Bench 1 tasks (task.yaml, run-tests.sh, tests/, solution.sh) to Harbor task
    directories and write their task rows."""
    from palaestra.core.errors import PalaestraError

    try:
        _import_tb1(directory, out, tasks_dir, env=env, id_prefix=id_prefix, base_image=base_image)
    except PalaestraError as exc:
        fail(exc.message, exc.hint)


def _import_tb1(directory: Path, out: Path | None, tasks_dir: Path | None, *, env: str, id_prefix: str,
                base_image: str | None = None) -> None:
    """Shared by ``env import terminal-bench`` and ``env import harbor`` given TB1 tasks."""

    from palaestra.adapters.terminal_bench import import_terminal_bench

    if tasks_dir is None:
        tasks_dir = out.with_name(out.name + ".tasks") if out is not None else Path("terminal-bench-tasks")
    result = import_terminal_bench(directory, tasks_dir, env=env, id_prefix=id_prefix, base_image=base_image)
    _emit_rows(result, out, f" (task directories in {result.tasks_dir})")


def _emit_rows(result: Any, out: Path | None, where: str) -> None:
    """What both importers print: warnings, skipped tasks, then the rows (to stdout or ``out``); no rows is
    exit 1."""
    import orjson

    from palaestra.adapters.harbor import write_rows

    for note in result.warnings:
        typer.secho(f"warning: {note}", fg="yellow", err=True)
    for note in result.skipped:
        typer.secho(f"skipped: {note}", fg="red", err=True)
    if out is None:
        for task in result.tasks:
            sys.stdout.write(orjson.dumps(task.model_dump(mode="json", exclude_none=True)).decode() + "\n")
    else:
        write_rows(out, result.tasks)
        typer.echo(f"wrote {len(result.tasks)} task rows to {out}{where}", err=True)
    if not result.tasks:
        raise typer.Exit(1)


@export_app.command("nemo-gym")
def export_nemo_gym_cmd(
    run_dir: Path = typer.Argument(..., help="A run directory (as written by `palaestra eval run`)."),
    out: Path = typer.Option(..., "--out", help="The NeMo Gym rollouts JSONL to write."),
) -> None:
    """Write a run as NeMo Gym rollouts (plus its _materialized_inputs and _failures files)."""
    from palaestra.adapters.nemo_gym import export_nemo_gym
    from palaestra.core.errors import PalaestraError

    try:
        result = export_nemo_gym(run_dir, out)
    except PalaestraError as exc:
        fail(exc.message, exc.hint)
        return
    typer.echo(f"wrote {result.scored} scored rollouts to {result.rollouts}")
    typer.echo(f"wrote their inputs to {result.materialized_inputs}")
    if result.failures is not None:
        typer.echo(f"wrote {result.failed} failed rollouts (no reward) to {result.failures}")
    if result.skipped_tasks:
        typer.secho(f"warning: {len(result.skipped_tasks)} rollouts name tasks missing from tasks.jsonl "
                    f"(e.g. {result.skipped_tasks[0]}); skipped", fg="yellow", err=True)
