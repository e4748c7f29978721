"""Turn a ``--model`` string into a backend: ``scripted:POLICY``, ``local[:PATH]``, ``openai:URL``, a bare
``http(s)://`` URL, or ``KIND:...`` of an installed model plugin. Specs follow the one plugin grammar
(``palaestra.plugins.spec``); each kind is a plugin of the ``models`` group."""

from __future__ import annotations

from typing import Any

from palaestra.core.errors import ConfigError
from palaestra.models.base import ModelBackend
from palaestra.plugins.registry import registry as plugin_registry
from palaestra.plugins.spec import Spec, parse_spec

# Asked of OpenAI-compatible servers when token capture is on: vLLM (>=0.10.2) answers prompt_token_ids and
# choices[].token_ids; logprobs carry one value per generated token. A server that ignores them is recorded
# as such (ModelCallRecord.token_capture), never papered over. Off by default: OpenAI itself rejects them.
TOKEN_CAPTURE_FIELDS = {"logprobs": True, "top_logprobs": 0, "return_token_ids": True}

# Built-in model kinds, declared like any plugin; installed packages add more through the
# ``palaestra.models`` entry-point group (a ``factory(spec, **settings) -> ModelBackend``).
MODELS = plugin_registry("models", declare=False)
MODELS.add_builtins({
    "scripted": "palaestra.models.factory:scripted_backend",
    "local": "palaestra.models.factory:local_backend",
    "openai": "palaestra.models.factory:openai_backend",
    "responses": "palaestra.models.responses_http:responses_backend",
})

SCRIPTED_OPTIONS: dict[str, type] = {"latency_ms": float, "failure_rate": float, "seed": int, "text": str,
                                     "accuracy": float, "file": str}
_HINT = ("use scripted:POLICY (oracle|constant|format|echo|null|replay), local[:PATH], or an OpenAI-compatible "
         "base URL such as http://127.0.0.1:8000/v1")


def parse_model_spec(spec: str) -> Spec:
    """A ``--model`` string in the plugin grammar. A bare ``http(s)://`` URL (or ``openai:URL``) is kind
    ``openai`` with the URL, query included, as its name: a URL's own ``?`` belongs to the URL."""
    text = spec.strip()
    if text.startswith(("http://", "https://")):
        return Spec(kind="openai", name=text, text=text, what="model")
    if text.startswith("openai:"):
        return Spec(kind="openai", name=text.removeprefix("openai:"), text=text, what="model")
    if text.startswith("responses:"):  # a model that speaks the Responses API: the URL is the name, as above
        return Spec(kind="responses", name=text.removeprefix("responses:"), text=text, what="model")
    return parse_spec(text, what="model")


def parse_scripted(spec: str) -> tuple[str, dict[str, Any]]:
    """``scripted:POLICY?latency_ms=200&failure_rate=0.3`` → (policy, typed options)."""
    parsed = parse_model_spec(spec)
    return parsed.name or "oracle", parsed.typed(SCRIPTED_OPTIONS)


def _replay_file(path: str) -> list[dict[str, Any]]:
    """Recorded assistant messages for ``scripted:replay?file=PATH``: a JSON list or JSONL, one per turn."""
    import orjson

    try:
        text = open(path, "rb").read()
    except OSError as exc:
        raise ConfigError(f"replay file {path}: {exc.strerror}", hint="give a JSON list or JSONL of messages") from None
    try:
        data = orjson.loads(text)
        return list(data) if isinstance(data, list) else [data]
    except orjson.JSONDecodeError:
        try:
            return [orjson.loads(line) for line in text.splitlines() if line.strip()]
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"replay file {path} is neither a JSON list nor JSONL: {exc}") from None


def scripted_backend(spec: Spec, **settings: Any) -> ModelBackend:
    """``scripted[:POLICY][?options]``: spec options win over the run's settings."""
    from palaestra.models.scripted import ScriptedBackend

    opts = spec.typed(SCRIPTED_OPTIONS)
    return ScriptedBackend(spec.name or "oracle",
                           latency_ms=opts.get("latency_ms", settings.get("latency_ms", 0.0)),
                           failure_rate=opts.get("failure_rate", settings.get("failure_rate", 0.0)),
                           seed=opts.get("seed", settings.get("seed", 0)),
                           constant_text=opts.get("text", "\\boxed{A}"),
                           accuracy=opts.get("accuracy", 1.0),
                           replay=_replay_file(opts["file"]) if "file" in opts else None,
                           references=settings.get("references"))


def local_backend(spec: Spec, **settings: Any) -> ModelBackend:
    """``local[:PATH][?options]``: the embedded model (extra ``[local]``)."""
    from palaestra.models.local import make_local_backend

    return make_local_backend(spec.text)


def openai_backend(spec: Spec, **settings: Any) -> ModelBackend:
    """``http(s)://HOST/v1`` (or ``openai:URL``); several comma-separated URLs make an endpoint pool."""
    url = spec.name
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"model '{spec.text}': '{url}' is not an http(s) URL", hint=_HINT)
    from palaestra.models.openai_http import api_key_from_env

    capture = TOKEN_CAPTURE_FIELDS if settings.get("capture_tokens") else None
    common: dict[str, Any] = {"model": settings.get("model_name"), "timeout": settings.get("timeout_s", 120.0),
                              "max_concurrency": settings.get("max_concurrency", 256), "extra_body": capture,
                              "api_key": api_key_from_env(settings.get("api_key_env", "OPENAI_API_KEY"),
                                                          settings.get("api_key_file"))}
    if "," in url:
        from palaestra.models.endpoints import EndpointPool, split_urls

        return EndpointPool(split_urls(url), **common)
    from palaestra.models.openai_http import OpenAIBackend

    return OpenAIBackend(url, **common)


def make_backend(
    spec: str,
    *,
    model_name: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    api_key_file: str | None = None,
    latency_ms: float = 0.0,
    failure_rate: float = 0.0,
    seed: int = 0,
    references: dict[str, Any] | None = None,
    timeout_s: float = 120.0,
    capture_tokens: bool = False,
    max_concurrency: int = 256,
) -> ModelBackend:
    """A backend for a model spec. The keyword arguments are the run's model settings; every backend
    (a built-in or a plugin's) gets them all and takes what it uses."""
    settings: dict[str, Any] = {k: v for k, v in locals().items() if k != "spec"}
    parsed = parse_model_spec(spec)
    plugin = MODELS.get(parsed.kind)
    if plugin is None:
        plugins = [n for n in MODELS.names() if n not in MODELS.builtins()]
        more = f"; installed model plugins: {', '.join(plugins)}" if plugins else ""
        raise ConfigError(f"unknown model '{spec}'", hint=_HINT + more)
    backend: ModelBackend = plugin.load()(parsed, **settings)
    return backend
