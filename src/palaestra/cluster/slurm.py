"""``palaestra cluster slurm``: an sbatch script that turns a Slurm allocation into a Ray cluster for one
eval run — a Ray head on the first node, workers on the others, optional model servers (e.g. vLLM) on
the nodes, then ``palaestra eval run --cluster ray:HEAD`` — and tears all of it down however it ends.

Every long-running piece is one ``srun --overlap`` step in the background, so ending the script (normally,
on error, on ``scancel`` or at the time limit) stops them through Slurm, and Slurm cleans up the rest."""

from __future__ import annotations

import shlex
import subprocess
import sys
from dataclasses import dataclass, field

from palaestra.core.errors import ConfigError


@dataclass
class SlurmJob:
    eval_args: list[str]  # passed to `palaestra eval run` as they are
    nodes: int = 1
    job_name: str = "palaestra"
    time: str | None = None  # Slurm's --time, e.g. 02:00:00
    partition: str | None = None
    account: str | None = None
    cpus_per_node: int | None = None
    gpus_per_node: int | None = None
    output: str = "palaestra-%j.out"
    sbatch_options: list[str] = field(default_factory=list)  # extra "#SBATCH" lines, e.g. --mem=64G
    setup: list[str] = field(default_factory=list)  # shell lines run first (module load, venv activation)
    python: str = sys.executable
    ray_port: int = 6379
    node_ip: str = "auto"  # auto | iface:NAME | a fixed address (one-node jobs)
    object_store_mb: int | None = None
    ray_options: list[str] = field(default_factory=list)  # extra `ray start` options, e.g. --temp-dir=/scratch/ray
    cluster_options: str = ""  # appended to --cluster, e.g. workers=16&env_replicas=4
    model_server: str | None = None  # command line; {port} is replaced by model_port
    model_port: int = 8000
    model_server_nodes: str = "all"  # all | workers (every node but the head)
    model_timeout_s: int = 1800
    start_timeout_s: int = 300

    def check(self) -> None:
        if self.nodes < 1:
            raise ConfigError("--nodes must be at least 1")
        if self.model_server and any(a in ("--model", "-m") or a.startswith("--model=") for a in self.eval_args):
            raise ConfigError("--model-server sets the eval's --model to the servers it starts",
                              hint="drop --model from the eval arguments (keep --model-name if the server needs it)")
        if self.model_server_nodes not in ("all", "workers"):
            raise ConfigError(f"--model-server-nodes '{self.model_server_nodes}': use all or workers")
        if self.model_server_nodes == "workers" and self.nodes < 2:
            raise ConfigError("--model-server-nodes workers needs at least 2 nodes")
        if any(a == "--cluster" or a.startswith("--cluster=") for a in self.eval_args):
            raise ConfigError("the script sets --cluster itself", hint="use --cluster-options for ?workers= etc.")


def render(job: SlurmJob) -> str:
    """The sbatch script, as text. Every value from the user is shell-quoted."""
    job.check()
    q = shlex.quote
    directives = [f"--job-name={job.job_name}", f"--nodes={job.nodes}", "--ntasks-per-node=1",
                  f"--output={job.output}"]
    if job.time:
        directives.append(f"--time={job.time}")
    if job.partition:
        directives.append(f"--partition={job.partition}")
    if job.account:
        directives.append(f"--account={job.account}")
    if job.cpus_per_node:
        directives.append(f"--cpus-per-task={job.cpus_per_node}")
    if job.gpus_per_node:
        directives.append(f"--gpus-per-node={job.gpus_per_node}")
    directives += job.sbatch_options
    ray_opts = ["--disable-usage-stats"]
    if job.cpus_per_node:
        ray_opts.append(f"--num-cpus={job.cpus_per_node}")
    if job.object_store_mb:
        ray_opts.append(f"--object-store-memory={job.object_store_mb * 1024 * 1024}")
    ray_opts += job.ray_options
    options = job.cluster_options.lstrip("?")
    cluster = f'ray:$ADDRESS{"?" + options if options else ""}'
    model_block = ""
    if job.model_server:
        cmd = job.model_server.replace("{port}", str(job.model_port))
        first = "1" if job.model_server_nodes == "workers" else "0"
        model_block = f"""
# ---- model servers, one per node, started as the Ray nodes are; the eval spreads its requests over them
MODEL_URLS=()
for node in "${{NODES[@]:{first}}}"; do
  srun --nodes=1 --ntasks=1 --overlap -w "$node" bash -c {q(cmd)} &
  STEPS+=($!)
  ip=$(srun --nodes=1 --ntasks=1 --overlap -w "$node" "$PY" -m palaestra.cluster.raycli node-ip {q(job.node_ip)})
  MODEL_URLS+=("http://$ip:{job.model_port}/v1")
done
for url in "${{MODEL_URLS[@]}}"; do
  "$PY" -m palaestra.cluster.raycli wait-http "$url/models" --timeout {job.model_timeout_s} || exit 1
done
EVAL_MODEL=(--model "$(IFS=,; echo "${{MODEL_URLS[*]}}")")
"""
    setup = "\n".join(job.setup)
    return f"""#!/bin/bash
{chr(10).join("#SBATCH " + d for d in directives)}
# Written by `palaestra cluster slurm`: a Ray head on the first node, Ray workers on the others, then
# `palaestra eval run --cluster ray:HEAD`. Everything started here stops when the script ends.
set -uo pipefail
{setup}
PY="${{PALAESTRA_PYTHON:-{job.python}}}"
RAY_PORT="${{PALAESTRA_RAY_PORT:-{job.ray_port}}}"
RAY_OPTS=({" ".join(q(o) for o in ray_opts)})
EVAL_MODEL=()
STEPS=()

cleanup() {{
  trap - EXIT TERM INT
  for pid in "${{STEPS[@]}}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${{STEPS[@]}}"; do wait "$pid" 2>/dev/null; done
}}
trap cleanup EXIT
trap 'exit 143' TERM INT

mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
HEAD="${{NODES[0]}}"
HEAD_IP=$(srun --nodes=1 --ntasks=1 --overlap -w "$HEAD" "$PY" -m palaestra.cluster.raycli node-ip {q(job.node_ip)})
ADDRESS="$HEAD_IP:$RAY_PORT"
# one token per job: only this job's processes can join or drive its Ray cluster
export RAY_AUTH_MODE=token
RAY_AUTH_TOKEN=$("$PY" -c 'import secrets; print(secrets.token_hex(32))')
export RAY_AUTH_TOKEN
echo "palaestra: Ray head on $HEAD ($ADDRESS), ${{#NODES[@]}} node(s): ${{NODES[*]}}"

srun --nodes=1 --ntasks=1 --overlap -w "$HEAD" "$PY" -m palaestra.cluster.raycli start --head --block \\
  --node-ip-address={q(job.node_ip)} --port="$RAY_PORT" --include-dashboard=false "${{RAY_OPTS[@]}}" &
STEPS+=($!)
HEAD_STEP=$!
"$PY" -m palaestra.cluster.raycli wait-nodes --address "$ADDRESS" --nodes 1 --timeout {job.start_timeout_s} \\
  --watch-pid "$HEAD_STEP" || exit 1
for node in "${{NODES[@]:1}}"; do
  srun --nodes=1 --ntasks=1 --overlap -w "$node" "$PY" -m palaestra.cluster.raycli start --block \\
    --address="$ADDRESS" --node-ip-address={q(job.node_ip)} "${{RAY_OPTS[@]}}" &
  STEPS+=($!)
done
"$PY" -m palaestra.cluster.raycli wait-nodes --address "$ADDRESS" --nodes "${{#NODES[@]}}" \\
  --timeout {job.start_timeout_s} --watch-pid "$HEAD_STEP" || exit 1
{model_block}
"$PY" -m palaestra.cli.main eval run {" ".join(q(a) for a in job.eval_args)} \\
  --cluster "{cluster}" "${{EVAL_MODEL[@]}}"
RC=$?
echo "palaestra: eval finished with exit code $RC"
exit $RC
"""


def submit(path: str, wait: bool = False) -> tuple[str, int]:
    """``sbatch`` the script: (job id, exit code). With ``wait``, block until the job ends (its exit code)."""
    cmd = ["sbatch", "--parsable"] + (["--wait"] if wait else []) + [path]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise ConfigError("sbatch not found: is this a Slurm login node?",
                          hint="write the script without --submit and copy it to the cluster") from None
    job_id = done.stdout.strip().split(";")[0]
    if not job_id:
        raise ConfigError(f"sbatch refused {path}: {done.stderr.strip() or done.stdout.strip()}",
                          hint="check the partition, account and limits in the script's #SBATCH lines")
    return job_id, done.returncode
