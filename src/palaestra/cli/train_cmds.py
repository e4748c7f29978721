"""``palaestra export KIND RUN_DIR --out FILE`` and ``palaestra serve rollouts``: thin commands over
``palaestra.train``. Mounted by main.py as ``app.command("export")(train_cmds.export)`` and
``app.add_typer(train_cmds.serve_app, name="serve")``; ``app`` here holds both for standalone use."""

from __future__ import annotations

import typer

from palaestra.cli.common import (
    ServeAuth,
    allowed_host_option,
    guarded,
    no_token_option,
    shown_host,
    token_env_option,
    token_file_option,
)

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
    from palaestra.train.sequence import drift_text

    options = ExportOptions(min_reward=min_reward, pairs=pairs, min_margin=min_margin, max_pairs_per_task=max_pairs,
                            normalisation=normalisation, on_drift=on_drift)  # type: ignore[arg-type]
    stats = guarded(export_run, kind, run_dir, out, options)
    line = f"wrote {stats.rows} {kind} row(s) to {out} from {stats.scored} scored of {stats.rollouts} rollout(s)"
    if kind == "rl":
        line += (f"; {stats.groups} group(s), {stats.flat_groups} with equal rewards; token_drift_rate "
                 f"{drift_text(stats.token_drift_rate)} ({stats.drifted_turns}/{stats.checked_turns} turns)")
    typer.echo(line)
    for why, n in stats.skipped.most_common(8):
        typer.echo(f"  skipped {n}: {why}", err=True)


def serve_rollouts(
    host: str = typer.Option("127.0.0.1", help="Bind address (loopback by default)."),
    port: int = typer.Option(8300, help="Port."),
    token_env: str = token_env_option(),
    no_token: bool = no_token_option("submit jobs"),
    token_file: str | None = token_file_option("rollouts"),
    allowed_host: list[str] = allowed_host_option(),
    policy_host: list[str] = typer.Option([], "--policy-host", help="A host a job's policy endpoint may be on "
                                          "(NAME or NAME:PORT; repeat it). Loopback is always allowed; any "
                                          "other address in a job is refused with 400."),
    log_level: str = typer.Option("info", help="uvicorn log level; dropped/padded/stale groups log at warning."),
) -> None:
    """Serve the rollout service: trainers POST /jobs (tasks, group size, policy endpoint) and take finished
    groups from GET /jobs/{id}/groups. Requests need the bearer token printed at start (and saved in a
    0600 token file) unless --no-token."""

    auth = ServeAuth.choose(host, token_env=token_env, no_token=no_token, default_on=True, allowed_hosts=allowed_host)
    import logging

    from palaestra.server.serving import run_guarded
    from palaestra.train.rollout_service import RolloutService
    from palaestra.train.service_app import create_service_app

    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("palaestra.train.service").setLevel(logging.INFO)

    def ready(actual: int) -> None:
        typer.echo(f"palaestra rollout service on http://{shown_host(host)}:{actual} "
                   "(POST /jobs, GET /jobs/{id}/groups)", err=True)
        auth.announce(auth.save("rollouts", actual, token_file), "send Authorization: Bearer <token>")

    run_guarded(create_service_app(RolloutService(policy_hosts=tuple(policy_host))), auth.guard, host=host,
                port=port, on_ready=ready, log_level=log_level)


app.command("export")(export)
app.command("serve-rollouts")(serve_rollouts)
serve_app.command("rollouts")(serve_rollouts)
