"""Turn a ``--model`` string into a backend: ``scripted:POLICY``, ``openai:URL`` or a bare ``http(s)://`` URL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from palaestra.core.errors import ConfigError
from palaestra.models.base import ModelBackend


def oracle_references(env_specs: Sequence[str]) -> dict[str, Any]:
    """References of the bundled tasks of the given environments, keyed by their prompt, so a
    standalone oracle server can answer requests that carry no rollout context."""
    from palaestra.envs.registry import load_env
    from palaestra.models.scripted import reference_key

    refs: dict[str, Any] = {}
    for spec in env_specs:
        env = load_env(spec)
        for task in env.examples():
            ref = env.reference(task)
            if ref is not None:
                refs[reference_key(env.prompt(task))] = ref
    return refs


# Asked of OpenAI-compatible servers when token capture is on: vLLM (>=0.10.2) answers prompt_token_ids and
# choices[].token_ids; logprobs carry one value per generated token. A server that ignores them is recorded
# as such (ModelCallRecord.token_capture), never papered over. Off by default: OpenAI itself rejects them.
TOKEN_CAPTURE_FIELDS = {"logprobs": True, "top_logprobs": 0, "return_token_ids": True}

_SCRIPTED_OPTS = {"latency_ms", "failure_rate", "seed", "text", "accuracy", "file"}


def parse_scripted(spec: str) -> tuple[str, dict[str, str]]:
    """``scripted:POLICY?latency_ms=200&failure_rate=0.3`` → (policy, options)."""
    from urllib.parse import parse_qsl

    body = spec.partition(":")[2]
    policy, _, query = body.partition("?")
    opts = dict(parse_qsl(query, keep_blank_values=True))
    unknown = sorted(set(opts) - _SCRIPTED_OPTS)
    if unknown:
        raise ConfigError(f"unknown option(s) {', '.join(unknown)} in model '{spec}'",
                          hint=f"scripted options: {', '.join(sorted(_SCRIPTED_OPTS))}")
    return policy or "oracle", opts


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


def make_backend(
    spec: str,
    *,
    model_name: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    api_key_file: str | None = None,
    latency_ms: float = 0.0,
    failure_rate: float = 0.0,
    seed: int = 0,
    oracle_envs: Sequence[str] = (),
    timeout_s: float = 120.0,
    capture_tokens: bool = False,
    max_concurrency: int = 256,
) -> ModelBackend:
    if spec.startswith("scripted"):
        from palaestra.models.scripted import ScriptedBackend

        policy, opts = parse_scripted(spec)
        return ScriptedBackend(policy, latency_ms=float(opts.get("latency_ms", latency_ms)),
                               failure_rate=float(opts.get("failure_rate", failure_rate)),
                               seed=int(opts.get("seed", seed)),
                               constant_text=str(opts.get("text", "\\boxed{A}")),
                               accuracy=float(opts.get("accuracy", 1.0)),
                               replay=_replay_file(opts["file"]) if "file" in opts else None,
                               references=oracle_references(oracle_envs) if oracle_envs else None)
    if spec == "local" or spec.startswith(("local:", "local?")):
        from palaestra.models.local import make_local_backend

        return make_local_backend(spec)
    url = spec.removeprefix("openai:")
    if url.startswith(("http://", "https://")) and "," in url:
        from palaestra.models.endpoints import EndpointPool, split_urls
        from palaestra.models.openai_http import api_key_from_env

        return EndpointPool(split_urls(url), model=model_name, api_key=api_key_from_env(api_key_env, api_key_file),
                            timeout=timeout_s, max_concurrency=max_concurrency,
                            extra_body=TOKEN_CAPTURE_FIELDS if capture_tokens else None)
    if url.startswith(("http://", "https://")):
        from palaestra.models.openai_http import OpenAIBackend, api_key_from_env

        return OpenAIBackend(url, model=model_name, api_key=api_key_from_env(api_key_env, api_key_file),
                             timeout=timeout_s, max_concurrency=max_concurrency,
                             extra_body=TOKEN_CAPTURE_FIELDS if capture_tokens else None)
    raise ConfigError(
        f"unknown model '{spec}'",
        hint="use scripted:POLICY (oracle|constant|echo|null|replay), local[:PATH], or an OpenAI-compatible "
             "base URL such as http://127.0.0.1:8000/v1",
    )
