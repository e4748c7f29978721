"""``palaestra export KIND RUN_DIR --out FILE`` and ``palaestra serve rollouts``: thin commands over
``palaestra.train``. Mounted by main.py as ``app.command("export")(train_cmds.export)`` and
``app.add_typer(train_cmds.serve_app, name="serve")``; ``app`` here holds both for standalone use."""

from __future__ import annotations

import typer

from palaestra.cli.common import fail, guarded

app = typer.Typer(no_args_is_help=True, help="Training: export runs as training data; serve rollouts to trainers.")
serve_app = typer.Typer(no_args_is_help=True, help="Serve Palaestra to other programs.")


def export(
    kind: str = typer.Argument(..., help="sft (conversations above --min-reward) | dpo (chosen/rejected pairs per "
                                         "task) | rl (token ids, loss masks, logprobs, GRPO advantages) | nemo-gym "
                                         "(rollouts NeMo Gym's tools read)."),
    run_dir: str = typer.Argument(..., help="Run directory written by `palaestra eval run` (or its rollouts.jsonl)."),
    out: str = typer.Option(..., "--out", "-o", help="Output file: *.jsonl or *.parquet."),
    min_reward: float = typer.Option(1.0, help="sft: keep rollouts with at least this reward."),
    pairs: str = typer.Option("best_worst", help="dpo: best_worst (one pair per task) | all."),
    min_margin: float = typer.Option(0.0, help="dpo: chosen must beat rejected by more than this."),
    max_pairs: int = typer.Option(4, help="dpo: at most this many pairs per task (with --pairs all)."),
    normalisation: str = typer.Option("group", help="rl: advantage normalisation: group (GRPO) | mean (Dr. GRPO) "
                                                    "| batch | rloo | none."),
    on_drift: str = typer.Option("per_turn", help="rl: when a turn's prompt does not extend the previous turn's "
                                                  "tokens: per_turn samples | split at the drift | drop."),
) -> None:
    """Export a run as training data (format from the --out suffix), or as NeMo Gym rollouts (nemo-gym)."""
    if kind == "nemo-gym":
        from pathlib import Path

        from palaestra.cli.adapt_cmds import export_nemo_gym_cmd

        export_nemo_gym_cmd(Path(run_dir), Path(out))
        return
    from palaestra.train.export import ExportOptions, export_run

    options = ExportOptions(min_reward=min_reward, pairs=pairs, min_margin=min_margin, max_pairs_per_task=max_pairs,
                            normalisation=normalisation, on_drift=on_drift)  # type: ignore[arg-type]
    stats = guarded(export_run, kind, run_dir, out, options)
    line = f"wrote {stats.rows} {kind} row(s) to {out} from {stats.scored} scored of {stats.rollouts} rollout(s)"
    if kind == "rl":
        line += (f"; {stats.groups} group(s), {stats.flat_groups} with equal rewards; token_drift_rate "
                 f"{stats.token_drift_rate:.3f} ({stats.drifted_turns}/{stats.checked_turns} turns)")
    typer.echo(line)
    for why, n in stats.skipped.most_common(8):
        typer.echo(f"  skipped {n}: {why}", err=True)


def serve_rollouts(
    host: str = typer.Option("127.0.0.1", help="Bind address (loopback by default)."),
    port: int = typer.Option(8300, help="Port."),
    token_env: str = typer.Option("PALAESTRA_TOKEN", help="Variable holding the bearer token to require "
                                                          "(default: a generated one)."),
    no_token: bool = typer.Option(False, "--no-token", help="Serve without a token (loopback only): anyone on "
                                                            "this machine can then submit jobs."),
    token_file: str | None = typer.Option(None, help="Where to write the generated token (default: "
                                                     "$XDG_RUNTIME_DIR/palaestra/rollouts-PORT.token, else "
                                                     "~/.cache/palaestra/tokens/rollouts-PORT.token)."),
    allowed_host: list[str] = typer.Option([], "--allowed-host", help="Another Host name clients use (NAME or "
                                           "NAME:PORT; '*' for any). Loopback names are always accepted."),
    policy_host: list[str] = typer.Option([], "--policy-host", help="A host a job's policy endpoint may be on "
                                          "(NAME or NAME:PORT; repeat it). Loopback is always allowed; any "
                                          "other address in a job is refused with 400."),
    log_level: str = typer.Option("info", help="uvicorn log level; dropped/padded/stale groups log at warning."),
) -> None:
    """Serve the rollout service: trainers POST /jobs (tasks, group size, policy endpoint) and take finished
    groups from GET /jobs/{id}/groups. Requests need the bearer token printed at start (and saved in a
    0600 token file) unless --no-token."""
    import os

    from palaestra.core.errors import PalaestraError
    from palaestra.server.auth import check_bind, token_from_env
    from palaestra.server.security import GuardPolicy, choose_token, default_token_file, write_token_file

    given = token_from_env(token_env)
    try:
        token = choose_token(host, given=given, no_token=no_token, default_on=True)
        check_bind(host, token, token_env=token_env)
        guard = GuardPolicy.for_bind(host, token=token, allowed_hosts=allowed_host)
    except PalaestraError as exc:
        fail(exc.message, exc.hint)
        return
    import logging

    from palaestra.server.serving import run_guarded
    from palaestra.train.rollout_service import RolloutService
    from palaestra.train.service_app import create_service_app

    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("palaestra.train.service").setLevel(logging.INFO)

    def ready(actual: int) -> None:
        shown = f"[{host}]" if ":" in host else host
        typer.echo(f"palaestra rollout service on http://{shown}:{actual} (POST /jobs, GET /jobs/{{id}}/groups)",
                   err=True)
        if token is not None and given is None:  # printed this once; never logged
            where = write_token_file(token_file or default_token_file("rollouts", actual, os.environ.get(
                "XDG_RUNTIME_DIR")), token)
            typer.echo(f"  token: {token}\n  (saved in {where}, mode 0600; send Authorization: Bearer <token>)",
                       err=True)
        elif token is not None:
            typer.echo(f"  token: the value of ${token_env}", err=True)

    run_guarded(create_service_app(RolloutService(policy_hosts=tuple(policy_host))), guard, host=host, port=port,
                on_ready=ready, log_level=log_level)


app.command("export")(export)
app.command("serve-rollouts")(serve_rollouts)
serve_app.command("rollouts")(serve_rollouts)
