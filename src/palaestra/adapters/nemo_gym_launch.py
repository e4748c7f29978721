"""Start one NeMo Gym resources server alone, in NeMo Gym's own venv, on 127.0.0.1.

NeMo Gym's ``gym env start`` builds a venv per server with uv and a head server for configuration; a
single resources server needs neither. The launcher below (run by the NeMo venv's Python, so NeMo Gym
and the server's dependencies are its own) imports the server's ``app.py``, builds the server class with
its config (the ``resources_servers.<name>`` block of its YAML, host 127.0.0.1), binds a socket on a free
port, prints the port, and serves NeMo Gym's FastAPI app with uvicorn on that socket. The child exits
when its stdin closes, so a parent killed with SIGKILL leaves no server behind.

The default venv is where ``.ci/setup-nemo-gym.sh`` installs NeMo Gym.
"""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
from pathlib import Path

from palaestra.core.errors import ConfigError, EnvironmentFailure

DEFAULT_VENV = Path.home() / ".cache" / "palaestra-bench" / "nemo-gym"

LAUNCHER = r'''
import importlib, inspect, os, socket, sys, threading
import uvicorn, yaml
from omegaconf import OmegaConf
from nemo_gym.base_resources_server import SimpleResourcesServer
from nemo_gym.config_types import BaseServerConfig
from nemo_gym.server_utils import ServerClient

name = sys.argv[1]
def watch():
    sys.stdin.read()
    os._exit(0)
threading.Thread(target=watch, daemon=True).start()
module = importlib.import_module(f"resources_servers.{name}.app")
found = [c for c in vars(module).values() if inspect.isclass(c) and issubclass(c, SimpleResourcesServer)
         and c.__module__ == module.__name__]
if len(found) != 1:
    raise SystemExit(f"resources_servers.{name}.app defines {len(found)} resources servers")
cls = found[0]
options = {}
configs = os.path.join(os.path.dirname(module.__file__), "configs")
for fname in sorted(os.listdir(configs)) if os.path.isdir(configs) else []:
    if fname == f"{name}.yaml":
        with open(os.path.join(configs, fname)) as fh:
            for block in (yaml.safe_load(fh) or {}).values():
                entry = (block or {}).get("resources_servers", {}).get(name)
                if isinstance(entry, dict):
                    options = {k: v for k, v in entry.items() if k not in ("datasets",)}
                    break
config_cls = cls.model_fields["config"].annotation
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", 0))
port = sock.getsockname()[1]
config = config_cls(**{**options, "host": "127.0.0.1", "port": port, "name": name,
                       "entrypoint": options.get("entrypoint", "app.py")})
client = ServerClient(head_server_config=BaseServerConfig(host="127.0.0.1", port=port),
                      global_config_dict=OmegaConf.create({}))
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


class NemoServerProcess:
    """The supervised child that serves one resources server: started on first use, started again when
    it has died, stopped when this object is closed or this process exits (its stdin closes)."""

    def __init__(self, server: str, venv: Path | None, start_timeout_s: float = 180.0) -> None:
        self.server = server
        self.venv = venv
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[str] | None = None
        self._url: str | None = None
        self._lock: asyncio.Lock | None = None

    async def url(self) -> str:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._proc is None or self._proc.poll() is not None or self._url is None:
                self._url = await asyncio.to_thread(self._start)
            return self._url

    def _start(self) -> str:
        self.close()
        python = venv_dir(self.venv) / "bin" / "python"
        cwd = site_packages(self.venv)
        log = tempfile.TemporaryFile(mode="w+")  # the server's stderr: read back when it fails to start
        proc = subprocess.Popen(  # our launcher, in the NeMo venv's interpreter
            [str(python), "-c", LAUNCHER, self.server], cwd=cwd, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=log, text=True)
        self._proc = proc
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the launcher prints its port once the socket is bound
        if not line.startswith("PORT "):
            proc.kill()
            proc.wait(timeout=30)
            log.seek(0)
            raise EnvironmentFailure(f"NeMo Gym server '{self.server}' did not start: {log.read().strip()[-1500:]}")
        log.close()
        return f"http://127.0.0.1:{int(line.split()[1])}"

    def close(self) -> None:
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

