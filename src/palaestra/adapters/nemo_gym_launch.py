"""Start one NeMo Gym resources server alone, in NeMo Gym's own venv, on 127.0.0.1.

NeMo Gym's ``gym env start`` builds a venv per server with uv and a head server for configuration; a
single resources server needs neither. The launcher below (run by the NeMo venv's Python, so NeMo Gym
and the server's dependencies are its own) imports the server's entry point (``app.py``, or the module
its config names) with its folder on ``sys.path`` and as the working directory (as ``gym`` runs it:
sibling modules and relative paths), builds the server class with its config (the
``resources_servers.<name>`` block of ``configs/<name>.yaml``, else of the first variant that defines
it: ``config_path``), host 127.0.0.1, interpolations of model-server settings resolved), binds a socket
on a free port, prints the port, and serves NeMo Gym's FastAPI app with uvicorn on that socket. The child
exits when its stdin closes, so a parent killed with SIGKILL leaves no server behind.

Model servers: NeMo Gym's ``ServerClient`` resolves a server name through its global config dict
(``{name: {<kind>: {<type>: {host, port}}}}``, first entry of each level). The launcher builds that dict
with every ``responses_api_models`` name the server's config references (and ``policy_model``) pointing
at the one model URL it is given, and hands it over the way NeMo Gym hands it to a child server
(``NEMO_GYM_CONFIG_DICT``), so library code that consults it finds it.

The default venv is where ``.ci/setup-nemo-gym.sh`` installs NeMo Gym.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from palaestra.core.errors import ConfigError, EnvironmentFailure

DEFAULT_VENV = Path.home() / ".cache" / "palaestra-bench" / "nemo-gym"

# Every responses_api_models name a NeMo Gym config references (run in the NeMo venv by both launch scripts).
MODEL_REFS = '''
def model_refs(value):
    if isinstance(value, dict):
        if value.get("type") == "responses_api_models" and isinstance(value.get("name"), str):
            yield value["name"]
        for v in value.values():
            yield from model_refs(v)
    elif isinstance(value, list):
        for v in value:
            yield from model_refs(v)
'''

LAUNCHER = r'''
import importlib, inspect, os, socket, sys, threading
from urllib.parse import urlsplit
import uvicorn, yaml
from omegaconf import OmegaConf
from nemo_gym.base_resources_server import SimpleResourcesServer
from nemo_gym.config_types import BaseServerConfig
from nemo_gym.server_utils import ServerClient

name, model_url = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
path = sys.argv[3] if len(sys.argv) > 3 else ""  # the config file that defines the server (may be none)
def watch():
    sys.stdin.read()
    os._exit(0)
threading.Thread(target=watch, daemon=True).start()
here = os.path.join(os.getcwd(), "resources_servers", name)
# As in an activated venv (how `gym` runs a server): the venv's own commands (uv, ...) come first on PATH.
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
# Playwright's browser (interactive_browser): .ci/setup-nemo-gym.sh links Debian's chromium in there under
# the names Playwright looks for, since `playwright install` cannot download its own build here.
browsers = os.path.join(sys.prefix, "palaestra-playwright-browsers")
if os.path.isdir(browsers):
    os.environ["PLAYWRIGHT_BROWSERS_PATH"] = os.environ.get("PLAYWRIGHT_BROWSERS_PATH") or browsers
options = {}
if path and os.path.isfile(path):
    with open(path) as fh:
        for block in (yaml.safe_load(fh) or {}).values():
            if not isinstance(block, dict) or not isinstance(block.get("resources_servers"), dict):
                continue  # a top-level list or value (shared settings), not a server instance
            entry = block["resources_servers"].get(name)
            if isinstance(entry, dict):
                options = {k: v for k, v in entry.items() if k not in ("datasets",)}
                break
entry_module = os.path.basename(str(options.get("entrypoint") or "app.py")).removesuffix(".py")
sys.path.insert(0, here)  # NeMo Gym runs app.py from its folder: sibling modules import by bare name
module = importlib.import_module(f"resources_servers.{name}.{entry_module}")
os.chdir(here)  # and relative paths in its config (prompt templates, data) are relative to that folder
found = [c for c in vars(module).values() if inspect.isclass(c) and issubclass(c, SimpleResourcesServer)
         and c.__module__ == module.__name__]
if len(found) != 1:
    raise SystemExit(f"resources_servers.{name}.app defines {len(found)} resources servers")
cls = found[0]
model = urlsplit(model_url) if model_url else None
model_vars = {}
if model is not None:  # what NeMo Gym's configs interpolate for their model servers (${judge_base_url}, ...)
    for prefix in ("policy", "judge", "search_judge_model", "support_model", "user"):
        stem = prefix if prefix.endswith("_model") else f"{prefix}_model"
        model_vars.update({f"{stem}_name": "palaestra", f"{prefix}_base_url": f"{model_url}/v1",
                           f"{prefix}_api_key": "none"})
def resolved(key, value):  # a value that interpolates what nobody provides (an API key) stays as written
    try:
        return OmegaConf.to_container(OmegaConf.create({**model_vars, "v": value}), resolve=True)["v"]
    except Exception:
        return value
options = {k: resolved(k, v) for k, v in options.items()}
''' + MODEL_REFS + r'''refs = sorted({"policy_model", *model_refs(options)})
global_config = {}
if model is not None:  # every model server the config names is the one Palaestra model server
    for ref in refs:
        global_config[ref] = {"responses_api_models": {"palaestra_model": {
            "host": model.hostname, "port": model.port, "entrypoint": "app.py", "name": ref}}}
config_cls = cls.model_fields["config"].annotation
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", 0))
# Listening before the port is printed: a request sent between the print and uvicorn's start-up (slow on a
# busy machine) waits in the backlog instead of being refused (a bound socket that does not listen refuses).
sock.listen(2048)
port = sock.getsockname()[1]
config = config_cls(**{**options, "host": "127.0.0.1", "port": port, "name": name,
                       "entrypoint": options.get("entrypoint", "app.py")})
global_config[name] = {"resources_servers": {name: {**options, "host": "127.0.0.1", "port": port}}}
# How NeMo Gym hands a child server its global config: library code that consults it (the HTTP client
# settings of a judge call, ...) reads it from there instead of parsing a command line.
os.environ["NEMO_GYM_CONFIG_DICT"] = OmegaConf.to_yaml(OmegaConf.create(global_config))
client = ServerClient(head_server_config=BaseServerConfig(host="127.0.0.1", port=port),
                      global_config_dict=OmegaConf.create(global_config))
app = cls(config=config, server_client=client).setup_webserver()
print(f"PORT {port}", flush=True)
uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
'''


def venv_dir(venv: Path | None) -> Path:
    return venv if venv is not None else DEFAULT_VENV


def site_packages(venv: Path | None) -> Path:
    """The NeMo venv's site-packages (where ``nemo_gym`` and ``resources_servers`` are installed)."""
    found = sorted(venv_dir(venv).glob("lib/python3*/site-packages/nemo_gym"))
    if not found:
        raise ConfigError(f"NeMo Gym is not installed in {venv_dir(venv)}",
                          hint="run `bash .ci/setup-nemo-gym.sh`")
    return found[-1].parent


def server_dir(name: str, venv: Path | None) -> Path:
    return site_packages(venv) / "resources_servers" / name


def _server_block(path: Path, name: str) -> dict[str, Any] | None:
    """The ``resources_servers: {name: {...}}`` block of one NeMo Gym config file, or None."""
    import yaml  # NeMo Gym's configs are YAML; only a NeMo Gym run reads them

    try:
        blocks = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return None
    for block in blocks.values() if isinstance(blocks, dict) else []:
        servers = block.get("resources_servers") if isinstance(block, dict) else None
        entry = servers.get(name) if isinstance(servers, dict) else None
        if isinstance(entry, dict):
            return entry
    return None


def _defines(path: Path, agent: str) -> bool:
    import yaml

    try:
        blocks = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(blocks, dict) and agent in blocks


def config_path(name: str, venv: Path | None, agent: str | None = None) -> Path | None:
    """The config file the server is built from: the one that defines ``agent`` (the agent the rows'
    ``agent_ref`` names: ``openenv_echo_simple_agent`` → ``openenv_echo.yaml``), else
    ``configs/<name>.yaml``, else the first of its ``configs/*.yaml`` (by name), always one that defines
    the server. Several servers ship only variants (``arena``: ``lmarena_v2.yaml``, ``jailbreak_detection``:
    one per judge setup); without one the server would start with none of the values its YAML gives (its
    judge, its prompt template)."""
    folder = server_dir(name, venv) / "configs"
    own = folder / f"{name}.yaml"
    candidates = [own] + sorted(p for p in folder.glob("*.yaml") if p != own)
    found = [p for p in candidates if p.is_file() and _server_block(p, name) is not None]
    if agent:
        found.sort(key=lambda p: not _defines(p, agent))  # stable: the agent's file first, the order else
    return found[0] if found else None


# A model-server setting a config interpolates (``vllm_base_url: ${policy_base_url}``) also names a model server.
_MODEL_VAR = re.compile(r"\$\{\w*(?:_base_url|_model_name)\}")


def names_model_server(name: str, venv: Path | None, agent: str | None = None) -> bool:
    """Whether the server's config names a model server (a judge or policy its verify calls), by reference
    (``responses_api_models``) or by interpolating a model server's URL or model name."""
    import yaml

    path = config_path(name, venv, agent)
    entry = _server_block(path, name) if path is not None else None
    if entry is None:
        return False
    text = yaml.safe_dump(entry)
    return "responses_api_models" in text or _MODEL_VAR.search(text) is not None


def cohort_size(name: str, venv: Path | None, agent: str | None = None) -> int:
    """How many rollouts of one row the server grades together (its config's ``num_rollouts_per_prompt``;
    1 for every server that grades a rollout alone). A cohort server (``genrm_compare``: 16, compared
    pairwise by its GenRM judge) holds each ``/verify`` until that many rollouts of the row, told apart by
    ``_ng_rollout_index``, have arrived: a run needs that many repeats of the row, all in flight at once."""
    path = config_path(name, venv, agent)
    entry = _server_block(path, name) if path is not None else None
    size = (entry or {}).get("num_rollouts_per_prompt")
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 1 else 1


def prompt_agent(name: str, venv: Path | None, agent: str | None = None) -> str | None:
    """The type of the NeMo Gym agent that runs the server's rows (``aviary_agent``, ``scicode_agent``): the
    one ``agent`` names in the server's config, else the first its config defines, else the first of its
    ``allowed_agents``. Rows whose input is empty are built into a prompt by that agent, not by the row."""
    import yaml

    path = config_path(name, venv, agent)
    if path is None:
        return None
    try:
        blocks = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return None
    kinds = {key: next(iter(block["responses_api_agents"]), None) for key, block in blocks.items()
             if isinstance(block, dict) and isinstance(block.get("responses_api_agents"), dict)}
    if agent in kinds:
        return kinds[agent]
    if kinds:
        return next(iter(kinds.values()))
    allowed = (_server_block(path, name) or {}).get("allowed_agents")
    return str(allowed[0]) if isinstance(allowed, list) and allowed else None


class NemoServerProcess:
    """The supervised child that serves one resources server: started on first use, started again when
    it has died, stopped when this object is closed or this process exits (its stdin closes)."""

    def __init__(self, server: str, venv: Path | None, start_timeout_s: float = 180.0,
                 model_url: str | None = None) -> None:
        self.server = server
        self.venv = venv
        self.model_url = model_url  # the Palaestra model server every model server of its config resolves to
        self.agent: str | None = None  # the agent the rows name: picks the config variant (``config_path``)
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[str] | None = None
        self._url: str | None = None
        self._lock: asyncio.Lock | None = None
        self._log: Any = None  # the server's stderr, kept so a failed request can say what the server logged
        self._start_error: str | None = None  # why it did not start: a server that died later restarts

    async def url(self) -> str:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._start_error is not None:  # it could not start: the same import will fail again
                raise EnvironmentFailure(self._start_error)
            if self._proc is None or self._proc.poll() is not None or self._url is None:
                try:
                    self._url = await asyncio.to_thread(self._start)
                except EnvironmentFailure as exc:
                    self._start_error = exc.message
                    raise
            return self._url

    def _start(self) -> str:
        self.close()
        python = venv_dir(self.venv) / "bin" / "python"
        cwd = site_packages(self.venv)
        config = config_path(self.server, self.venv, self.agent)
        log = tempfile.TemporaryFile(mode="w+")  # the server's stderr: read back when it fails
        self._log = log
        proc = subprocess.Popen(  # our launcher, in the NeMo venv's interpreter
            [str(python), "-c", LAUNCHER, self.server, self.model_url or "", str(config or "")], cwd=cwd,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
        self._proc = proc
        assert proc.stdout is not None
        printed: list[str] = []  # what the server's own import printed before the port (banners, notices)
        line = proc.stdout.readline()  # the launcher prints its port once the socket is bound
        while line and not line.startswith("PORT "):
            printed.append(line.rstrip("\n"))
            line = proc.stdout.readline()
        if not line.startswith("PORT "):
            proc.kill()
            status = proc.wait(timeout=30)
            log.seek(0)
            said = "\n".join([*printed[-20:], log.read().strip()]).strip()[-1500:]
            raise EnvironmentFailure(f"NeMo Gym server '{self.server}' did not start (exit status {status}): {said}")
        return f"http://127.0.0.1:{int(line.split()[1])}"

    def log_tail(self, chars: int = 1500) -> str:
        """The end of what the server wrote to stderr (its traceback, when a request failed)."""
        log = self._log
        if log is None or log.closed:
            return ""
        try:
            log.flush()
            size = log.seek(0, 2)
            log.seek(max(0, size - chars * 4))
            return log.read().strip()[-chars:]
        except (OSError, ValueError):
            return ""

    def close(self) -> None:
        log, self._log = self._log, None
        if log is not None:
            log.close()
        proc, self._proc, self._url = self._proc, None, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # best effort at interpreter exit
            return

