"""Keep credentials out of everything Palaestra writes: run.json, journals, reports, logs, errors."""

from __future__ import annotations

import re
from typing import Any

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
