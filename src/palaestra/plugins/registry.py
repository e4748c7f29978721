"""One registry for every kind of plugin: environments, agents, sandbox providers, model backends and
exporters.

Each group has built-ins, declared by the subsystem that owns them (``envs/registry.py``,
``agents/registry.py``, ``sandbox/providers.py``, ``models/factory.py``, ``report/exporters.py``) as
``name → "module:attr"`` strings, so naming a plugin imports nothing until it is used. A third-party
package adds a plugin by being installed: it declares an entry point in one of the groups below, e.g. in
its ``pyproject.toml``::

    [project.entry-points."palaestra.environments"]
    counter = "my_pkg.env:CounterEnv"

Entry points are read once per process, and only when a name is not a built-in or when someone lists the
plugins: the common path (``--env mcqa``) never scans the installed distributions, which keeps the CLI's
start-up fast. A built-in wins over an entry point of the same name (the entry point is listed as shadowed),
so installing a package never silently changes what ``mcqa`` means.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from palaestra.core.errors import ConfigError

__all__ = ["BUILTIN", "GROUPS", "Plugin", "PluginRegistry", "all_registries", "registry"]

# Short group name → entry-point group.
GROUPS: dict[str, str] = {
    "environments": "palaestra.environments",
    "agents": "palaestra.agents",
    "sandboxes": "palaestra.sandboxes",
    "models": "palaestra.models",
    "exporters": "palaestra.exporters",
}
# The module that declares each group's built-ins (imported on first use of the group).
_DECLARED_IN: dict[str, str] = {
    "environments": "palaestra.envs.registry",
    "agents": "palaestra.agents.registry",
    "sandboxes": "palaestra.sandbox.providers",
    "models": "palaestra.models.factory",
    "exporters": "palaestra.report.exporters",
}
# What one plugin of a group is called in messages.
_NOUN: dict[str, str] = {"environments": "environment", "agents": "agent", "sandboxes": "sandbox provider",
                         "models": "model backend", "exporters": "exporter"}
BUILTIN = "built-in"


@dataclass
class Plugin:
    """One named plugin and where it came from. ``target`` is ``module:attr`` (what a child process or a
    Ray worker can import again); ``origin`` is ``built-in``, ``registered`` (added at run time) or the
    distribution that declared the entry point."""

    group: str
    name: str
    target: str
    origin: str = BUILTIN
    distribution: str | None = None
    version: str | None = None
    shadowed_by: str | None = None  # set when another plugin of the same name wins
    _obj: Any = field(default=None, repr=False)
    _loaded: bool = field(default=False, repr=False)

    @property
    def source(self) -> str:
        """``built-in`` or ``DIST VERSION``, as ``palaestra plugins`` prints it."""
        if self.distribution:
            return f"{self.distribution} {self.version or ''}".strip()
        return self.origin

    def load(self) -> Any:
        """Import the target (once). An import failure is a ConfigError naming the plugin and its origin."""
        if self._loaded:
            return self._obj
        module_name, _, attr = self.target.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split(".") if attr else ():
                obj = getattr(obj, part)
        except Exception as exc:
            raise ConfigError(
                f"{_NOUN[self.group]} plugin '{self.name}' ({self.target}, from {self.source}) failed to load: "
                f"{type(exc).__name__}: {exc}",
                hint="reinstall the package that provides it, or check its entry point",
            ) from exc
        self._obj, self._loaded = obj, True
        return obj

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "name": self.name, "target": self.target, "origin": self.origin,
                "distribution": self.distribution, "version": self.version, "shadowed_by": self.shadowed_by}


BuiltinTable = Mapping[str, "str | object"]


class PluginRegistry:
    """The plugins of one group. Lookup order: built-ins, then plugins registered at run time, then
    entry points of installed distributions."""

    def __init__(self, group: str) -> None:
        if group not in GROUPS:
            raise ValueError(f"unknown plugin group {group!r}; groups: {', '.join(GROUPS)}")
        self.group = group
        self.noun = _NOUN[group]
        self._builtin_sources: list[Callable[[], BuiltinTable]] = []
        self._builtins: dict[str, Plugin] | None = None
        self._registered: dict[str, Plugin] = {}
        self._lock = threading.RLock()

    # ---- declaring -----------------------------------------------------------------------------
    def add_builtins(self, table: BuiltinTable | Callable[[], BuiltinTable]) -> None:
        """Declare built-ins: a table, or a function returning one (called on first lookup)."""
        with self._lock:
            self._builtin_sources.append(table if callable(table) else (lambda: table))
            self._builtins = None

    def register(self, name: str, target: str | object, *, origin: str = "registered") -> Plugin:
        """Add a plugin at run time (a test, a notebook); a built-in of the same name still wins."""
        plugin = _make(self.group, name, target, origin)
        with self._lock:
            self._registered[name] = plugin
        return plugin

    def unregister(self, name: str) -> None:
        with self._lock:
            self._registered.pop(name, None)

    # ---- looking up ----------------------------------------------------------------------------
    def builtins(self) -> dict[str, Plugin]:
        with self._lock:
            if self._builtins is None:
                found: dict[str, Plugin] = {}
                for source in self._builtin_sources:
                    for name, target in source().items():
                        found[name] = _make(self.group, name, target, BUILTIN)
                self._builtins = found
            return self._builtins

    def get(self, name: str) -> Plugin | None:
        """The plugin called ``name``, or None. Entry points are scanned only when no built-in or
        registered plugin has the name."""
        plugin = self.builtins().get(name) or self._registered.get(name)
        if plugin is not None:
            return plugin
        return next((p for p in _entry_points(self.group) if p.name == name and p.shadowed_by is None), None)

    def load(self, name: str) -> Any:
        """The loaded object of ``name``; a ConfigError listing the known names when there is none."""
        plugin = self.get(name)
        if plugin is None:
            raise ConfigError(f"unknown {self.noun} '{name}'", hint=f"known: {', '.join(self.names()) or '(none)'}"
                              f"; a package adds one with an entry point in group {GROUPS[self.group]}")
        return plugin.load()

    def names(self) -> list[str]:
        return sorted(p.name for p in self.plugins() if p.shadowed_by is None)

    def plugins(self) -> list[Plugin]:
        """Every plugin of the group, the shadowed ones included (marked), built-ins first."""
        winners: dict[str, Plugin] = dict(self.builtins())
        for name, plugin in self._registered.items():
            winners.setdefault(name, plugin)
        out = list(winners.values())
        for plugin in _entry_points(self.group):
            if plugin.name in winners:
                out.append(_shadow(plugin, winners[plugin.name].source))
            else:
                out.append(plugin)
                winners[plugin.name] = plugin
        return out


def _make(group: str, name: str, target: str | object, origin: str) -> Plugin:
    if isinstance(target, str):
        return Plugin(group, name, target, origin)
    mod, qual = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    label = f"{mod}:{qual}" if mod and qual else repr(target)
    return Plugin(group, name, label, origin, _obj=target, _loaded=True)


def _shadow(plugin: Plugin, by: str) -> Plugin:
    return Plugin(plugin.group, plugin.name, plugin.target, plugin.origin, plugin.distribution,
                  plugin.version, shadowed_by=by)


# ---- entry points (read once per process, lazily) -----------------------------------------------
_EP_LOCK = threading.Lock()
_EP_CACHE: dict[str, list[Plugin]] | None = None


def _entry_points(group: str) -> list[Plugin]:
    global _EP_CACHE
    with _EP_LOCK:
        if _EP_CACHE is None:
            _EP_CACHE = _scan()
        return _EP_CACHE.get(group, [])


def _scan() -> dict[str, list[Plugin]]:
    """One pass over the installed distributions for all groups. Within a group, the first distribution
    (by name) to declare a name wins; later ones are kept, marked as shadowed."""
    from importlib.metadata import entry_points

    by_ep = {ep_group: short for short, ep_group in GROUPS.items()}
    found: dict[str, list[Plugin]] = {short: [] for short in GROUPS}
    seen: set[tuple[str, str, str]] = set()
    everything = entry_points()
    for ep_group, short in by_ep.items():
        rows: list[Plugin] = []
        for ep in everything.select(group=ep_group):
            dist = getattr(ep, "dist", None)
            dist_name = _dist_name(dist)
            key = (ep.name, ep.value, dist_name or "")
            if key in seen:  # the same distribution seen twice on sys.path (e.g. an editable install)
                continue
            seen.add(key)
            rows.append(Plugin(short, ep.name, ep.value, dist_name or "entry point", dist_name,
                               getattr(dist, "version", None)))
        rows.sort(key=lambda p: (p.name, p.distribution or ""))
        first: dict[str, str] = {}
        for i, plugin in enumerate(rows):
            if plugin.name in first:
                rows[i] = _shadow(plugin, first[plugin.name])
            else:
                first[plugin.name] = plugin.source
        found[short] = rows
    return found


def _dist_name(dist: Any) -> str | None:
    if dist is None:
        return None
    name = getattr(dist, "name", None)
    if not name:
        try:
            name = dist.metadata["Name"]
        except Exception:
            return None
    return str(name)


def rescan() -> None:
    """Forget the entry points read so far (after installing a package into the running process)."""
    global _EP_CACHE
    with _EP_LOCK:
        _EP_CACHE = None


# ---- the registries ---------------------------------------------------------------------------
_REGISTRIES: dict[str, PluginRegistry] = {}
_REG_LOCK = threading.Lock()


def registry(group: str, *, declare: bool = True) -> PluginRegistry:
    """The registry of ``group`` (one per process). With ``declare``, the module that declares the
    group's built-ins is imported first, so a lookup here sees them even if nothing else imported it."""
    with _REG_LOCK:
        reg = _REGISTRIES.get(group)
        if reg is None:
            reg = _REGISTRIES[group] = PluginRegistry(group)
    if declare:
        importlib.import_module(_DECLARED_IN[group])
    return reg


def all_registries(groups: Iterable[str] | None = None) -> list[PluginRegistry]:
    return [registry(g) for g in (groups or GROUPS)]
