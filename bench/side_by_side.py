"""Palaestra and its peers side by side: the same instant model, the same rows, the same JSON keys.

Every tool collects rollouts of the same NeMo Gym mcqa rows (built from Palaestra's bundled mcqa tasks,
in NeMo Gym's own row format, which Palaestra reads as it is) from the same model server
(``bench/side_by_side_model.py``: Palaestra's scripted oracle, which answers each row correctly and
instantly), over loopback, with the same knobs (rows, concurrency, model latency). What is measured is what
each tool itself costs per rollout when the model costs nothing. One JSON line per tool (and round) on
stdout, progress and a summary table on stderr:

    python bench/side_by_side.py                  # 2000 rows, concurrency 64, every tool that is installed
    python bench/side_by_side.py --tiny           # 20 rows, concurrency 4: a smoke run
    python bench/side_by_side.py --tools palaestra --tasks 500 --latency-ms 200
    python bench/side_by_side.py --tasks 500 --rounds 2 --tools palaestra,inspect-ai,verifiers
    python bench/side_by_side.py --tasks 500 --rounds 2 --tools palaestra,lm-eval

Tools (``--tools``, run in that order; ``--rounds N`` repeats them, interleaved, the order reversed every
other round, and the table gives medians over rounds):
  palaestra    ``palaestra eval run --env mcqa --input ROWS --model URL``
  nemo-gym     ``gym env start`` (Ray and its servers), then ``gym eval run --no-serve``; from
               ``bash .ci/setup-nemo-gym.sh`` (a venv of its own, located by ``tests/fixtures/nemo_gym.py``).
               Its first start builds one venv per server with uv from PyPI (minutes; later starts reuse them).
  inspect-ai   ``inspect eval TASKFILE --model openai-api/bench/fake-model --max-connections C --max-samples C
               --display none``: a task file written into the work dir (each row's prompt as it is,
               ``generate()``, a scorer of the ``\\boxed{}`` letter); rewards read back from its ``.eval`` log
  verifiers    ``vf-eval MODULE -n ROWS -r 1 -c C -s``: an environment module written into the work dir (a
               classic ``vf.SingleTurnEnv`` with a one-function ``vf.Rubric`` on the ``\\boxed{}`` letter);
               rewards read back from its results.jsonl
  lm-eval      ``lm_eval run --model local-chat-completions --model_args model=...,base_url=...,num_concurrent=C,
               tokenizer_backend=None,tokenized_requests=False --apply_chat_template --include_path DIR --tasks
               NAME --output_path OUT``: a YAML task written into the work dir (the rows as a local JSON data
               set, each row's prompt as it is, a regex filter of the last ``\\boxed{}`` letter, exact_match);
               its score and sample count read back from its results JSON
Inspect AI, verifiers 0.3 and lm-eval come from ``bash .ci/setup-peers.sh`` (venvs of their own, located by
``tests/fixtures/peers.py``). A tool that is not installed is skipped with a note naming the script that
installs it; ``--require-nemo-gym`` / ``--require-peers`` turn that into a failure.

Keys (the same for every tool):
  rollouts, mean_reward          what came back (every row is answerable: mean_reward 1.0 is expected)
  eval_wall_s, rollouts_per_s    the collecting command from launch to exit, and rollouts / that wall
  collect_s, rollouts_per_s_collect   first model request -> last model response, seen by the model server
  startup_s                      time before collection starts: servers launch -> ready (NeMo Gym's
                                 `gym env start`; 0 for Palaestra, which starts none) + eval launch -> first
                                 model request
  client_cpu_s                   CPU of the collecting command and everything it started (wait4 rusage, or
                                 the sum over its session from /proc, whichever is larger)
  servers_cpu_s                  CPU of the tool's long-lived servers (NeMo Gym's Ray + servers session)
                                 while the eval ran; 0 for the others (one command each: what it starts, such
                                 as vf-eval's env-server worker, is client CPU); their start-up CPU is
                                 servers_startup_cpu_s
  cpu_ms_per_rollout             (client_cpu_s + servers_cpu_s) / rollouts: the steadiest figure on a busy VM
  peak_rss_mb_client, peak_rss_mb_servers   the client's largest process (rusage) or the sum over its session,
                                 whichever is larger; servers summed over their session
  servers_max_procs              most processes seen at once in the servers' session (0: none)
  procs_left_at_end              processes of the tool still alive after it exited (given up to 3 s to end on
                                 their own) / after its servers' own shutdown (each then stopped by pid)
  fake_cpu_s                     the model server's own CPU, reported and excluded from everything else
  error                          null, or why the run failed
  round                          which round of --rounds the line belongs to (1 without it)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import runpy
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from palaestra.server.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20
NEMO_GYM_AGENT = "mcqa_simple_agent"
NEMO_GYM_RESOURCES = "mcqa"


def log(message: str) -> None:
    print(f"[side_by_side {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def nemo_gym_location() -> dict[str, Any]:
    """tests/fixtures/nemo_gym.py: where .ci/setup-nemo-gym.sh put NeMo Gym (the tests look there too)."""
    return runpy.run_path(str(ROOT / "tests" / "fixtures" / "nemo_gym.py"))


# ---- rows ----------------------------------------------------------------------------------------
def make_rows(n: int, out: Path) -> Path:
    """``n`` NeMo Gym mcqa rows cycling over Palaestra's bundled mcqa tasks, each with a unique uuid.

    The question text is exactly the prompt Palaestra renders for the bundled task (options and the
    ``\\boxed{}`` instruction included), so the oracle recognises it whichever tool sends it, and
    Palaestra leaves it as it is (the options are already listed)."""
    from palaestra.envs.mcqa.reading import normalize_options
    from palaestra.envs.registry import load_env

    env = load_env("mcqa")
    base = []
    for task in env.examples():
        user = [m for m in env.prompt(task) if m.get("role") == "user"][-1]
        options = [{letter: text} for letter, text in normalize_options(task.metadata["options"])]  # NeMo Gym's shape
        base.append({"responses_create_params": {"input": [{"role": "user", "content": user["content"]}]},
                     "options": options, "expected_answer": task.metadata["expected_answer"],
                     "grading_mode": "strict_single_letter_boxed", "uuid": task.id})
    with out.open("w", encoding="utf-8") as fh:
        for i in range(n):
            row = dict(base[i % len(base)])
            row["uuid"] = f"{row['uuid']}-{i}"
            fh.write(json.dumps(row) + "\n")
    return out


# ---- processes -----------------------------------------------------------------------------------
def http(method: str, url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


def wait_until(predicate: Any, timeout_s: float, what: str, alive: subprocess.Popen[bytes] | None = None,
               interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if alive is not None and alive.poll() is not None:
            raise RuntimeError(f"{what}: the process exited with status {alive.returncode} before it was ready")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not ready after {timeout_s:.0f} s")
        time.sleep(interval)


def _stat(pid: int) -> tuple[int, float, int] | None:
    """(session id, CPU seconds so far, RSS pages) of a live process, from /proc/PID/stat."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2:].split()  # after "pid (comm) ", fields start at index 3 ("state")
    return int(fields[3]), (int(fields[11]) + int(fields[12])) / CLK_TCK, int(fields[21])


def _running(pid: int) -> bool:
    """Alive and not a zombie (one that has exited and only waits to be reaped is not left running)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return raw[raw.rindex(b")") + 2:raw.rindex(b")") + 3] not in (b"Z", b"X")


class SessionSampler:
    """CPU and memory of every process in one session, sampled from /proc in a thread.

    A process's CPU is kept at the last value seen, so one that exits mid-window still counts (up to one
    interval of its last work is lost: negligible for long-lived servers)."""

    def __init__(self, sid: int, interval: float = 0.25) -> None:
        self.sid = sid
        self.interval = interval
        self.cpu: dict[int, float] = {}
        self.peak_rss_mb = 0.0
        self.max_procs = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def members(self) -> list[int]:
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                st = _stat(int(entry))
                if st is not None and st[0] == self.sid:
                    out.append(int(entry))
        return out

    def sample(self) -> None:
        rss, procs = 0, 0
        with self._lock:
            for pid in self.members():
                st = _stat(pid)
                if st is None:
                    continue
                procs += 1
                rss += st[2]
                self.cpu[pid] = max(self.cpu.get(pid, 0.0), st[1])
            self.peak_rss_mb = max(self.peak_rss_mb, rss * PAGE_MB)
            self.max_procs = max(self.max_procs, procs)

    def snapshot(self) -> dict[int, float]:
        self.sample()
        with self._lock:
            return dict(self.cpu)

    @staticmethod
    def cpu_between(start: dict[int, float], end: dict[int, float]) -> float:
        return sum(v - start.get(pid, 0.0) for pid, v in end.items())

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> SessionSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def stop_session(leader: subprocess.Popen[bytes], sid: int, first: int = signal.SIGTERM, grace_s: float = 30.0,
                 settle_s: float = 0.0) -> int:
    """Stop a session this script started: ``first`` to its leader, then TERM and KILL to any member left.

    Only processes whose session id is ``sid`` (a session created for the command) are signalled, by pid.
    Members get up to ``settle_s`` to exit on their own after the leader is gone (a helper such as
    multiprocessing's resource tracker ends a moment after its parent). Returns how many members were still
    alive after that."""
    if leader.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(leader.pid, first)
        try:
            leader.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(leader.pid, signal.SIGKILL)
            leader.wait()
    probe = SessionSampler(sid)
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline and any(_running(pid) for pid in probe.members()):
        time.sleep(0.05)
    left = [pid for pid in probe.members() if _running(pid)]
    for pid in left:
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            log(f"left running by session {sid}, stopped: pid {pid}: {cmdline[:200]}")
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in probe.members():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 5
        while probe.members() and time.monotonic() < deadline:
            time.sleep(0.1)
    return len(left)


@dataclass
class Measured:
    rc: int
    t0: float
    t1: float
    cpu_s: float
    peak_rss_mb: float
    left: int  # processes of its session still alive after it exited (then stopped)


def run_measured(cmd: list[str], cwd: Path, env: dict[str, str], log_path: Path) -> Measured:
    """Run a command in a session of its own; CPU is the larger of wait4's rusage (it and every child it
    reaped) and the /proc sum over its session (catching children it never reaped)."""
    with log_path.open("wb") as out:
        t0 = time.time()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        with SessionSampler(proc.pid) as sampler:
            _, status, usage = os.wait4(proc.pid, 0)
            t1 = time.time()
            tree = SessionSampler.cpu_between({}, sampler.snapshot())
        proc.returncode = os.waitstatus_to_exitcode(status)
        left = stop_session(proc, proc.pid, settle_s=3.0)  # anything it left behind
    cpu = max(usage.ru_utime + usage.ru_stime, tree)
    return Measured(proc.returncode, t0, t1, cpu, max(usage.ru_maxrss / 1024, sampler.peak_rss_mb), left)


@contextlib.contextmanager
def model_server(work: Path, latency_ms: float) -> Iterator[tuple[str, SessionSampler]]:
    """bench/side_by_side_model.py in a process (and session) of its own; yields its base URL."""
    port = free_port()
    with (work / "model.log").open("wb") as out:
        proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "side_by_side_model.py"), "--port", str(port),
                                 "--latency-ms", str(latency_ms)], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: http("GET", base + "/stats")[0] == 200, 60, "the model server", alive=proc)
        with SessionSampler(proc.pid) as sampler:
            yield base, sampler
    finally:
        stop_session(proc, proc.pid, grace_s=10)


def model_stats(base: str) -> dict[str, Any]:
    code, body = http("GET", base + "/stats")
    return dict(json.loads(body)) if code == 200 else {}


def summary(framework: str, version: str | None, rows: int, args: argparse.Namespace, rewards: list[float],
            m: Measured, stats: dict[str, Any], fake_cpu_s: float, *, servers_cpu_s: float = 0.0,
            servers_startup_s: float = 0.0, servers_startup_cpu_s: float = 0.0, peak_rss_mb_servers: float = 0.0,
            servers_max_procs: int = 0, servers_left: int = 0) -> dict[str, Any]:
    first, last = stats.get("first_request_t"), stats.get("last_response_t")
    collect = (last - first) if first and last and last > first else None
    n = len(rewards)
    wall = m.t1 - m.t0
    out: dict[str, Any] = {
        "framework": framework, "version": version, "ok": m.rc == 0 and n == rows,
        "tasks": rows, "concurrency": args.concurrency, "latency_ms": args.latency_ms,
        "rollouts": n, "mean_reward": round(sum(rewards) / n, 4) if n else None,
        "startup_s": round(servers_startup_s + (first - m.t0), 2) if first else None,
        "eval_wall_s": round(wall, 2), "rollouts_per_s": round(n / wall, 1) if wall > 0 else None,
        "collect_s": round(collect, 3) if collect else None,
        "rollouts_per_s_collect": round(n / collect, 1) if collect else None,
        "model_calls": stats.get("requests"),
        "client_cpu_s": round(m.cpu_s, 2), "servers_cpu_s": round(servers_cpu_s, 2),
        "servers_startup_cpu_s": round(servers_startup_cpu_s, 2),
        "cpu_ms_per_rollout": round(1000 * (m.cpu_s + servers_cpu_s) / n, 3) if n else None,
        "peak_rss_mb_client": round(m.peak_rss_mb, 1), "peak_rss_mb_servers": round(peak_rss_mb_servers, 1),
        "servers_max_procs": servers_max_procs, "procs_left_at_end": m.left + servers_left,
        "fake_cpu_s": round(fake_cpu_s, 2), "error": f"exit status {m.rc}" if m.rc != 0 else None,
    }
    return out


Command = Callable[[str], tuple[list[str], dict[str, str]]]  # model base URL -> (argv, environment)


def measure_client(args: argparse.Namespace, work: Path, what: str,
                   command: Command) -> tuple[Measured, dict[str, Any], float]:
    """A tool whose whole run is one command (no servers of its own): start the model server, run
    ``command(base_url)`` measured (in ``work``, output to ``work/eval.log``); (measured, model stats,
    the model server's CPU while it ran)."""
    work.mkdir(parents=True, exist_ok=True)
    with model_server(work, args.latency_ms) as (base, fake):
        cmd, env = command(base)
        fake0 = fake.snapshot()
        http("POST", base + "/stats/reset")
        m = run_measured(cmd, work, env, work / "eval.log")
        stats = model_stats(base)
        fake_cpu = SessionSampler.cpu_between(fake0, fake.snapshot())
    if m.rc != 0:
        log(f"{what} failed: " + (work / "eval.log").read_text(errors="replace")[-2000:])
    return m, stats, fake_cpu


def venv_output(python: Path, code: str, *argv: str, env: dict[str, str] | None = None) -> str:
    """What ``code`` prints when a peer's own interpreter runs it (outside any measurement)."""
    done = subprocess.run([str(python), "-c", code, *argv], capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{python} -c ...: exit status {done.returncode}: {done.stderr[-1500:]}")
    return done.stdout


# ---- Palaestra -----------------------------------------------------------------------------------
def run_palaestra(args: argparse.Namespace, rows_path: Path, rows: int, work: Path) -> dict[str, Any]:
    from palaestra import __version__

    cli = shutil.which("palaestra", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    if cli is None:
        raise RuntimeError("no `palaestra` command beside this Python or on PATH (pip install -e .)")
    env = {**os.environ, "OPENAI_API_KEY": "bench-dummy-key"}  # the model server ignores it
    m, stats, fake_cpu = measure_client(args, work, "palaestra eval run", lambda base: (
        [cli, "eval", "run", "--env", "mcqa", "--input", str(rows_path), "--model", base + "/v1",
         "--model-name", "fake-model", "--concurrency", str(args.concurrency), "--out", str(work / "run")], env))
    rewards = []
    journal = work / "run" / "rollouts.jsonl"
    if journal.is_file():
        for line in journal.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                verdict = record.get("verdict") or {}
                if record.get("outcome", {}).get("status") == "scored" and verdict.get("reward") is not None:
                    rewards.append(float(verdict["reward"]))
    return summary("palaestra", __version__, rows, args, rewards, m, stats, fake_cpu)


# ---- NeMo Gym ------------------------------------------------------------------------------------
def nemo_gym_env(venv: Path, work: Path) -> dict[str, str]:
    """The environment `gym` runs in: its venv and base interpreter first on PATH (uv builds the per-server
    venvs from that interpreter and must never download one), Hydra/W&B kept local and quiet."""
    home = ""
    for line in (venv / "pyvenv.cfg").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home":
            home = value.strip()
    env = {**os.environ, "PATH": os.pathsep.join(p for p in (str(venv / "bin"), home, os.environ.get("PATH", "")) if p),
           "UV_PYTHON_DOWNLOADS": "never", "WANDB_MODE": "disabled", "VIRTUAL_ENV": str(venv),
           # Ray's local cluster takes the node's network address unless told it is not a cluster; this
           # keeps every Ray process (and all traffic between them) on 127.0.0.1.
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    probe = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import sys; print(int(sys.version_info[:3] >= (3, 13, 14)))"],
                           capture_output=True, text=True, check=True)
    if probe.stdout.strip() != "1":
        # nemo-gym >= 0.5 declares Requires-Python >=3.13.14; uv has no --ignore-requires-python, so the server
        # venvs are resolved as for that version (the installer did the same for pip).
        config = work / "uv.toml"
        config.write_text('[pip]\npython-version = "3.13.14"\n')
        env["UV_CONFIG_FILE"] = str(config)
    return env


def run_nemo_gym(args: argparse.Namespace, rows_path: Path, rows: int, work: Path, venv: Path) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    env = nemo_gym_env(venv, work)
    gym = str(venv / "bin" / "gym")
    version = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import importlib.metadata as m; print(m.version('nemo-gym'))"],
                             capture_output=True, text=True).stdout.strip() or None
    cache = venv.parent
    head_port = free_port()
    with model_server(work, args.latency_ms) as (base, fake):
        # env.yaml in the cwd is where gym reads its local settings from.
        (work / "env.yaml").write_text(
            f"policy_base_url: {base}/v1\npolicy_api_key: bench-dummy-key\npolicy_model_name: fake-model\n"
            f"uv_venv_dir: {cache / (venv.name + '-servers')}\nuv_cache_dir: {cache / 'uv-cache'}\n"
            f"head_server:\n  host: 127.0.0.1\n  port: {head_port}\n")
        log(f"nemo-gym {version}: gym env start (the first start builds the server venvs: minutes)")
        with (work / "env_start.log").open("wb") as out:
            t_start = time.time()
            servers = subprocess.Popen([gym, "env", "start", "--resources-server", NEMO_GYM_RESOURCES,
                                        "--model-type", "openai_model"], cwd=work, env=env, stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        left = 0
        try:
            with SessionSampler(servers.pid, interval=0.5) as sampler:
                wait_until(lambda: http("GET", f"http://127.0.0.1:{head_port}/readyz")[0] == 200,
                           args.startup_timeout, "gym env start", alive=servers, interval=0.5)
                t_ready = time.time()
                startup_cpu = SessionSampler.cpu_between({}, sampler.snapshot())
                log(f"NeMo Gym servers ready after {t_ready - t_start:.1f} s; gym eval run")
                time.sleep(2)  # past the servers' own post-ready polling
                servers0, fake0 = sampler.snapshot(), fake.snapshot()
                http("POST", base + "/stats/reset")
                out_path = work / "rollouts.jsonl"
                m = run_measured([gym, "eval", "run", "--no-serve", "--agent", NEMO_GYM_AGENT, "--input",
                                  str(rows_path), "--output", str(out_path), "--num-repeats", "1",
                                  "--concurrency", str(args.concurrency)], work, env, work / "eval.log")
                stats = model_stats(base)
                servers_cpu = SessionSampler.cpu_between(servers0, sampler.snapshot())
                fake_cpu = SessionSampler.cpu_between(fake0, fake.snapshot())
                peak_servers = sampler.peak_rss_mb
                max_procs = sampler.max_procs
        finally:
            # SIGINT: gym's own shutdown path (servers and Ray); whatever is left is stopped by pid.
            left = stop_session(servers, servers.pid, first=signal.SIGINT, grace_s=60)
    rewards = []
    if out_path.is_file():
        for line in out_path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                reward = json.loads(line).get("reward")
                if reward is not None:
                    rewards.append(float(reward))
    if m.rc != 0:
        log("gym eval run failed: " + (work / "eval.log").read_text(errors="replace")[-2000:])
    return summary("nemo-gym", version, rows, args, rewards, m, stats, fake_cpu, servers_cpu_s=servers_cpu,
                   servers_startup_s=t_ready - t_start, servers_startup_cpu_s=startup_cpu,
                   peak_rss_mb_servers=peak_servers, servers_max_procs=max_procs, servers_left=left)


# ---- peers: Inspect AI, verifiers and lm-evaluation-harness ------------------------------------------------------
def peers_location() -> dict[str, Any]:
    """tests/fixtures/peers.py: where .ci/setup-peers.sh put the peers (the tests look there too)."""
    return runpy.run_path(str(ROOT / "tests" / "fixtures" / "peers.py"))


def peer_env(venv: Path, work: Path, **extra: str) -> dict[str, str]:
    """The environment a peer runs in, as a user's shell with its venv activated would give it: its venv
    first on PATH, its caches and XDG folders in the work dir (nothing written to $HOME), offline for the
    Hugging Face hub, and no OpenAI/Inspect settings inherited from the caller (only the fake is reached)."""
    drop = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "PYTHONPATH", "PYTHONHOME", "INSPECT_LOG_DIR", "INSPECT_EVAL_MODEL",
            "INSPECT_EVAL_MODEL_BASE_URL", "INSPECT_DISPLAY")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    xdg = work / "xdg"
    env.update({"PATH": str(venv / "bin") + os.pathsep + os.environ.get("PATH", ""), "VIRTUAL_ENV": str(venv),
                "XDG_DATA_HOME": str(xdg / "data"), "XDG_CACHE_HOME": str(xdg / "cache"),
                "XDG_CONFIG_HOME": str(xdg / "config"), "XDG_STATE_HOME": str(xdg / "state"),
                "HF_HOME": str(xdg / "hf"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                "HF_HUB_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "1", **extra})
    return env


# The task a user would write for these rows: each row's prompt sent as it is (it lists the options and asks
# for \boxed{}), generate(), and a scorer giving 1.0 when the last \boxed{} letter is the row's expected one.
INSPECT_TASK = r'''"""The side-by-side bench's mcqa rows as an Inspect AI task (written by bench/side_by_side.py)."""

import re

from inspect_ai import Task, task
from inspect_ai.dataset import Sample, json_dataset
from inspect_ai.scorer import Score, Target, mean, scorer
from inspect_ai.solver import TaskState, generate

BOXED = re.compile(r"\\boxed\{\s*([A-Za-z])\s*\}")


def row_to_sample(row):
    (message,) = row["responses_create_params"]["input"]  # one user message, sent as it is
    return Sample(id=row["uuid"], input=message["content"], target=row["expected_answer"])


@scorer(metrics=[mean()])
def boxed_letter():
    async def score(state: TaskState, target: Target) -> Score:
        letters = BOXED.findall(state.output.completion)
        answer = letters[-1] if letters else None
        return Score(value=1.0 if answer == target.text else 0.0, answer=answer)

    return score


@task
def mcqa_rows(rows: str):
    return Task(dataset=json_dataset(rows, row_to_sample), solver=generate(), scorer=boxed_letter())
'''

# Run by Inspect's own interpreter after the measured command: the rewards its log holds.
INSPECT_READ_LOG = """
import json, sys
from inspect_ai.log import read_eval_log
log = read_eval_log(sys.argv[1])
rewards = [float(s.scores["boxed_letter"].value) for s in log.samples or [] if s.scores and not s.error]
print(json.dumps({"status": log.status, "rewards": rewards}))
"""


def run_inspect(args: argparse.Namespace, rows_path: Path, rows: int, work: Path,
                peers: dict[str, Any]) -> dict[str, Any]:
    """``inspect eval`` of a task file in the work dir (its cwd: Inspect wants a relative path), its
    ``openai-api`` provider pointed at the fake (Chat Completions), ``--max-connections`` and ``--max-samples``
    = the concurrency, the default ``.eval`` log (samples included) as a user gets it; rewards read back from
    that log afterwards."""
    venv = peers["venv_dir"]("inspect-ai")
    work.mkdir(parents=True, exist_ok=True)
    task_file = work / "mcqa_rows.py"
    task_file.write_text(INSPECT_TASK, encoding="utf-8")
    logs = work / "logs"

    def command(base: str) -> tuple[list[str], dict[str, str]]:
        # openai-api/<name>/<model> reads <NAME>_BASE_URL and <NAME>_API_KEY
        env = peer_env(venv, work, BENCH_BASE_URL=base + "/v1", BENCH_API_KEY="bench-dummy-key")
        return [str(peers["command_path"]("inspect-ai")), "eval", task_file.name, "-T", f"rows={rows_path}",
                "--model", "openai-api/bench/fake-model", "--max-connections", str(args.concurrency),
                "--max-samples", str(args.concurrency), "--display", "none", "--log-dir", str(logs)], env

    m, stats, fake_cpu = measure_client(args, work, "inspect eval", command)
    rewards: list[float] = []
    found = sorted(logs.glob("*.eval")) if logs.is_dir() else []
    if found:
        read = json.loads(venv_output(peers["python_path"]("inspect-ai"), INSPECT_READ_LOG, str(found[-1]),
                                      env=peer_env(venv, work)))
        rewards = read["rewards"]
        if read["status"] != "success":
            log(f"inspect eval: its log says status {read['status']!r}")
    return summary("inspect-ai", peers["version"]("inspect-ai"), rows, args, rewards, m, stats, fake_cpu)


# The environment module a verifiers user would write: a SingleTurnEnv over the rows (each row's prompt as
# its chat prompt, the expected letter as the answer) and a Rubric of one function, 1.0 when the letter in
# the reply's \boxed{} is the answer.
VERIFIERS_ENV = '''"""The side-by-side bench's mcqa rows as a verifiers environment (from bench/side_by_side.py)."""

import json

import verifiers as vf
from datasets import Dataset


def load_environment(rows: str, **kwargs):
    records = []
    with open(rows, encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            prompt = [{"role": m["role"], "content": m["content"]} for m in row["responses_create_params"]["input"]]
            records.append({"prompt": prompt, "answer": row["expected_answer"]})
    parser = vf.Parser(extract_fn=vf.extract_boxed_answer)

    def boxed_letter(completion, answer, **_) -> float:
        letter = parser.parse_answer(completion)
        return 1.0 if letter is not None and letter.strip() == answer else 0.0

    rubric = vf.Rubric(funcs=[boxed_letter], weights=[1.0], parser=parser)
    return vf.SingleTurnEnv(eval_dataset=Dataset.from_list(records), parser=parser, rubric=rubric, **kwargs)
'''
VERIFIERS_MODULE = "palaestra_bench_mcqa"


def run_verifiers(args: argparse.Namespace, rows_path: Path, rows: int, work: Path,
                  peers: dict[str, Any]) -> dict[str, Any]:
    """``vf-eval`` (verifiers' own command for its classic API) of an environment module in the work dir, on
    PYTHONPATH, Chat Completions to the fake, ``-c`` = the concurrency, results saved (``-s``) and read back."""
    venv = peers["venv_dir"]("verifiers")
    work.mkdir(parents=True, exist_ok=True)
    (work / "envmod").mkdir(exist_ok=True)
    (work / "envmod" / f"{VERIFIERS_MODULE}.py").write_text(VERIFIERS_ENV, encoding="utf-8")
    out = work / "vf_out"

    def command(base: str) -> tuple[list[str], dict[str, str]]:
        env = peer_env(venv, work, PYTHONPATH=str(work / "envmod"), BENCH_API_KEY="bench-dummy-key")
        return [str(peers["command_path"]("verifiers")), VERIFIERS_MODULE, "-a", json.dumps({"rows": str(rows_path)}),
                "-m", "fake-model", "-b", base + "/v1", "-k", "BENCH_API_KEY",
                "--api-client-type", "openai_chat_completions", "-n", str(rows), "-r", "1",
                "-c", str(args.concurrency), "-s", "-o", str(out)], env

    m, stats, fake_cpu = measure_client(args, work, "vf-eval", command)
    rewards = []
    for results in sorted(out.rglob("results.jsonl")) if out.is_dir() else []:
        for line in results.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if record.get("reward") is not None and not record.get("error"):
                    rewards.append(float(record["reward"]))
    return summary("verifiers", peers["version"]("verifiers"), rows, args, rewards, m, stats, fake_cpu)


# The task an lm-evaluation-harness user would write for these rows: the JSONL as a local ``json`` data set,
# each row's prompt sent as it is (as the one user message, with --apply_chat_template), zero-shot,
# generate_until, a regex filter keeping the last \boxed{} letter, and the built-in exact_match (no Hugging
# Face ``evaluate`` download) against the row's expected letter.
LM_EVAL_TASK_NAME = "palaestra_bench_mcqa"
LM_EVAL_TASK = r"""# The side-by-side bench's mcqa rows as an lm-eval task (written by bench/side_by_side.py).
task: %(name)s
dataset_path: json
dataset_kwargs:
  data_files:
    test: %(rows)s
test_split: test
output_type: generate_until
doc_to_text: "{{responses_create_params.input[0].content}}"
doc_to_target: "{{expected_answer}}"
generation_kwargs:
  until: ["\n\n"]
  max_gen_toks: 256
  temperature: 0
filter_list:
  - name: boxed
    filter:
      - function: regex
        regex_pattern: '\\boxed\{\s*([A-Za-z])\s*\}'
        group_select: -1
      - function: take_first
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def run_lm_eval(args: argparse.Namespace, rows_path: Path, rows: int, work: Path,
                peers: dict[str, Any]) -> dict[str, Any]:
    """``lm_eval run`` of a task directory in the work dir (``--include_path``), its
    ``local-chat-completions`` model pointed at the fake (Chat Completions), ``num_concurrent`` = the
    concurrency, no tokenizer at all (``tokenizer_backend=None``, ``tokenized_requests=False``: nothing to
    download), the Hugging Face datasets/hub/evaluate libraries offline with their caches in the work dir.
    No ``--log_samples`` (a user's default): its results JSON gives the number of samples scored and their
    exact_match mean, read back afterwards (exact_match is 0 or 1 per sample, so those two give every
    sample's reward)."""
    venv = peers["venv_dir"]("lm-eval")
    work.mkdir(parents=True, exist_ok=True)
    tasks = work / "lm_eval_tasks"  # only the task: lm-eval indexes every YAML file under --include_path
    tasks.mkdir(exist_ok=True)
    (tasks / f"{LM_EVAL_TASK_NAME}.yaml").write_text(
        LM_EVAL_TASK % {"name": LM_EVAL_TASK_NAME, "rows": json.dumps(str(rows_path))}, encoding="utf-8")
    out = work / "lm_eval_out"

    def command(base: str) -> tuple[list[str], dict[str, str]]:
        env = peer_env(venv, work, HF_EVALUATE_OFFLINE="1", OPENAI_API_KEY="bench-dummy-key")
        model_args = (f"model=fake-model,base_url={base}/v1/chat/completions,num_concurrent={args.concurrency},"
                      "max_retries=3,tokenized_requests=False,tokenizer_backend=None")
        return [str(peers["command_path"]("lm-eval")), "run", "--model", "local-chat-completions",
                "--model_args", model_args, "--apply_chat_template", "--include_path", str(tasks),
                "--tasks", LM_EVAL_TASK_NAME, "--output_path", str(out)], env

    m, stats, fake_cpu = measure_client(args, work, "lm_eval run", command)
    rewards: list[float] = []
    found = sorted(out.rglob("results_*.json")) if out.is_dir() else []
    if found:
        results = json.loads(found[-1].read_text(encoding="utf-8"))
        score = results.get("results", {}).get(LM_EVAL_TASK_NAME, {}).get("exact_match,boxed")
        scored = int(results.get("n-samples", {}).get(LM_EVAL_TASK_NAME, {}).get("effective") or 0)
        if score is not None:
            correct = round(float(score) * scored)
            rewards = [1.0] * correct + [0.0] * (scored - correct)
    return summary("lm-eval", peers["version"]("lm-eval"), rows, args, rewards, m, stats, fake_cpu)


# ---- main ----------------------------------------------------------------------------------------
TOOLS = ("palaestra", "nemo-gym", "inspect-ai", "verifiers", "lm-eval")
PEER_TOOLS = ("inspect-ai", "verifiers", "lm-eval")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", type=int, default=None, help="rows (default 2000; 20 with --tiny)")
    p.add_argument("--concurrency", type=int, default=None, help="rollouts in flight (default 64; 4 with --tiny)")
    p.add_argument("--latency-ms", type=float, default=0.0, help="model latency per call")
    p.add_argument("--tiny", action="store_true", help="a smoke run: 20 rows, concurrency 4")
    p.add_argument("--tools", default=",".join(TOOLS),
                   help=f"comma-separated, run in this order: {', '.join(TOOLS)} (a tool that is not installed is "
                        "skipped with a note)")
    p.add_argument("--rounds", type=int, default=1,
                   help="run every tool this many times, interleaved, the order reversed every other round; the "
                        "table gives medians over rounds")
    p.add_argument("--table", type=Path, default=None,
                   help="also write the summary table (markdown; always printed on stderr) to this file")
    p.add_argument("--require-nemo-gym", action="store_true", help="fail instead of skipping NeMo Gym when absent")
    p.add_argument("--require-peers", action="store_true",
                   help="fail instead of skipping Inspect AI, verifiers or lm-eval when absent "
                        "(.ci/setup-peers.sh)")
    p.add_argument("--startup-timeout", type=float, default=900.0, help="seconds to wait for `gym env start`")
    p.add_argument("--workdir", type=Path, default=None, help="where rows, logs and runs go (default: a temp dir)")
    args = p.parse_args(argv)
    args.tasks = args.tasks or (20 if args.tiny else 2000)
    args.concurrency = args.concurrency or (4 if args.tiny else 64)
    args.tools = list(dict.fromkeys(t.strip() for t in args.tools.split(",") if t.strip()))
    unknown = set(args.tools) - set(TOOLS)
    if unknown:
        p.error(f"unknown tool(s) {sorted(unknown)}: choose from {', '.join(TOOLS)}")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    return args


def emit(line: dict[str, Any], stream: IO[str] = sys.stdout) -> None:
    stream.write(json.dumps(line) + "\n")
    stream.flush()


def missing_tool(tool: str) -> str | None:
    """Why ``tool`` cannot run here (the setup script that installs it is named), or None."""
    if tool == "nemo-gym":
        reason: str | None = nemo_gym_location()["missing"]()
        return reason
    if tool in PEER_TOOLS:
        reason = peers_location()["missing"](tool)
        return reason
    return None


def run_tool(tool: str, args: argparse.Namespace, rows_path: Path, work: Path) -> dict[str, Any]:
    if tool == "palaestra":
        return run_palaestra(args, rows_path, args.tasks, work)
    if tool == "nemo-gym":
        return run_nemo_gym(args, rows_path, args.tasks, work, nemo_gym_location()["venv_dir"]())
    if tool == "inspect-ai":
        return run_inspect(args, rows_path, args.tasks, work, peers_location())
    if tool == "lm-eval":
        return run_lm_eval(args, rows_path, args.tasks, work, peers_location())
    return run_verifiers(args, rows_path, args.tasks, work, peers_location())


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def table(results: list[dict[str, Any]], tools: list[str]) -> str:
    """One markdown row per tool: medians over its successful rounds (and how many rounds succeeded)."""
    def fmt(value: float | None, spec: str) -> str:
        return "–" if value is None else format(value, spec)

    lines = ["| tool | CPU ms per rollout | rollouts/s | rollouts/s collecting | peak RSS MB | start s "
             "| mean reward | rounds ok |",
             "|---|---|---|---|---|---|---|---|"]
    for tool in tools:
        runs = [r for r in results if r.get("framework") == tool]
        if not runs:
            continue
        ok = [r for r in runs if r.get("ok")]

        def med(key: str, rows: list[dict[str, Any]] = ok) -> float | None:
            return _median([float(r[key]) for r in rows if r.get(key) is not None])

        rss = _median([float(r.get("peak_rss_mb_client") or 0) + float(r.get("peak_rss_mb_servers") or 0) for r in ok])
        rewards = sorted({r["mean_reward"] for r in runs if r.get("mean_reward") is not None})
        reward = " / ".join(format(v, "g") for v in rewards) or "–"
        version = next((r["version"] for r in runs if r.get("version")), None)
        name = f"{tool} {version}" if version else tool
        lines.append(f"| {name} | {fmt(med('cpu_ms_per_rollout'), '.2f')} | {fmt(med('rollouts_per_s'), '.0f')} "
                     f"| {fmt(med('rollouts_per_s_collect'), '.0f')} | {fmt(rss, '.0f')} "
                     f"| {fmt(med('startup_s'), '.2f')} | {reward} | {len(ok)}/{len(runs)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # started as a background job: children would inherit SIGINT ignored, and gym's Ctrl-C shutdown never runs
        signal.signal(signal.SIGINT, signal.default_int_handler)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="palaestra-side-by-side-"))
    work.mkdir(parents=True, exist_ok=True)
    rows_path = make_rows(args.tasks, work / "rows.jsonl")
    log(f"{args.tasks} mcqa rows, concurrency {args.concurrency}, latency {args.latency_ms:g} ms, "
        f"{args.rounds} round(s); work dir {work}")
    failed = False
    tools = []
    for tool in args.tools:
        reason = missing_tool(tool)
        if reason is None:
            tools.append(tool)
            continue
        log(f"{tool} skipped: {reason}")
        if (tool == "nemo-gym" and args.require_nemo_gym) or (tool in PEER_TOOLS and args.require_peers):
            emit({"framework": tool, "ok": False, "error": reason, "workdir": str(work)})
            failed = True
    results: list[dict[str, Any]] = []
    for rnd in range(1, args.rounds + 1):
        order = tools if rnd % 2 else tools[::-1]  # interleaved: whoever went first goes last next round
        for tool in order:
            where = work / tool if args.rounds == 1 else work / f"round-{rnd}" / tool
            if args.rounds > 1:
                log(f"round {rnd}/{args.rounds}: {tool}")
            try:
                result = run_tool(tool, args, rows_path, where)
            except (RuntimeError, OSError, ValueError, subprocess.CalledProcessError) as exc:
                result = {"framework": tool, "ok": False, "error": str(exc)}
            result["round"] = rnd
            result["workdir"] = str(work)
            emit(result)
            results.append(result)
            failed = failed or not result.get("ok")
    if results:
        text = table(results, tools)
        print(f"\n{args.tasks} rows, concurrency {args.concurrency}, latency {args.latency_ms:g} ms, "
              f"medians over {args.rounds} round(s):\n{text}\n", file=sys.stderr, flush=True)
        if args.table is not None:
            args.table.write_text(text + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
