"""Helpers shared by the adapters: import a user's ``module:Name``, validate tool arguments."""

from __future__ import annotations

import importlib
from typing import Any

from palaestra.core.errors import BadArguments, ConfigError


def import_object(spec: str, what: str) -> Any:
    """``package.module:Name`` → the object, with an error that names the spec and the fix."""
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise ConfigError(f"{what} '{spec}' is not of the form module:Name", hint="e.g. my_env.server:MyEnvironment")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        hint = f"is {module_name} installed and importable (PYTHONPATH)?"
        raise ConfigError(f"cannot import {what} '{spec}': {exc}", hint=hint) from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"{what} '{spec}': {module_name} has no '{attr}'") from None


def check_arguments(schema: dict[str, Any], arguments: Any, tool: str) -> dict[str, Any]:
    """Validate tool arguments against their JSON schema before running anything, so a bad call is the
    model's to fix (``bad_arguments``, naming each field), not a lost episode or a crashed tool."""
    import jsonschema

    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise BadArguments(f"tool '{tool}' takes a JSON object of arguments, got {type(arguments).__name__}",
                           hint=f"send an object with the fields {sorted(schema.get('properties', {}))}")
    problems = sorted(jsonschema.Draft202012Validator(schema).iter_errors(arguments), key=lambda e: list(e.path))
    if problems:
        detail = "; ".join(f"{'.'.join(map(str, e.path)) or '(action)'}: {e.message}" for e in problems[:5])
        raise BadArguments(f"invalid arguments for tool '{tool}': {detail}", hint="fix the fields named above")
    return arguments
