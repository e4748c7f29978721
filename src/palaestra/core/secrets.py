"""Keep credentials out of everything Palaestra writes: run.json, journals, reports, logs, errors."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from palaestra.core.errors import ConfigError

_SECRET_KEY = re.compile(r"(key|token|secret|password|authorization)", re.I)
_URL_USERINFO = re.compile(r"(https?://)[^/@\s]+@")
_URL_QUERY_SECRET = re.compile(r"([?&](?:api[_-]?key|key|token|access_token|sig|signature)=)[^&\s]+", re.I)


def redact_url(text: str) -> str:
    """``http://user:pw@host/v1?api_key=x`` → ``http://***@host/v1?api_key=***``."""
    return _URL_QUERY_SECRET.sub(r"\1***", _URL_USERINFO.sub(r"\1***@", text))


def redact(value: Any, key: str = "") -> Any:
    """Strip secrets from a config: values of secret-named keys (but not ``*_env``, which name the
    variable that holds a key) and credentials inside URLs."""
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    if isinstance(value, str):
        if _SECRET_KEY.search(key) and not key.endswith("_env") and value:
            return "***"
        return redact_url(value)
    return value


def read_secret_file(path: str | Path, what: str, *, hint: str, empty_hint: str | None = None) -> str:
    """The secret (an API key, a server token) held in the file at ``path``, surrounding whitespace
    stripped. A file keeps the secret out of process listings and shell history; one that cannot be read
    or holds nothing is a config mistake, so it raises ``ConfigError`` (``what`` names the file in the
    message, e.g. "the API key file"; ``hint`` says what to give instead) rather than going on with no
    secret."""
    file = Path(path).expanduser()
    try:
        secret = file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {str(file)!r}: {exc.strerror or exc}", hint=hint) from exc
    if not secret:
        raise ConfigError(f"{what} {str(file)!r} is empty", hint=empty_hint)
    return secret
