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
    token_env: str = typer.Option("PALAESTRA_TOKEN", help="Variable holding the bearer token to require (default: "
                                                          "a generated one where a token is needed)."),
    token: bool | None = typer.Option(None, "--token/--no-token",
                                      help="Require a bearer token. Default: yes for an upstream (openai:) backend "
                                           "or off loopback, no otherwise; --no-token is refused off loopback."),
    token_file: str | None = typer.Option(None, help="Where to write a generated token (default: "
                                                     "$XDG_RUNTIME_DIR/palaestra/model-PORT.token, else "
                                                     "~/.cache/palaestra/tokens/model-PORT.token)."),
    allowed_host: list[str] = typer.Option([], "--allowed-host", help="Another Host name clients use (NAME or "
                                           "NAME:PORT; '*' for any). Loopback names are always accepted."),
) -> None:
    """Serve /v1/chat/completions, /v1/responses, /v1/messages and /v1/models.

    Clients of a token-protected proxy send the token as their API key (Authorization: Bearer, or
    x-api-key), e.g. ``palaestra eval run --model URL --api-key-file TOKEN_FILE``."""
    import os

    from palaestra.core.errors import PalaestraError
    from palaestra.server.auth import check_bind, token_from_env
    from palaestra.server.security import GuardPolicy, choose_token, default_token_file, write_token_file

    upstream = backend.startswith("openai:") or backend.startswith(("http://", "https://"))
    given = token_from_env(token_env)
    try:
        chosen = choose_token(host, given=given, no_token=token is False, default_on=upstream or token is True)
        check_bind(host, chosen, token_env=token_env)
        guard = GuardPolicy.for_bind(host, token=chosen, allowed_hosts=allowed_host)
    except PalaestraError as exc:
        fail(exc.message, exc.hint)
        return
    from palaestra.models.factory import make_backend
    from palaestra.server.model_app import create_model_app
    from palaestra.server.model_proxy import ModelProxy
    from palaestra.server.serving import run_guarded

    model_backend = make_backend(backend if backend != "scripted" else f"scripted:{policy}",
                                 model_name=model_name or None, api_key_env=api_key_env,
                                 latency_ms=latency_ms, failure_rate=failure_rate, oracle_envs=env)
    start = getattr(model_backend, "start", None)
    if start is not None:  # the local model loads while uvicorn starts, not on the first request
        start()

    def ready(actual: int) -> None:
        shown = f"[{host}]" if ":" in host else host
        typer.echo(f"palaestra model proxy on http://{shown}:{actual}/v1", err=True)
        if chosen is not None and given is None:  # printed this once; never logged
            where = write_token_file(token_file or default_token_file("model", actual, os.environ.get(
                "XDG_RUNTIME_DIR")), chosen)
            typer.echo(f"  token: {chosen}\n  (saved in {where}, mode 0600; clients send it as their API key)",
                       err=True)
        elif chosen is not None:
            typer.echo(f"  token: the value of ${token_env}", err=True)

    run_guarded(create_model_app(ModelProxy(model_backend)), guard, host=host, port=port, on_ready=ready)


def _mount_local() -> None:
    from palaestra.cli.local_cmds import pull

    app.command("pull")(pull)


_mount_local()
