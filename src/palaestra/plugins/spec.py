"""The one grammar for every plugin spec: ``kind[:name][?opt=v&opt2=w]``.

A model (``scripted:oracle?accuracy=0.4``, ``local:./m?threads=2``, ``router:split?to=a,b``), an agent
(``tool?max_steps=8``), a sandbox provider (``docker``) and a cluster (``ray:HOST:PORT?workers=4``) are all
written this way, so users learn it once and every error about it reads the same. The kind is what the
plugin registry looks up; the name is everything after the first ``:`` up to the first ``?`` (it may hold
further colons: a path, ``HOST:PORT``, a URL); options are URL-query encoded (``+`` and ``%XX`` decode as
in a URL query). Option values are typed by the plugin that owns the kind, through :meth:`Spec.typed`,
whose errors name the spec, the option and what it should have been.

This module imports nothing heavy: it runs on the CLI's start-up path.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_plus

from palaestra.core.errors import ConfigError

__all__ = ["Converter", "Spec", "as_bool", "list_of", "parse_spec", "schema_from"]

_KIND = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*\Z")
_TRUE = {"", "1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

# A converter turns an option's text into its value and raises ValueError when it cannot. Plain ``int``,
# ``float``, ``str`` and ``bool`` may be given as types; ``bool`` means :func:`as_bool`, not ``bool(str)``.
Converter = Callable[[str], Any]


def as_bool(raw: str) -> bool:
    """``1/0``, ``true/false``, ``yes/no``, ``on/off``; a bare ``?flag`` (empty value) is true."""
    low = raw.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(raw)


def list_of(item: Converter, sep: str = ",") -> Converter:
    """A converter for ``a,b,c`` (empty items dropped), each item converted by ``item``."""
    conv = _converter(item)

    def parse(raw: str) -> list[Any]:
        return [conv(part) for part in raw.split(sep) if part != ""]

    parse.label = f"a list of {_label(item).removeprefix('an ').removeprefix('a ')}s"  # type: ignore[attr-defined]
    return parse


def _converter(kind: Converter | type) -> Converter:
    if kind is bool:
        return as_bool
    return kind


def _label(kind: Converter | type) -> str:
    """How an error says what a value should have been."""
    if kind is int:
        return "an integer"
    if kind is float:
        return "a number"
    if kind is bool or kind is as_bool:
        return "a boolean (1/0, true/false)"
    label = getattr(kind, "label", None)
    return str(label) if label else f"a valid {getattr(kind, '__name__', 'value')}"


def schema_from(fn: Callable[..., Any], *, skip: tuple[str, ...] = ()) -> dict[str, Converter | type]:
    """An option schema from a callable's keyword parameters: ``bool``, ``int`` and ``float`` annotations
    (alone or in a union with ``None``) type the option; anything else takes the text as it is."""
    import inspect
    import typing

    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    schema: dict[str, Converter | type] = {}
    for name, param in inspect.signature(fn).parameters.items():
        if name in skip or param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            continue
        hint = hints.get(name, str)
        members = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        schema[name] = next((t for t in (bool, int, float) if t in members), str)
    return schema


@dataclass(frozen=True)
class Spec:
    """A parsed spec. ``name`` is ``""`` when the spec gave none; ``options`` keep their raw text."""

    kind: str
    name: str = ""
    options: Mapping[str, str] = field(default_factory=dict)
    text: str = ""
    what: str = "spec"  # what the spec is of, for messages: "model", "agent", "sandbox", ...

    def __str__(self) -> str:
        return self.text

    def error(self, message: str, *, hint: str | None = None) -> ConfigError:
        """A ConfigError that quotes the spec as written."""
        return ConfigError(f"{self.what} '{self.text}': {message}", hint=hint)

    def check_options(self, allowed: Mapping[str, Any] | set[str] | frozenset[str] | tuple[str, ...]) -> None:
        """Refuse options the plugin does not know, naming them and listing the ones it does."""
        known = set(allowed)
        unknown = sorted(set(self.options) - known)
        if unknown:
            quoted = ", ".join(f"'{u}'" for u in unknown)
            noun = "option" if len(unknown) == 1 else "options"
            listing = ", ".join(sorted(known)) if known else "(none)"
            raise ConfigError(f"unknown {noun} {quoted} in {self.what} '{self.text}'",
                              hint=f"{self.kind} options: {listing}")

    def typed(self, schema: Mapping[str, Converter | type], *, strict: bool = True) -> dict[str, Any]:
        """The options converted by ``schema`` (option → type or converter); options absent from the
        spec are absent from the result, so callers keep their own defaults. With ``strict`` an option
        outside the schema is an error."""
        if strict:
            self.check_options(schema)
        out: dict[str, Any] = {}
        for key, raw in self.options.items():
            kind = schema.get(key)
            if kind is None:
                continue
            try:
                out[key] = _converter(kind)(raw)
            except (ValueError, TypeError):
                raise self.error(f"option {key}={raw!r} is not {_label(kind)}",
                                 hint=f"{self.kind} options: {', '.join(sorted(schema))}") from None
        return out


def parse_spec(text: str, *, what: str = "spec", default_kind: str | None = None) -> Spec:
    """Parse ``kind[:name][?opt=v&...]``. ``default_kind`` fills in a spec that starts with ``?``.
    Errors name the spec and the part that is wrong."""
    raw = text.strip()
    head, qmark, query = raw.partition("?")
    kind, colon, name = head.partition(":")
    if not kind and default_kind and not colon:
        kind = default_kind
    if not _KIND.match(kind):
        raise ConfigError(f"{what} '{text}': '{kind}' is not a plugin name" if kind else f"{what} '{text}' "
                          "names no kind", hint="write KIND, KIND:NAME or KIND:NAME?option=value&other=value")
    options: dict[str, str] = {}
    if qmark:
        for part in query.split("&"):
            if part == "":
                continue
            key, _, value = part.partition("=")
            key = unquote_plus(key).strip()
            if not key:
                raise ConfigError(f"{what} '{text}': an option has no name ('{part}')",
                                  hint="options look like ?name=value&other=value")
            if key in options:
                raise ConfigError(f"{what} '{text}': option '{key}' is given twice")
            options[key] = unquote_plus(value)
    return Spec(kind=kind, name=name, options=options, text=raw, what=what)
