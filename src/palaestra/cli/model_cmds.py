"""``palaestra model ...``: serve a model backend behind Palaestra's OpenAI-compatible proxy."""

from __future__ import annotations

import typer

from palaestra.cli.common import fail

app = typer.Typer(no_args_is_help=True, help="Models: serve a backend over the OpenAI-compatible API.")


@app.command("serve")
def serve(
    backend: str = typer.Option("scripted", help="scripted | local[:PATH] | openai:BASE_URL"),
    policy: str = typer.Option("oracle", help="Scripted policy: oracle | constant | echo | null | replay."),
    env: list[str] = typer.Option([], "--env", help="For the oracle: environments whose bundled tasks it knows."),
    latency_ms: float = typer.Option(0.0, help="Scripted: latency per call."),
    failure_rate: float = typer.Option(0.0, help="Scripted: fraction of calls that fail with a 500."),
    model_name: str = typer.Option("", help="Model name to send upstream (openai backend)."),
    api_key_env: str = typer.Option("OPENAI_API_KEY", help="Variable holding the upstream API key."),
    host: str = typer.Option("127.0.0.1"),
    port: int = typer.Option(8000),
    token_env: str = typer.Option("PALAESTRA_TOKEN", help="Variable holding the bearer token (required off "
                                                          "loopback)."),
) -> None:
    """Serve /v1/chat/completions, /v1/responses, /v1/messages and /v1/models."""
    from palaestra.core.errors import PalaestraError
    from palaestra.server.auth import check_bind, protect, token_from_env

    token = token_from_env(token_env)
    try:
        check_bind(host, token, token_env=token_env)
    except PalaestraError as exc:
        fail(exc.message, exc.hint)
    import uvicorn

    from palaestra.models.factory import make_backend
    from palaestra.server.model_app import create_model_app
    from palaestra.server.model_proxy import ModelProxy

    model_backend = make_backend(backend if backend != "scripted" else f"scripted:{policy}",
                                 model_name=model_name or None, api_key_env=api_key_env,
                                 latency_ms=latency_ms, failure_rate=failure_rate, oracle_envs=env)
    start = getattr(model_backend, "start", None)
    if start is not None:  # the local model loads while uvicorn starts, not on the first request
        start()
    uvicorn.run(protect(create_model_app(ModelProxy(model_backend)), token), host=host, port=port,
                log_level="warning")


def _mount_local() -> None:
    from palaestra.cli.local_cmds import pull

    app.command("pull")(pull)


_mount_local()
