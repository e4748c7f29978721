"""The embedded local model (extra ``[local]``): transformers + PyTorch on the CPU.

``make_local_backend("local")`` serves SmolLM2-135M-Instruct (pulled and cached on first use);
``local:PATH`` serves a GGUF file or an HF-format directory. Options follow a ``?``:
``local?dtype=bfloat16&threads=2&max_batch=32&max_tokens=1024&pull=0``. Importing this package does not
import torch, so the CLI can name the extra in its error when it is missing.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from palaestra.core.errors import ConfigError

if TYPE_CHECKING:
    from palaestra.models.local.backend import LocalBackend

OPTIONS = {"dtype", "threads", "max_batch", "max_tokens", "pull"}
REQUIRED = ("torch", "transformers", "gguf", "safetensors")


def parse_spec(spec: str) -> tuple[str | None, dict[str, str]]:
    """``local``, ``local:PATH`` or either with ``?key=value&…`` → (path or None, options)."""
    if spec != "local" and not spec.startswith(("local:", "local?")):
        raise ConfigError(f"not a local model spec: {spec!r}", hint="use local or local:PATH")
    body = spec[len("local"):]
    body = body.removeprefix(":")
    path, _, query = body.partition("?")
    opts = dict(parse_qsl(query, keep_blank_values=True))
    unknown = sorted(set(opts) - OPTIONS)
    if unknown:
        raise ConfigError(f"unknown option(s) {', '.join(unknown)} in model {spec!r}",
                          hint=f"local model options: {', '.join(sorted(OPTIONS))}")
    return path or None, opts


def missing_packages() -> list[str]:
    return [name for name in REQUIRED if importlib.util.find_spec(name) is None]


def make_local_backend(spec: str = "local", **overrides: Any) -> LocalBackend:
    """A ``LocalBackend`` for ``spec``; keyword overrides (e.g. ``notify=``) win over spec options."""
    path, opts = parse_spec(spec)
    missing = missing_packages()
    if missing:
        raise ConfigError(f"the local model backend needs {', '.join(missing)}, which is not installed",
                          hint="pip install 'palaestra[local]' (with torch==2.13.0 for the CPU build)")
    from palaestra.models.local.backend import LocalBackend

    def integer(key: str) -> int | None:
        try:
            return int(opts[key]) if key in opts else None
        except ValueError:
            raise ConfigError(f"option {key}={opts[key]!r} in {spec!r} is not an integer") from None

    kwargs: dict[str, Any] = {"dtype": opts.get("dtype", "float32"), "threads": integer("threads"),
                              "max_batch": integer("max_batch") or 32,
                              "default_max_tokens": integer("max_tokens") or 1024,
                              "pull": opts.get("pull", "1").lower() not in ("0", "false", "no")}
    kwargs.update(overrides)
    return LocalBackend(path, **kwargs)


__all__ = ["make_local_backend", "missing_packages", "parse_spec"]
