"""``palaestra model ...``: serve a model backend behind Palaestra's OpenAI-compatible proxy."""

from __future__ import annotations

import typer

from palaestra.cli.common import (
    ServeAuth,
    allowed_host_option,
    fail,
    guarded,
    shown_host,
    token_env_option,
    token_file_option,
)

app = typer.Typer(no_args_is_help=True, help="Models: serve a backend over the OpenAI-compatible API.")


@app.command("serve")
def serve(
    backend: str = typer.Option("scripted", help="scripted | local[:PATH] | openai:BASE_URL"),
    policy: str = typer.Option("oracle", help="Scripted policy: oracle | constant | echo | null | replay."),
    env: list[str] = typer.Option([], "--env", help="For the oracle: environments whose bundled tasks it knows."),
    tasks: str | None = typer.Option(None, "--tasks", help="For the oracle: a task file (JSONL or Parquet, as "
                                                          "`eval run --input` reads) whose tasks it knows too."),
    latency_ms: float = typer.Option(0.0, help="Scripted: latency per call."),
    failure_rate: float = typer.Option(0.0, help="Scripted: fraction of calls that fail with a 500."),
    model_name: str = typer.Option("", help="Model name to send upstream (openai backend)."),
    api_key_env: str = typer.Option("OPENAI_API_KEY", help="Variable holding the upstream API key."),
    host: str = typer.Option("127.0.0.1"),
    port: int = typer.Option(8000),
    token_env: str = token_env_option("a generated one where a token is needed"),
    token: bool | None = typer.Option(None, "--token/--no-token",
                                      help="Require a bearer token. Default: yes for an upstream (openai:) backend "
                                           "or off loopback, no otherwise; --no-token is refused off loopback."),
    token_file: str | None = token_file_option("model"),
    allowed_host: list[str] = allowed_host_option(),
) -> None:
    """Serve /v1/chat/completions, /v1/responses, /v1/messages and /v1/models.

    Clients of a token-protected proxy send the token as their API key (Authorization: Bearer, or
    x-api-key), e.g. ``palaestra eval run --model URL --api-key-file TOKEN_FILE``."""

    upstream = backend.startswith("openai:") or backend.startswith(("http://", "https://"))
    auth = ServeAuth.choose(host, token_env=token_env, no_token=token is False, default_on=upstream or token is True,
                            allowed_hosts=allowed_host)
    from palaestra.envs.oracle import oracle_references
    from palaestra.models.factory import make_backend
    from palaestra.rollout.selection import refuse
    from palaestra.rollout.tasks import load_task_file
    from palaestra.server.model_app import create_model_app
    from palaestra.server.model_proxy import ModelProxy
    from palaestra.server.serving import run_guarded

    loaded = guarded(load_task_file, tasks) if tasks else None
    if loaded is not None and loaded.problems:  # every bad row named, as `eval run` names them
        fail(refuse(loaded.problems).message, "fix the rows it names: the oracle answers every task of --tasks")
    known = loaded.tasks if loaded is not None else []
    model_backend = make_backend(backend if backend != "scripted" else f"scripted:{policy}",
                                 model_name=model_name or None, api_key_env=api_key_env,
                                 latency_ms=latency_ms, failure_rate=failure_rate,
                                 references=oracle_references(env, known) if env or known else None)
    start = getattr(model_backend, "start", None)
    if start is not None:  # the local model loads while uvicorn starts, not on the first request
        start()

    def ready(actual: int) -> None:
        typer.echo(f"palaestra model proxy on http://{shown_host(host)}:{actual}/v1", err=True)
        auth.announce(auth.save("model", actual, token_file), "clients send it as their API key")

    run_guarded(create_model_app(ModelProxy(model_backend)), auth.guard, host=host, port=port, on_ready=ready)


def _mount_local() -> None:
    from palaestra.cli.local_cmds import pull

    app.command("pull")(pull)


_mount_local()
