"""Plugins: one registry (:mod:`palaestra.plugins.registry`) for environments, agents, sandbox
providers, model backends and exporters, found by name among the built-ins and the entry points of
installed packages; and one spec grammar (:mod:`palaestra.plugins.spec`), ``kind[:name][?opt=v&...]``,
for every string that names a plugin.

What a plugin of each group is (the entry point's target):

- ``palaestra.environments``: an :class:`~palaestra.core.environment.Environment` subclass.
- ``palaestra.agents``: a callable ``factory(max_steps=N) -> Agent`` (an Agent class works); one with a
  ``from_spec(spec, *, max_steps)`` attribute receives the whole parsed spec (``kind:name?options``).
- ``palaestra.sandboxes``: a :class:`~palaestra.sandbox.base.SandboxProvider` subclass.
- ``palaestra.models``: a callable ``factory(spec, **settings) -> ModelBackend``; ``spec`` is the parsed
  :class:`~palaestra.plugins.spec.Spec`, ``settings`` the run's model settings (accept ``**kwargs``).
- ``palaestra.exporters``: a callable ``export(run_dir, **options) -> str``; options come from the
  exporter spec (``mlflow?experiment=x``), typed by the callable's annotations.
"""

from palaestra.plugins.registry import GROUPS, Plugin, PluginRegistry
from palaestra.plugins.registry import registry as plugin_registry
from palaestra.plugins.spec import Spec, parse_spec

# ``plugin_registry``, not ``registry``: that name is the submodule (``palaestra.plugins.registry``).
__all__ = ["GROUPS", "Plugin", "PluginRegistry", "Spec", "parse_spec", "plugin_registry"]
