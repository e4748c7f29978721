"""Palaestra and NeMo Gym side by side: the same instant model, the same rows, the same JSON keys.

Both tools collect rollouts of the same NeMo Gym mcqa rows (built from Palaestra's bundled mcqa tasks,
in NeMo Gym's own row format, which Palaestra reads as it is) from the same model server
(``bench/side_by_side_model.py``: Palaestra's scripted oracle, which answers each row correctly and
instantly), over loopback. What is measured is what each tool itself costs per rollout when the model
costs nothing. One JSON line per tool on stdout, progress on stderr:

    python bench/side_by_side.py                  # 2000 rows, concurrency 64, both tools (NeMo Gym if installed)
    python bench/side_by_side.py --tiny           # 20 rows, concurrency 4: a smoke run
    python bench/side_by_side.py --tools palaestra --tasks 500 --latency-ms 200

NeMo Gym comes from ``bash .ci/setup-nemo-gym.sh`` (a venv of its own, located by
``tests/fixtures/nemo_gym.py``); without it only the Palaestra line is printed, and a note says why.
Its first start builds one venv per server with uv from PyPI (minutes; later starts reuse them).

Keys (the same for both tools):
  rollouts, mean_reward          what came back (every row is answerable: mean_reward 1.0 is expected)
  eval_wall_s, rollouts_per_s    the collecting command from launch to exit, and rollouts / that wall
  collect_s, rollouts_per_s_collect   first model request -> last model response, seen by the model server
  startup_s                      time before collection starts: servers launch -> ready (NeMo Gym's
                                 `gym env start`; 0 for Palaestra, which starts none) + eval launch -> first
                                 model request
  client_cpu_s                   CPU of the collecting command and everything it started (wait4 rusage, or
                                 the sum over its session from /proc, whichever is larger)
  servers_cpu_s                  CPU of the tool's long-lived servers (NeMo Gym's Ray + servers session)
                                 while the eval ran; 0 for Palaestra; their start-up CPU is servers_startup_cpu_s
  cpu_ms_per_rollout             (client_cpu_s + servers_cpu_s) / rollouts: the steadiest figure on a busy VM
  peak_rss_mb_client, peak_rss_mb_servers   largest client process; servers summed over their session
  servers_max_procs              most processes seen at once in the servers' session (0: none)
  procs_left_at_end              processes of the tool still alive after it exited / after its servers'
                                 own shutdown (each then stopped by pid)
  fake_cpu_s                     the model server's own CPU, reported and excluded from everything else
  error                          null, or why the run failed
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import runpy
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

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
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


def stop_session(leader: subprocess.Popen[bytes], sid: int, first: int = signal.SIGTERM, grace_s: float = 30.0) -> int:
    """Stop a session this script started: ``first`` to its leader, then TERM and KILL to any member left.

    Only processes whose session id is ``sid`` (a session created for the command) are signalled, by pid.
    Returns how many members were still alive after the leader's own shutdown."""
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
    left = probe.members()
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
        left = stop_session(proc, proc.pid)  # anything it left behind
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


# ---- Palaestra -----------------------------------------------------------------------------------
def run_palaestra(args: argparse.Namespace, rows_path: Path, rows: int, work: Path) -> dict[str, Any]:
    from palaestra import __version__

    cli = shutil.which("palaestra", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    if cli is None:
        raise RuntimeError("no `palaestra` command beside this Python or on PATH (pip install -e .)")
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OPENAI_API_KEY": "bench-dummy-key"}  # the model server ignores it
    with model_server(work, args.latency_ms) as (base, fake):
        fake0 = fake.snapshot()
        http("POST", base + "/stats/reset")
        m = run_measured([cli, "eval", "run", "--env", "mcqa", "--input", str(rows_path), "--model", base + "/v1",
                          "--model-name", "fake-model", "--concurrency", str(args.concurrency),
                          "--out", str(work / "run")], work, env, work / "eval.log")
        stats = model_stats(base)
        fake_cpu = SessionSampler.cpu_between(fake0, fake.snapshot())
    rewards = []
    journal = work / "run" / "rollouts.jsonl"
    if journal.is_file():
        for line in journal.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                verdict = record.get("verdict") or {}
                if record.get("outcome", {}).get("status") == "scored" and verdict.get("reward") is not None:
                    rewards.append(float(verdict["reward"]))
    if m.rc != 0:
        log("palaestra eval run failed: " + (work / "eval.log").read_text(errors="replace")[-2000:])
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


# ---- main ----------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", type=int, default=None, help="rows (default 2000; 20 with --tiny)")
    p.add_argument("--concurrency", type=int, default=None, help="rollouts in flight (default 64; 4 with --tiny)")
    p.add_argument("--latency-ms", type=float, default=0.0, help="model latency per call")
    p.add_argument("--tiny", action="store_true", help="a smoke run: 20 rows, concurrency 4")
    p.add_argument("--tools", default="palaestra,nemo-gym",
                   help="comma-separated: palaestra, nemo-gym (skipped with a note where it is not installed)")
    p.add_argument("--require-nemo-gym", action="store_true", help="fail instead of skipping NeMo Gym when absent")
    p.add_argument("--startup-timeout", type=float, default=900.0, help="seconds to wait for `gym env start`")
    p.add_argument("--workdir", type=Path, default=None, help="where rows, logs and runs go (default: a temp dir)")
    args = p.parse_args(argv)
    args.tasks = args.tasks or (20 if args.tiny else 2000)
    args.concurrency = args.concurrency or (4 if args.tiny else 64)
    args.tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    unknown = set(args.tools) - {"palaestra", "nemo-gym"}
    if unknown:
        p.error(f"unknown tool(s) {sorted(unknown)}: choose palaestra, nemo-gym")
    return args


def emit(line: dict[str, Any], stream: IO[str] = sys.stdout) -> None:
    stream.write(json.dumps(line) + "\n")
    stream.flush()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # started as a background job: children would inherit SIGINT ignored, and gym's Ctrl-C shutdown never runs
        signal.signal(signal.SIGINT, signal.default_int_handler)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="palaestra-side-by-side-"))
    work.mkdir(parents=True, exist_ok=True)
    rows_path = make_rows(args.tasks, work / "rows.jsonl")
    log(f"{args.tasks} mcqa rows, concurrency {args.concurrency}, latency {args.latency_ms:g} ms; work dir {work}")
    failed = False
    for tool in args.tools:
        try:
            if tool == "palaestra":
                result = run_palaestra(args, rows_path, args.tasks, work / "palaestra")
            else:
                location = nemo_gym_location()
                reason = location["missing"]()
                if reason is not None:
                    log(f"NeMo Gym skipped: {reason}")
                    if args.require_nemo_gym:
                        emit({"framework": "nemo-gym", "ok": False, "error": reason})
                        failed = True
                    continue
                result = run_nemo_gym(args, rows_path, args.tasks, work / "nemo-gym", location["venv_dir"]())
        except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
            result = {"framework": tool, "ok": False, "error": str(exc)}
        result["workdir"] = str(work)
        emit(result)
        failed = failed or not result.get("ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
