"""Find an environment by name or by a user's spec, without touching the package.

Specs: a built-in name (``mcqa``), ``package.module:Class``, or a file ``./my_env.py:MyEnv`` (the class
may be omitted when the file defines exactly one Environment subclass)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import sys
from pathlib import Path

from palaestra.core.environment import Environment
from palaestra.core.errors import ConfigError


def _discover() -> dict[str, str]:
    """Built-in environments: every sub-package of ``palaestra.envs`` declares ``ENVIRONMENTS``
    (name → ``module:Class``) in its ``__init__``, so adding one never means editing this file."""
    import palaestra.envs as pkg

    found: dict[str, str] = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        if not info.ispkg:
            continue
        module = importlib.import_module(f"palaestra.envs.{info.name}")
        found.update(getattr(module, "ENVIRONMENTS", {}))
    return found


BUILTIN: dict[str, str] = _discover()


# Names of user environments seen in this process (``./my_env.py:MyEnv`` → "myenv"), so task rows
# can name them by their short name.
_ALIASES: dict[str, str] = {}


def builtin_names() -> list[str]:
    return sorted(BUILTIN)


def register_alias(name: str, spec: str) -> None:
    if name not in BUILTIN:
        _ALIASES[name] = spec


def spec_for(name: str) -> str:
    """The importable spec behind an environment name (itself when it already is a spec)."""
    return BUILTIN.get(name) or _ALIASES.get(name) or name


def _load_module_from_file(path: Path) -> object:
    name = f"palaestra_user_env_{abs(hash(str(path.resolve())))}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot import environment file {path}", hint="is it a Python file?")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise ConfigError(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
    return module


def load_env_class(spec: str) -> type[Environment]:
    """Resolve a spec to an Environment subclass; errors say which spec and what would work."""
    target = spec_for(spec)
    modpart, _, clsname = target.partition(":")
    if modpart.endswith(".py") or "/" in modpart or modpart.startswith("."):
        path = Path(modpart)
        if not path.is_file():
            raise ConfigError(f"environment file not found: {modpart}", hint="give a path like ./my_env.py:MyEnv")
        module = _load_module_from_file(path)
    else:
        try:
            module = importlib.import_module(modpart)
        except ModuleNotFoundError as exc:
            raise ConfigError(
                f"unknown environment '{spec}'",
                hint=f"built-in: {', '.join(builtin_names())}; or module:Class; or ./file.py:Class",
            ) from exc
    if clsname:
        cls = getattr(module, clsname, None)
        if not (inspect.isclass(cls) and issubclass(cls, Environment)):
            raise ConfigError(f"'{clsname}' in {modpart} is not an Environment subclass")
        register_alias(cls.name, target)
        return cls
    found = [
        c for c in vars(module).values()
        if inspect.isclass(c) and issubclass(c, Environment) and c is not Environment
        and c.__module__ == getattr(module, "__name__", None)
    ]
    if len(found) != 1:
        raise ConfigError(
            f"{modpart} defines {len(found)} Environment classes",
            hint="name one: FILE.py:ClassName",
        )
    register_alias(found[0].name, target)
    return found[0]


def load_env(spec: str) -> Environment:
    return load_env_class(spec)()
