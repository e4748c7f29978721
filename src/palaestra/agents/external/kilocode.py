"""KiloCode (npm ``@kilocode/cli``), over OpenAI Chat Completions.

Kilo's CLI is a fork of OpenCode: the same ``run`` command, JSON events and provider configuration,
with its variables named ``KILO_*`` (``KILO_CONFIG_CONTENT`` and the ``KILO_DISABLE_*`` switches), so
this adapter is OpenCode's with the names changed. 7.7.7 is pinned: 7.8.1's platform packages are not
published on npm.
"""

from __future__ import annotations

from palaestra.agents.external.opencode import OpenCodeAdapter


class KiloCodeAdapter(OpenCodeAdapter):
    name = "kilocode"
    executable = "kilo"
    install_paths = ("npm/node_modules/.bin/kilo",)
    package = "npm @kilocode/cli"
    npm_package = "@kilocode/cli"
    version = "7.7.7"
    env_prefix = "KILO"
    # Kilo's own additions: session ingest and presence (its telemetry) and codebase indexing.
    switches = (*OpenCodeAdapter.switches, "DISABLE_SESSION_INGEST", "DISABLE_PRESENCE", "DISABLE_CODEBASE_INDEXING")
