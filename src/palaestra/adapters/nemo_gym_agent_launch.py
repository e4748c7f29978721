"""NeMo Gym's own agent server and its resources server, wired as ``gym env start`` wires them.

NeMo Gym runs every server as its own process (``python app.py`` in the server's folder) and tells it
the whole configuration through two environment variables: ``NEMO_GYM_CONFIG_DICT`` (the global config
dict as YAML: every server instance with its ``host`` and ``port``) and ``NEMO_GYM_CONFIG_PATH`` (which
instance this process is). A server reaches another one by instance name (``ServerClient.post(
server_name=...)``), looked up in that dict: an agent's ``model_server`` and ``resources_server`` refs
are such names. So the wiring is the dict, and this module builds it the way NeMo Gym does, with NeMo
Gym's own parser (``GlobalConfigDictParser``: the server's config file, its ``config_paths`` includes,
interpolations, ports), run by the NeMo venv's Python (``CONFIG_SCRIPT``). Then:

- every ``responses_api_models`` instance is pointed at a Palaestra model endpoint instead of being
  started: the agent's own ``model_server`` at the run's rollout endpoint (so every call it makes is
  the rollout's, recorded in its trajectory), any other (a judge the resources server calls) at the
  judge endpoint;
- the agent instance and the resources-server instance it names are started, each as NeMo Gym starts
  it: its ``app.py`` from its folder, under the NeMo venv's interpreter, with the two variables set;
- ``observability_enabled`` is on, so the agent prefixes its model calls with ``/ng-rollout/<id>`` (the
  run body's ``_ng_rollout_id``): the endpoint routes each call to its rollout by that prefix.

The venv: NeMo Gym builds one per server from the server's ``requirements.txt``; the agents here
(``simple_agent``, ``scicode_agent``) require only ``nemo-gym`` itself, which is the NeMo venv
``.ci/setup-nemo-gym.sh`` builds, so both processes run on it. An agent whose requirements name more
than the venv holds fails at start with its import error. A child exits when its stdin closes, so a
parent killed with SIGKILL leaves none behind.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from palaestra.adapters.nemo_gym_launch import MODEL_REFS, config_path, site_packages, venv_dir
from palaestra.core.errors import EnvironmentFailure
from palaestra.settings import child_environ

# Run by the NeMo venv's Python: argv[1] a JSON spec; prints one JSON line with the wiring.
CONFIG_SCRIPT = r"""
import json, sys
from omegaconf import OmegaConf, DictConfig
from nemo_gym.global_config import GlobalConfigDictParser, GlobalConfigDictParserConfig

spec = json.loads(sys.argv[1])
policy, judge = spec["policy_url"], spec.get("judge_url") or spec["policy_url"]
def hostport(url):
    rest = url.split("://", 1)[1].split("/", 1)[0]
    host, port = rest.rsplit(":", 1)
    return host, int(port)
p_host, p_port = hostport(policy)
j_host, j_port = hostport(judge)

""" + MODEL_REFS + r"""
def palaestra_model(host, port):
    return {"responses_api_models": {"palaestra_model": {"entrypoint": "app.py", "host": host, "port": port}}}

raw = {}
paths = [*spec.get("agent_configs", []), spec["config_path"], *spec.get("extra_configs", [])]
for path in paths:
    raw.update(OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {})
initial = {
    "config_paths": paths,
    "policy_base_url": policy + "/v1", "policy_api_key": "none", "policy_model_name": "palaestra",
    **{ref: palaestra_model(j_host, j_port) for ref in model_refs(raw) if ref not in raw},
    "policy_model": palaestra_model(p_host, p_port),
}
parsed = GlobalConfigDictParser().parse(GlobalConfigDictParserConfig(
    initial_global_config_dict=OmegaConf.create(initial), skip_load_from_cli=True, skip_load_from_dotenv=True))
gcd = OmegaConf.to_container(parsed, resolve=False)

def instance(name):
    value = gcd.get(name)
    if not isinstance(value, dict) or len(value) != 1:
        return None
    (kind, inner), = value.items()
    if not isinstance(inner, dict) or len(inner) != 1:
        return None
    (type_name, body), = inner.items()
    return kind, type_name, body

agents = {n: instance(n) for n in gcd if (instance(n) or ("",))[0] == "responses_api_agents"}
wanted = spec.get("agent")
if wanted not in agents:
    by_type = [n for n, (_, t, _b) in agents.items() if t == spec.get("agent_type")]
    wanted = by_type[0] if by_type else (next(iter(agents)) if agents else None)
if wanted is None:
    raise SystemExit("the config defines no responses_api_agents instance")
_, agent_type, agent_body = agents[wanted]
model_name = (agent_body.get("model_server") or {}).get("name")
resources_name = (agent_body.get("resources_server") or {}).get("name")
for name in list(gcd):
    found = instance(name)
    if found is not None and found[0] == "responses_api_models":  # never started: Palaestra answers
        host, port = (p_host, p_port) if name == model_name else (j_host, j_port)
        gcd[name] = palaestra_model(host, port)
gcd["observability_enabled"] = True
resources = instance(resources_name) if resources_name else None
out = {"agent": wanted, "agent_type": agent_type, "agent_port": agent_body.get("port"),
       "agent_entrypoint": agent_body.get("entrypoint") or "app.py",
       "resources_entrypoint": (resources[2].get("entrypoint") if resources else None) or "app.py",
       "resources": resources_name, "resources_type": resources[1] if resources else None,
       "resources_port": resources[2].get("port") if resources else None,
       "config": OmegaConf.to_yaml(OmegaConf.create(gcd))}
print("WIRING " + json.dumps(out), flush=True)
"""

# Run by the NeMo venv's Python in a server's folder: ``python app.py`` as gym runs it, which also exits
# when its stdin closes (the parent went away).
SERVE_SCRIPT = r"""
import os, runpy, sys, threading
def watch():
    sys.stdin.read()
    os._exit(0)
threading.Thread(target=watch, daemon=True).start()
entry = sys.argv[1]  # the config's entrypoint, relative to the server's folder (``../../x/bridge.py``)
sys.path.insert(0, os.path.dirname(os.path.abspath(entry)))
sys.argv = [entry]
runpy.run_path(entry, run_name="__main__")
"""


@dataclass
class Wiring:
    """What ``CONFIG_SCRIPT`` answered: the instances to start and the global config dict they share."""

    agent: str
    agent_type: str
    agent_port: int
    resources: str | None
    resources_type: str | None
    resources_port: int | None
    config: str
    agent_entrypoint: str = "app.py"
    resources_entrypoint: str = "app.py"


def wiring(
    config_path: Path,
    venv: Path | None,
    *,
    policy_url: str,
    judge_url: str | None,
    agent: str | None,
    agent_type: str | None,
    extra_configs: tuple[str, ...] = (),
) -> Wiring:
    """NeMo Gym's global config dict for the agent of ``config_path``, its model servers pointed at
    Palaestra (``policy_url`` for the agent's own, ``judge_url`` for any other). ``extra_configs`` are
    merged after it, as ``gym``'s further ``--config`` files are (a server setting such as SciCode's
    ``test_data_fpath``)."""
    spec = {
        "config_path": str(config_path),
        "policy_url": policy_url,
        "judge_url": judge_url,
        "agent": agent,
        "agent_type": agent_type,
        "extra_configs": [str(Path(c).resolve()) for c in extra_configs],
    }
    if agent_type and not _defines_agents(config_path):  # the server names its agent only (allowed_agents):
        # compose as NeMo Gym does: its benchmark config for the server, else the agent's own config first
        bench = site_packages(venv) / "benchmarks" / config_path.parent.parent.name / "config.yaml"
        own = site_packages(venv) / "responses_api_agents" / agent_type / "configs" / f"{agent_type}.yaml"
        if bench.is_file() and _defines_agents(bench, through_includes=True):
            spec["config_path"] = str(bench)
        elif own.is_file():
            spec["agent_configs"] = [str(own)]
    python = venv_dir(venv) / "bin" / "python"
    try:
        done = subprocess.run(
            [str(python), "-c", CONFIG_SCRIPT, json.dumps(spec)],
            cwd=site_packages(venv),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentFailure(f"NeMo Gym's config parser did not run: {exc!r}") from exc
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("WIRING ")), None)
    if done.returncode != 0 or line is None:
        said = (done.stderr or done.stdout).strip()[-1500:]
        raise EnvironmentFailure(f"NeMo Gym's config parser could not read {config_path.name}: {said}")
    raw = json.loads(line.removeprefix("WIRING "))
    return Wiring(
        agent=raw["agent"],
        agent_type=raw["agent_type"],
        agent_port=int(raw["agent_port"]),
        resources=raw["resources"],
        resources_type=raw["resources_type"],
        resources_port=int(raw["resources_port"]) if raw["resources_port"] else None,
        config=raw["config"],
        agent_entrypoint=str(raw["agent_entrypoint"]),
        resources_entrypoint=str(raw["resources_entrypoint"]),
    )


def _defines_agents(path: Path, through_includes: bool = False) -> bool:
    """Whether a config file defines an agent instance (or, ``through_includes``, names any config file)."""
    import yaml

    try:
        blocks = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return False
    if through_includes and isinstance(blocks, dict) and blocks.get("config_paths"):
        return True
    return any(
        isinstance(b, dict) and "responses_api_agents" in b
        for b in (blocks.values() if isinstance(blocks, dict) else [])
    )


def log_cause(log: str) -> str:
    """The exception line of its log (a traceback's last ``...Error: ...`` line), else its last line."""
    # NeMo Gym prefixes each line of a server's log with ``(instance) ``
    lines = [re.sub(r"^\([\w.-]+\) ", "", ln.strip()) for ln in log.splitlines() if ln.strip()]
    errors = [i for i, ln in enumerate(lines) if re.match(r"^[\w.]*(Error|Exception|Exit)\b.*", ln)]
    if not errors:
        return (lines or ["(no output)"])[-1][:400]
    found = lines[errors[-1]]
    if "validation error" in found:  # pydantic: the field and why follow
        found += " " + " ".join(ln for ln in lines[errors[-1] + 1 : errors[-1] + 3] if not ln.startswith("For "))
    return found[:400]


class NemoProcess:
    """One NeMo Gym server process, started as ``gym`` starts it, alive until ``close``."""

    def __init__(
        self, folder: Path, instance: str, port: int, wiring: Wiring, venv: Path | None, entrypoint: str = "app.py"
    ) -> None:
        self.folder, self.instance, self.port = folder, instance, port
        self.url = f"http://127.0.0.1:{port}"
        env = child_environ({
            "NEMO_GYM_CONFIG_DICT": wiring.config,
            "NEMO_GYM_CONFIG_PATH": instance,
            "PATH": str(venv_dir(venv) / "bin") + os.pathsep + os.environ.get("PATH", ""),
        })
        self._log = tempfile.TemporaryFile(mode="w+")
        self._proc = subprocess.Popen(
            [str(venv_dir(venv) / "bin" / "python"), "-c", SERVE_SCRIPT, entrypoint],
            cwd=folder,
            stdin=subprocess.PIPE,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            text=True,
        )

    def alive(self) -> bool:
        return self._proc.poll() is None

    def wait_ready(self, timeout_s: float) -> None:
        """Until the server answers its liveness route; an EnvironmentFailure with its log if it dies."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise EnvironmentFailure(
                    f"NeMo Gym server '{self.instance}' exited with status {self._proc.returncode} at start: "
                    f"{self.cause()}; its log ends: {self.log_tail()}"
                )
            try:
                if httpx.get(self.url + "/health", timeout=2.0, trust_env=False).status_code < 500:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise EnvironmentFailure(
            f"NeMo Gym server '{self.instance}' did not answer within {timeout_s:g} s: {self.log_tail()}"
        )

    def cause(self) -> str:
        return log_cause(self.log_tail(6000))

    def log_tail(self, chars: int = 1500) -> str:
        try:
            self._log.flush()
            size = self._log.seek(0, 2)
            self._log.seek(max(0, size - chars * 4))
            return self._log.read().strip()[-chars:]
        except (OSError, ValueError):
            return ""

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        try:
            self._proc.wait(timeout=30)
        finally:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            self._log.close()


class AgentStack:
    """NeMo Gym's agent server and the resources server it names, for one config: started together,
    closed together. ``agent_url`` is where ``POST /run`` goes."""

    def __init__(self, wiring: Wiring, venv: Path | None, start_timeout_s: float = 240.0) -> None:
        self.wiring = wiring
        root = site_packages(venv)
        self.processes: list[NemoProcess] = []
        try:
            if wiring.resources and wiring.resources_type and wiring.resources_port:
                self.processes.append(
                    NemoProcess(
                        root / "resources_servers" / wiring.resources_type,
                        wiring.resources,
                        wiring.resources_port,
                        wiring,
                        venv,
                        wiring.resources_entrypoint,
                    )
                )
            folder = root / "responses_api_agents" / wiring.agent_type
            agent = NemoProcess(folder, wiring.agent, wiring.agent_port, wiring, venv, wiring.agent_entrypoint)
            self.processes.append(agent)
            for proc in self.processes:
                proc.wait_ready(start_timeout_s)
        except BaseException:
            self.close()
            raise
        self.agent_url = agent.url

    def alive(self) -> bool:
        return all(p.alive() for p in self.processes)

    def log_tail(self) -> str:
        return " | ".join(f"{p.instance}: {tail}" for p in self.processes if (tail := p.log_tail(700)))

    def close(self) -> None:
        for proc in self.processes:
            try:
                proc.close()
            except Exception:  # best effort: the child also exits when its stdin closes
                continue
        self.processes = []


def environment_server(server: str, venv: Path | None) -> str | None:
    """The NeMo Gym Environment Server type the server's config runs its rows with (``nemo_user_sim``), or
    None where it defines none beyond ``legacy_agent`` (the wrapper of an agent's ``/run``)."""
    import yaml

    path = config_path(server, venv)
    try:
        blocks = yaml.safe_load(path.read_text(encoding="utf-8")) if path is not None else None
    except (OSError, yaml.YAMLError):
        return None
    for block in blocks.values() if isinstance(blocks, dict) else []:
        kinds = block.get("environment_servers") if isinstance(block, dict) else None
        for kind in kinds if isinstance(kinds, dict) else {}:
            if kind != "legacy_agent":
                return str(kind)
    return None


def describe(wiring: Wiring) -> dict[str, Any]:
    """The wiring as a rollout's metadata names it (no ports: they change with every start)."""
    return {"agent": wiring.agent, "agent_type": wiring.agent_type, "resources_server": wiring.resources}
