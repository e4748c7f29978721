"""What a NeMo Gym user needs beside the running face (``nemo_gym_face``): the config that points NeMo
Gym at it, the environment's tasks as NeMo Gym rows, and the placeholder server folder.

NeMo Gym starts every server its config names (``entrypoint``) and reaches each at the ``host``/``port``
the config gives. It has no notion of a resources server hosted elsewhere, so the config names a
placeholder (``resources_servers/palaestra``: a script that only waits until ``gym`` stops it) with the
face's host and port: NeMo Gym supervises the placeholder, and its readiness probe and every request of
its agents go to the address, i.e. to Palaestra. ``--search-dir`` tells ``gym`` where the placeholder
folder is. The placeholder's venv is built by ``gym`` like any server's (it holds NeMo Gym only).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from palaestra.adapters.nemo_gym_face import TASK_KEY, create_nemo_face_app
from palaestra.core.environment import Environment
from palaestra.core.errors import ConfigError
from palaestra.core.records import Task
from palaestra.wire.responses import chat_to_responses_request

PLACEHOLDER = "palaestra"  # resources_servers/<this>: the folder the config's entrypoint lives in

_PLACEHOLDER_APP = '''"""Stands in, for NeMo Gym's process supervision, for a resources server that Palaestra
serves itself (``palaestra env serve ENV --nemo-gym``). NeMo Gym reaches the server at the host and port
its config gives; this process does nothing but wait until ``gym`` stops it."""

import signal
import sys

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    signal.pause()
'''
_PLACEHOLDER_REQUIREMENTS = "# nothing beyond NeMo Gym itself: the environment runs in Palaestra's process\n"


def names(env_name: str) -> dict[str, str]:
    """The config's instance names for an environment: its resources server, agent and environment server."""
    base = "palaestra_" + "".join(c if c.isalnum() else "_" for c in env_name)
    return {"resources": base, "agent": f"{base}_simple_agent", "environment": f"{base}_environment_server"}


def config_snippet(env_name: str, host: str, port: int, *, model_server: str = "policy_model") -> str:
    """The NeMo Gym YAML that routes its simple agent to the face on ``host:port`` (paste it into a
    config file and pass it with ``--config``, with the placeholder folder's root as ``--search-dir``)."""
    n = names(env_name)
    return (
        f"# Palaestra environment '{env_name}' served at http://{host}:{port} (palaestra env serve --nemo-gym)\n"
        f"{n['resources']}:\n"
        f"  resources_servers:\n"
        f"    {PLACEHOLDER}:\n"
        f"      entrypoint: app.py\n"
        f"      host: {host}\n"
        f"      port: {port}\n"
        f"      domain: other\n"
        f"{n['agent']}:\n"
        f"  responses_api_agents:\n"
        f"    simple_agent:\n"
        f"      entrypoint: app.py\n"
        f"      resources_server:\n"
        f"        type: resources_servers\n"
        f"        name: {n['resources']}\n"
        f"      model_server:\n"
        f"        type: responses_api_models\n"
        f"        name: {model_server}\n"
        f"{n['environment']}:\n"
        f"  environment_servers:\n"
        f"    legacy_agent:\n"
        f"      entrypoint: app.py\n"
        f"      agent_server:\n"
        f"        type: responses_api_agents\n"
        f"        name: {n['agent']}\n"
    )


def write_placeholder(root: str | Path) -> Path:
    """Write ``root/resources_servers/palaestra/`` (``app.py``, ``requirements.txt``); return ``root``
    (what ``gym ... --search-dir`` takes)."""
    folder = Path(root) / "resources_servers" / PLACEHOLDER
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "app.py").write_text(_PLACEHOLDER_APP, encoding="utf-8")
    (folder / "requirements.txt").write_text(_PLACEHOLDER_REQUIREMENTS, encoding="utf-8")
    return Path(root)


def nemo_row(env: Environment, task: Task, agent: str | None = None) -> dict[str, Any]:
    """One task as a NeMo Gym row: the prompt and tools the environment gives a model, as a Responses
    request; the task's metadata at the top level (NeMo Gym's row layout); the exact task under
    ``palaestra_task`` (what the face seeds from); and ``agent_ref`` when an agent is named."""
    request = chat_to_responses_request({"messages": env.prompt(task), "tools": env.tool_schemas(task)})
    for tool in request.get("tools") or []:
        tool.setdefault("strict", False)  # NeMo Gym's request model (OpenAI's FunctionToolParam) requires it
    row: dict[str, Any] = {k: v for k, v in task.metadata.items() if k not in ("responses_create_params", TASK_KEY)}
    row.update(id=task.id, responses_create_params=request)
    row[TASK_KEY] = task.model_dump(mode="json", exclude_none=True)
    if agent:
        row["agent_ref"] = {"type": "responses_api_agents", "name": agent}
    return row


def write_rows(env: Environment, tasks: Iterable[Task], path: str | Path, agent: str | None = None) -> int:
    """Write ``tasks`` as NeMo Gym rows (JSONL) for ``gym eval run --input``; returns how many."""
    n = 0
    with Path(path).open("w", encoding="utf-8") as fh:
        for task in tasks:
            fh.write(json.dumps(nemo_row(env, task, agent)) + "\n")
            n += 1
    return n


def serve(spec: str, *, host: str = "127.0.0.1", port: int = 8770, nemo_gym_dir: str | None = None,
          options: dict[str, Any] | None = None, allowed_hosts: tuple[str, ...] = ()) -> None:
    """Serve ``spec`` behind NeMo Gym's resources-server API until interrupted. With ``nemo_gym_dir``,
    write there (once the port is known) the placeholder folder, ``palaestra_<env>.yaml`` and the
    environment's bundled tasks as ``palaestra_<env>_rows.jsonl``; the config is printed either way."""
    from palaestra.envs.registry import load_env
    from palaestra.server.security import GuardPolicy, is_loopback
    from palaestra.server.serving import run_guarded

    if not is_loopback(host):
        raise ConfigError(f"refusing to serve the NeMo Gym face on {host}: NeMo Gym's agents send no token",
                          hint="bind 127.0.0.1 (the face has no token, so it never leaves loopback)")
    env = load_env(spec, options)
    app = create_nemo_face_app(env)

    def ready(actual: int) -> None:
        snippet = config_snippet(env.name, host, actual)
        print(f"environment '{env.name}' behind NeMo Gym's resources-server API on http://{host}:{actual}",
              file=sys.stderr)
        if nemo_gym_dir is not None:
            root = write_placeholder(nemo_gym_dir)
            config = root / f"{names(env.name)['resources']}.yaml"
            config.write_text(snippet, encoding="utf-8")
            rows = root / f"{names(env.name)['resources']}_rows.jsonl"
            count = write_rows(env, env.examples(), rows, names(env.name)["agent"])
            print(f"wrote {config}, {count} rows to {rows}, and the placeholder server under {root}\n"
                  f"  gym eval run --config {config} --model-type openai_model --search-dir {root} "
                  f"--agent {names(env.name)['agent']} --input {rows} --output rollouts.jsonl", file=sys.stderr)
        else:
            print("NeMo Gym config (write the placeholder with --nemo-gym-dir):\n" + snippet, file=sys.stderr)
        print(f"PALAESTRA_READY {actual}", flush=True)

    run_guarded(app, GuardPolicy(allowed_hosts=allowed_hosts), host=host, port=port, on_ready=ready, lifespan="on",
                access_log=False)
