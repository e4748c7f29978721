"""Start one NeMo Gym resources server alone, in NeMo Gym's own venv, on 127.0.0.1.

NeMo Gym's ``gym env start`` builds a venv per server with uv and a head server for configuration; a
single resources server needs neither. The launcher below (run by the NeMo venv's Python, so NeMo Gym
and the server's dependencies are its own) imports the server's ``app.py`` with its folder on
``sys.path`` and as the working directory (as ``gym`` runs it: sibling modules and relative paths),
builds the server class with its config (the ``resources_servers.<name>`` block of its YAML, host
127.0.0.1, interpolations of model-server settings resolved), binds a socket on a free port, prints the
port, and serves NeMo Gym's FastAPI app with uvicorn on that socket. The child exits when its stdin
closes, so a parent killed with SIGKILL leaves no server behind.

Model servers: NeMo Gym's ``ServerClient`` resolves a server name through its global config dict
(``{name: {<kind>: {<type>: {host, port}}}}``, first entry of each level). The launcher builds that dict
with every ``responses_api_models`` name the server's config references (and ``policy_model``) pointing
at the one model URL it is given, and hands it over the way NeMo Gym hands it to a child server
(``NEMO_GYM_CONFIG_DICT``), so library code that consults it finds it.

The default venv is where ``.ci/setup-nemo-gym.sh`` installs NeMo Gym.
"""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from palaestra.core.errors import ConfigError, EnvironmentFailure

DEFAULT_VENV = Path.home() / ".cache" / "palaestra-bench" / "nemo-gym"

LAUNCHER = r'''
import importlib, inspect, os, socket, sys, threading
from urllib.parse import urlsplit
import uvicorn, yaml
from omegaconf import OmegaConf
from nemo_gym.base_resources_server import SimpleResourcesServer
from nemo_gym.config_types import BaseServerConfig
from nemo_gym.server_utils import ServerClient

name, model_url = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
def watch():
    sys.stdin.read()
    os._exit(0)
threading.Thread(target=watch, daemon=True).start()
here = os.path.join(os.getcwd(), "resources_servers", name)
sys.path.insert(0, here)  # NeMo Gym runs app.py from its folder: sibling modules import by bare name
module = importlib.import_module(f"resources_servers.{name}.app")
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
options = {}
path = os.path.join(here, "configs", f"{name}.yaml")
if os.path.isfile(path):
    with open(path) as fh:
        for block in (yaml.safe_load(fh) or {}).values():
            if not isinstance(block, dict) or not isinstance(block.get("resources_servers"), dict):
                continue  # a top-level list or value (shared settings), not a server instance
            entry = block["resources_servers"].get(name)
            if isinstance(entry, dict):
                options = {k: v for k, v in entry.items() if k not in ("datasets",)}
                break
def resolved(key, value):  # a value that interpolates what nobody provides (an API key) stays as written
    try:
        return OmegaConf.to_container(OmegaConf.create({**model_vars, "v": value}), resolve=True)["v"]
    except Exception:
        return value
options = {k: resolved(k, v) for k, v in options.items()}
def model_refs(value):
    if isinstance(value, dict):
        if value.get("type") == "responses_api_models" and isinstance(value.get("name"), str):
            yield value["name"]
        for v in value.values():
            yield from model_refs(v)
    elif isinstance(value, list):
        for v in value:
            yield from model_refs(v)
refs = sorted({"policy_model", *model_refs(options)})
global_config = {}
if model is not None:  # every model server the config names is the one Palaestra model server
    for ref in refs:
        global_config[ref] = {"responses_api_models": {"palaestra_model": {
            "host": model.hostname, "port": model.port, "entrypoint": "app.py", "name": ref}}}
config_cls = cls.model_fields["config"].annotation
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", 0))
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


def names_model_server(name: str, venv: Path | None) -> bool:
    """Whether the server's YAML config names a model server (a judge or policy its verify calls)."""
    import yaml  # NeMo Gym's configs are YAML; only a NeMo Gym run reads them

    config = server_dir(name, venv) / "configs" / f"{name}.yaml"
    if not config.is_file():
        return False
    try:
        blocks = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError:
        return False
    for block in blocks.values() if isinstance(blocks, dict) else []:
        entry = (block or {}).get("resources_servers", {}).get(name) if isinstance(block, dict) else None
        if isinstance(entry, dict):  # the server's own block: what the launcher builds it with
            return "responses_api_models" in yaml.safe_dump(entry)
    return False


class NemoServerProcess:
    """The supervised child that serves one resources server: started on first use, started again when
    it has died, stopped when this object is closed or this process exits (its stdin closes)."""

    def __init__(self, server: str, venv: Path | None, start_timeout_s: float = 180.0,
                 model_url: str | None = None) -> None:
        self.server = server
        self.venv = venv
        self.model_url = model_url  # the Palaestra model server every model server of its config resolves to
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
        log = tempfile.TemporaryFile(mode="w+")  # the server's stderr: read back when it fails
        self._log = log
        proc = subprocess.Popen(  # our launcher, in the NeMo venv's interpreter
            [str(python), "-c", LAUNCHER, self.server, self.model_url or ""], cwd=cwd, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=log, text=True)
        self._proc = proc
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the launcher prints its port once the socket is bound
        if not line.startswith("PORT "):
            proc.kill()
            proc.wait(timeout=30)
            log.seek(0)
            raise EnvironmentFailure(f"NeMo Gym server '{self.server}' did not start: {log.read().strip()[-1500:]}")
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

