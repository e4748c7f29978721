"""Find an environment by name or by a user's spec, without touching the package.

Specs: a built-in name (``mcqa``), the name of an installed plugin (entry-point group
``palaestra.environments``), ``package.module:Class``, or a file ``./my_env.py:MyEnv`` (the class
may be omitted when the file defines exactly one Environment subclass)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import sys
from pathlib import Path
from typing import Any

from palaestra.core.environment import Environment
from palaestra.core.errors import ConfigError
from palaestra.plugins.registry import registry as plugin_registry


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


# Built-ins are found on first lookup; installed packages add more through the
# ``palaestra.environments`` entry-point group (see palaestra.plugins).
ENVIRONMENTS = plugin_registry("environments", declare=False)
ENVIRONMENTS.add_builtins(_discover)


# Names of user environments seen in this process (``./my_env.py:MyEnv`` → "myenv"), so task rows
# can name them by their short name.
_ALIASES: dict[str, str] = {}


def builtin_names() -> list[str]:
    return sorted(ENVIRONMENTS.builtins())


def names() -> list[str]:
    """Built-in environments and those installed packages provide."""
    return ENVIRONMENTS.names()


def register_alias(name: str, spec: str) -> None:
    if name not in ENVIRONMENTS.builtins():
        _ALIASES[name] = spec


def _is_plain_name(name: str) -> bool:
    return bool(name) and not any(c in name for c in ":/\\") and not name.endswith(".py")


def spec_for(name: str) -> str:
    """The importable spec behind an environment name (itself when it already is a spec): a built-in,
    a user environment seen in this process, then an installed plugin (its entry point's target)."""
    builtin = ENVIRONMENTS.builtins().get(name)
    if builtin is not None:
        return builtin.target
    if name in _ALIASES:
        return _ALIASES[name]
    if _is_plain_name(name):
        plugin = ENVIRONMENTS.get(name)
        if plugin is not None:
            return plugin.target
    return name


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


# Families of foreign environments named ``family:member`` (``nemo_gym:example_session_state_mgmt``): the
# family's factory (``module:function``, imported by name on first use) makes the member's class.
FAMILIES: dict[str, str] = {"nemo_gym": "palaestra.adapters.nemo_gym_server:environment_class",
                            "aviary": "palaestra.adapters.aviary:environment_class"}


def _family_class(spec: str) -> type[Environment] | None:
    family, sep, member = spec.partition(":")
    if not sep or family not in FAMILIES or not member:
        return None
    modname, _, fname = FAMILIES[family].partition(":")
    cls = getattr(importlib.import_module(modname), fname)(member)
    if not (inspect.isclass(cls) and issubclass(cls, Environment)):
        raise ConfigError(f"environment family '{family}' made no Environment for '{member}'")
    return cls


def load_env_class(spec: str) -> type[Environment]:
    """Resolve a spec to an Environment subclass; errors say which spec and what would work."""
    family_cls = _family_class(spec_for(spec))  # a short name seen in this process may stand for one
    if family_cls is not None:
        return family_cls
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
                hint=f"known: {', '.join(names())}; or module:Class; or ./file.py:Class",
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


def accepted_options(cls: type[Environment], options: dict[str, Any] | None) -> dict[str, Any]:
    """The run's environment options (``rollout.config.env_options``) that ``cls.__init__`` names: a run
    offers every environment the same settings (sandbox, scoring, judge, run id), each takes its own."""
    if not options:
        return {}
    params = inspect.signature(cls.__init__).parameters
    named = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in options.items() if k in named and k != "self"}


def load_env(spec: str, options: dict[str, Any] | None = None) -> Environment:
    cls = load_env_class(spec)
    return cls(**accepted_options(cls, options))
