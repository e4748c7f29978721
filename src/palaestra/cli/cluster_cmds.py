"""``palaestra cluster ...``: Slurm batch scripts that run an eval on a Ray cluster made of the job's nodes."""

from __future__ import annotations

from pathlib import Path

import typer

from palaestra.cli.common import guarded

app = typer.Typer(no_args_is_help=True, help="Run evals on clusters: Slurm jobs that start Ray.")


@app.callback()
def _cluster() -> None:
    """Run evals on clusters (`eval run --cluster ray...` runs one on a Ray cluster you already have)."""


@app.command("slurm", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def slurm(
    ctx: typer.Context,
    nodes: int = typer.Option(1, "--nodes", "-N", help="Nodes: the first runs the Ray head and the eval driver."),
    script: str = typer.Option("palaestra.sbatch", "--script", help="Where to write the sbatch script."),
    submit: bool = typer.Option(False, "--submit", help="Submit it with sbatch (prints the job id)."),
    wait: bool = typer.Option(False, "--wait", help="With --submit: wait for the job and exit with its code."),
    job_name: str = typer.Option("palaestra", "--job-name"),
    time: str | None = typer.Option(None, "--time", help="Slurm time limit, e.g. 02:00:00."),
    partition: str | None = typer.Option(None, "--partition", "-p"),
    account: str | None = typer.Option(None, "--account", "-A"),
    cpus_per_node: int | None = typer.Option(None, "--cpus-per-node", help="CPUs per node (also Ray's)."),
    gpus_per_node: int | None = typer.Option(None, "--gpus-per-node"),
    output: str = typer.Option("palaestra-%j.out", "--output", help="The job's log (Slurm patterns allowed)."),
    sbatch_option: list[str] = typer.Option([], "--sbatch-option", help="Extra #SBATCH option, as "
                                                "--sbatch-option=--mem=64G (repeatable)."),
    setup: list[str] = typer.Option([], "--setup", help="Shell line run first, e.g. 'module load cuda' "
                                                        "(repeatable)."),
    python: str | None = typer.Option(None, "--python", help="Python with palaestra[ray] on the nodes "
                                                             "(default: this one)."),
    ray_port: int = typer.Option(6379, "--ray-port"),
    node_ip: str = typer.Option("auto", "--node-ip", help="How nodes find their address: auto | iface:NAME "
                                                          "(e.g. iface:ib0) | a fixed address."),
    object_store_mb: int | None = typer.Option(None, "--object-store-mb", help="Ray object store per node."),
    ray_option: list[str] = typer.Option([], "--ray-option", help="Extra `ray start` option, as "
                                               "--ray-option=--temp-dir=/scratch/ray (repeatable)."),
    cluster_options: str = typer.Option("", "--cluster-options", help="Added to --cluster, e.g. "
                                                                      "'workers=32&env_replicas=4'."),
    model_server: str | None = typer.Option(None, "--model-server", help="Command that serves the model on each "
                                            "node, {port} replaced, e.g. 'vllm serve Qwen/Qwen3-8B --port {port}'; "
                                            "the eval's --model becomes the list of their URLs."),
    model_port: int = typer.Option(8000, "--model-port"),
    model_server_nodes: str = typer.Option("all", "--model-server-nodes", help="all | workers (not the head)."),
    model_timeout_s: int = typer.Option(1800, "--model-timeout", help="Seconds a model server may take to load."),
    start_timeout_s: int = typer.Option(300, "--start-timeout", help="Seconds the Ray nodes may take to join."),
) -> None:
    """Write (and with --submit, submit) an sbatch script for `palaestra eval run`.

    Arguments after `--` go to `eval run` unchanged, e.g.
    `palaestra cluster slurm -N 4 --gpus-per-node 8 --submit -- --env mcqa -k 8 -o runs/mcqa`."""
    import sys

    from palaestra.cluster.slurm import SlurmJob, render
    from palaestra.cluster.slurm import submit as sbatch

    job = SlurmJob(eval_args=list(ctx.args), nodes=nodes, job_name=job_name, time=time, partition=partition,
                   account=account, cpus_per_node=cpus_per_node, gpus_per_node=gpus_per_node, output=output,
                   sbatch_options=list(sbatch_option), setup=list(setup), python=python or sys.executable,
                   ray_port=ray_port, node_ip=node_ip, object_store_mb=object_store_mb, ray_options=list(ray_option),
                   cluster_options=cluster_options, model_server=model_server, model_port=model_port,
                   model_server_nodes=model_server_nodes, model_timeout_s=model_timeout_s,
                   start_timeout_s=start_timeout_s)
    text = guarded(render, job)
    path = Path(script)
    path.write_text(text)
    path.chmod(0o755)
    typer.echo(f"wrote {path}")
    if not submit:
        typer.echo(f"submit it with: sbatch {path}")
        return
    job_id, code = guarded(sbatch, str(path), wait)
    typer.echo(f"submitted batch job {job_id}")
    if wait:
        typer.echo(f"job {job_id} finished with exit code {code}")
        raise typer.Exit(code)
