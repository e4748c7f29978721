"""The embedded local model (extra ``[local]``): transformers + PyTorch on the CPU.

``make_local_backend("local")`` serves SmolLM2-135M-Instruct (pulled and cached on first use);
``local:PATH`` serves a GGUF file or an HF-format directory. Options follow a ``?``:
``local?dtype=bfloat16&threads=2&max_batch=32&max_tokens=1024&pull=0``. Importing this package does not
import torch, so the CLI can name the extra in its error when it is missing.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from palaestra.core.errors import ConfigError
from palaestra.plugins.spec import parse_spec as parse_plugin_spec

if TYPE_CHECKING:
    from palaestra.models.local.backend import LocalBackend

# Typed by the one spec grammar (palaestra.plugins.spec), which names a bad option in its error.
OPTIONS: dict[str, type] = {"dtype": str, "threads": int, "max_batch": int, "max_tokens": int, "pull": bool}
REQUIRED = ("torch", "transformers", "gguf", "safetensors")


def parse_spec(spec: str) -> tuple[str | None, dict[str, str]]:
    """``local``, ``local:PATH`` or either with ``?key=value&…`` → (path or None, options)."""
    if spec != "local" and not spec.startswith(("local:", "local?")):
        raise ConfigError(f"not a local model spec: {spec!r}", hint="use local or local:PATH")
    parsed = parse_plugin_spec(spec, what="model")
    parsed.check_options(OPTIONS)
    return parsed.name or None, dict(parsed.options)


def missing_packages() -> list[str]:
    return [name for name in REQUIRED if importlib.util.find_spec(name) is None]


def make_local_backend(spec: str = "local", **overrides: Any) -> LocalBackend:
    """A ``LocalBackend`` for ``spec``; keyword overrides (e.g. ``notify=``) win over spec options."""
    path, _ = parse_spec(spec)
    missing = missing_packages()
    if missing:
        raise ConfigError(f"the local model backend needs {', '.join(missing)}, which is not installed",
                          hint="pip install 'palaestra[local]' (with torch==2.13.0 for the CPU build)")
    from palaestra.models.local.backend import LocalBackend

    typed = parse_plugin_spec(spec, what="model").typed(OPTIONS)
    kwargs: dict[str, Any] = {"dtype": typed.get("dtype", "float32"), "threads": typed.get("threads"),
                              "max_batch": typed.get("max_batch") or 32,
                              "default_max_tokens": typed.get("max_tokens") or 1024,
                              "pull": typed.get("pull", True)}
    kwargs.update(overrides)
    return LocalBackend(path, **kwargs)


__all__ = ["make_local_backend", "missing_packages", "parse_spec"]
