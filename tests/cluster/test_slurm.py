"""``palaestra cluster slurm``: the sbatch script, run under a shell harness (fake ``srun``/``scontrol``
and a fake Python that records what it was asked to start) for the multi-node logic, and submitted for
real to a one-node Slurm (slurmctld + slurmd on 127.0.0.1) when Slurm is installed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from palaestra.cluster.slurm import SlurmJob, render
from palaestra.core.errors import ConfigError
from palaestra.server.ports import free_port

SRUN = """#!/bin/bash
node=""
while [ $# -gt 0 ]; do case "$1" in -w) node="$2"; shift 2;; -*) shift;; *) break;; esac; done
echo "SRUN $node $*" >> "$FAKE_LOG"
exec "$@"
"""
SCONTROL = """#!/bin/bash
[ "$1 $2" = "show hostnames" ] && printf '%s\\n' $FAKE_NODES
"""
PYTHON = """#!/bin/bash
echo "PY $$ $*" >> "$FAKE_LOG"
case "$*" in
  *"raycli node-ip"*) echo 10.9.9.9 ;;
  *"raycli start"*) exec sleep 300 ;;
  *"raycli wait-nodes"*)  # like the real one: until that many nodes have started (here: been logged)
    [ "${FAKE_WAIT_RC:-0}" = 0 ] || exit "$FAKE_WAIT_RC"
    want=$(echo "$*" | sed -E 's/.*--nodes ([0-9]+).*/\\1/')
    for _ in $(seq 100); do
      [ "$(grep -c '^PY .*raycli start' "$FAKE_LOG")" -ge "$want" ] && exit 0
      sleep 0.1
    done
    exit 1 ;;
  *"raycli wait-http"*) exit 0 ;;
  "-c "*) echo tok ;;
  *"cli.main eval run"*) exit "${FAKE_EVAL_RC:-0}" ;;
esac
"""


def _harness(tmp: Path) -> dict[str, str]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", SRUN), ("scontrol", SCONTROL), ("fakepy", PYTHON)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PALAESTRA_PYTHON": str(bin_dir / "fakepy"),
            "FAKE_LOG": str(tmp / "log")}


def _run(tmp: Path, job: SlurmJob, **env: str) -> tuple[int, list[str]]:
    script = tmp / "job.sbatch"
    script.write_text(render(job))
    nodes = {"FAKE_NODES": " ".join(f"n{i + 1}" for i in range(job.nodes)), "SLURM_JOB_NODELIST": f"n[1-{job.nodes}]"}
    done = subprocess.run(["bash", str(script)], env={**_harness(tmp), **nodes, **env}, capture_output=True,
                          text=True, timeout=60)
    lines = (tmp / "log").read_text().splitlines()
    for line in lines:  # every process the fake Python became must be gone (the script's cleanup)
        if line.startswith("PY ") and "raycli start" in line:
            pid = int(line.split()[1])
            assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2], \
                f"ray node process {pid} outlived the script"
    return done.returncode, lines


def test_script_starts_head_workers_and_model_servers_then_the_eval(tmp_path: Path) -> None:
    job = SlurmJob(eval_args=["--env", "mcqa", "-o", "runs/a b"], nodes=3, node_ip="iface:ib0", ray_port=6390,
                   cluster_options="workers=8", model_server="exec sleep 300 # serve --port {port}",
                   model_port=8001, cpus_per_node=4, gpus_per_node=2, partition="gpu")
    text = render(job)
    for directive in ("--nodes=3", "--cpus-per-task=4", "--gpus-per-node=2", "--partition=gpu"):
        assert f"#SBATCH {directive}\n" in text
    rc, log = _run(tmp_path, job)
    assert rc == 0, log
    starts = [line for line in log if line.startswith("SRUN") and "raycli start" in line]
    assert len(starts) == 3
    assert starts[0].startswith("SRUN n1 ") and "--head" in starts[0] and "--port=6390" in starts[0]
    assert "--node-ip-address=iface:ib0" in starts[0] and "--num-cpus=4" in starts[0]
    assert {s.split()[1] for s in starts[1:]} == {"n2", "n3"}
    assert all("--address=10.9.9.9:6390" in s and "--head" not in s for s in starts[1:])
    waits = [line for line in log if "wait-nodes" in line and line.startswith("PY")]
    assert "--nodes 1" in waits[0] and "--nodes 3" in waits[-1]
    servers = [line for line in log if line.startswith("SRUN") and "serve --port 8001" in line]
    assert sorted(s.split()[1] for s in servers) == ["n1", "n2", "n3"]  # background steps log in any order
    evals = [line for line in log if "cli.main eval run" in line]
    assert len(evals) == 1
    urls = ",".join(["http://10.9.9.9:8001/v1"] * 3)
    assert evals[0].endswith(f"--env mcqa -o runs/a b --cluster ray:10.9.9.9:6390?workers=8 --model {urls}")
    assert log.index(evals[0]) > log.index(waits[-1]), "the eval started before every node joined"


def test_script_exits_with_the_evals_code_and_still_tears_down(tmp_path: Path) -> None:
    rc, log = _run(tmp_path, SlurmJob(eval_args=["--env", "mcqa"], nodes=2), FAKE_EVAL_RC="3")
    assert rc == 3
    assert sum("raycli start" in line for line in log if line.startswith("PY")) == 2


def test_script_stops_when_the_nodes_do_not_join(tmp_path: Path) -> None:
    rc, log = _run(tmp_path, SlurmJob(eval_args=["--env", "mcqa"], nodes=2), FAKE_WAIT_RC="1")
    assert rc == 1
    assert not any("eval run" in line for line in log)


def test_bad_combinations_are_refused_with_a_fix() -> None:
    with pytest.raises(ConfigError, match="drop --model"):
        render(SlurmJob(eval_args=["--model", "x"], model_server="vllm serve m --port {port}"))
    with pytest.raises(ConfigError, match="--cluster-options"):
        render(SlurmJob(eval_args=["--cluster", "ray"]))
    with pytest.raises(ConfigError, match="at least 2 nodes"):
        render(SlurmJob(eval_args=[], model_server="x", model_server_nodes="workers"))


# ---- a real single-node Slurm --------------------------------------------------------------------------

SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo")


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # the daemon's own process group (start_new_session)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def slurm() -> Iterator[dict[str, str]]:
    missing = [b for b in SLURM_BINARIES if shutil.which(b) is None]
    if missing:
        pytest.skip(f"slurm: Slurm is not installed ({', '.join(missing)}); .ci/setup-cluster.sh installs it")
    if os.geteuid() != 0:
        pytest.skip("slurm: the one-node Slurm runs its daemons as root")
    tmp = Path(tempfile.mkdtemp(prefix="pal-slurm-", dir="/tmp"))
    munge = tmp / "munge"
    munge.mkdir(mode=0o700)
    (munge / "key").write_bytes(os.urandom(128))  # a key of its own: nothing read from /etc/munge
    (munge / "key").chmod(0o600)
    host = socket.gethostname().split(".")[0]
    conf = tmp / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=palaestra", f"SlurmctldHost={host}(127.0.0.1)", f"SlurmctldPort={free_port()}",
        f"SlurmdPort={free_port()}", "AuthType=auth/munge", f"AuthInfo=socket={munge}/sock", "CredType=cred/munge",
        "SlurmUser=root", "SlurmdUser=root", f"StateSaveLocation={tmp}/state", f"SlurmdSpoolDir={tmp}/spool",
        f"SlurmctldPidFile={tmp}/ctld.pid", f"SlurmdPidFile={tmp}/d.pid", f"SlurmctldLogFile={tmp}/ctld.log",
        f"SlurmdLogFile={tmp}/d.log", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "SchedulerType=sched/builtin", "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
        "ReturnToService=2", "MpiDefault=none", "SlurmdParameters=config_overrides",
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory=1000 State=UNKNOWN",
        f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP", ""]))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(subprocess.Popen(["munged", "--foreground", "--force", f"--socket={munge}/sock",
                                       f"--key-file={munge}/key", f"--pid-file={munge}/pid",
                                       f"--log-file={munge}/log", f"--seed-file={munge}/seed"],
                                      start_new_session=True, stderr=subprocess.DEVNULL))
        time.sleep(0.5)
        procs.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(conf)], env=env, start_new_session=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        procs.append(subprocess.Popen(["slurmd", "-D", "-f", str(conf)], env=env, start_new_session=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        end = time.monotonic() + 30
        while time.monotonic() < end:
            state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True).stdout
            if state.strip() == "idle":
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the one-node Slurm did not come up: {(tmp / 'ctld.log').read_text()[-1500:]}")
        yield {"SLURM_CONF": str(conf), "tmp": str(tmp)}
        jobs = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True).stdout.split()
        if jobs:  # a failed test may leave its job running: cancel it while Slurm can still clean it up
            subprocess.run(["scancel", *jobs], env=env, capture_output=True)
            end = time.monotonic() + 30
            while time.monotonic() < end and subprocess.run(["squeue", "-h"], env=env, capture_output=True,
                                                            text=True).stdout.strip():
                time.sleep(0.5)
    finally:
        for proc in reversed(procs):
            _kill_tree(proc)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.timeout(200)
def test_submit_runs_an_eval_on_ray_inside_a_real_slurm_job(slurm: dict[str, str], tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="ray: the [ray] extra is not installed")
    ray_tmp = Path(slurm["tmp"]) / "ray"  # short: Ray's socket paths must stay under 107 bytes
    env = {**os.environ, "SLURM_CONF": slurm["SLURM_CONF"]}
    for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ADDRESS"):
        env.pop(k, None)
    cli = [sys.executable, "-c", "from palaestra.cli.cluster_cmds import app; app()"]  # `palaestra cluster`
    cmd = [*cli, "slurm", "--nodes", "1", "--node-ip", "iface:lo",
           "--ray-port", str(free_port()), "--object-store-mb", "100", "--cpus-per-node", "2",
           f"--ray-option=--temp-dir={ray_tmp}", "--start-timeout", "90", "--script", str(tmp_path / "job.sbatch"),
           "--output", str(tmp_path / "job.out"), "--submit",
           "--", "--env", "mcqa", "--limit", "4", "-k", "2", "--model", "scripted:oracle", "-q",
           "--out", str(tmp_path / "run")]
    done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.split("submitted batch job")[1].split()[0]
    state, end = "", time.monotonic() + 150  # poll: `sbatch --wait` checks back only every 2, 4, 8... s
    while time.monotonic() < end:
        info = subprocess.run(["scontrol", "-o", "show", "job", job_id], env=env, capture_output=True,
                              text=True).stdout
        fields = dict(f.split("=", 1) for f in info.split() if "=" in f)
        state = fields.get("JobState", "")
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            break
        time.sleep(0.5)
    log = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else "(no job log)"
    assert state == "COMPLETED", f"job {job_id}: {state}\n--- job log ---\n{log[-3000:]}"
    assert "eval finished with exit code 0" in log
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["overall"]["coverage"] == 1.0 and metrics["overall"]["mean_reward"] == 1.0
    assert json.loads((tmp_path / "run" / "cluster.json").read_text())["nodes"] == 1
    queue = subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True).stdout
    assert queue.strip() == "", f"the job is still queued or running: {queue}"
    end = time.monotonic() + 20  # the script's teardown stopped the Ray head it started
    while time.monotonic() < end and _processes_mentioning(str(ray_tmp)):
        time.sleep(0.5)
    assert not _processes_mentioning(str(ray_tmp)), "Ray processes of the job outlived it"


def _processes_mentioning(text: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if text.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    out.append(int(entry))
            except OSError:
                pass
    return out
