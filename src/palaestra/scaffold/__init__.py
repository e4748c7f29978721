"""``palaestra env new NAME``: write a starter environment package that passes ``env check`` as generated.

The package holds ``env.py`` (a working stateful example: two tools and a verifier with a reference),
``data/examples.jsonl`` (tasks with their references), ``README.md`` (what it measures, the task fields,
the reward) and ``tests/test_<name>.py``. An existing file is never overwritten.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from string import Template

from palaestra.core.errors import ConfigError

_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")


def class_name(name: str) -> str:
    """``my-env`` / ``my_env`` → ``MyEnv``."""
    return "".join(part.capitalize() for part in re.split(r"[-_]+", name) if part) or "Env"


def package_name(name: str) -> str:
    return name.replace("-", "_")


def new_env(name: str, directory: str | Path | None = None) -> list[Path]:
    """Write the package for environment ``name`` into ``directory`` (default ``./<package name>``);
    returns the files written. Refuses a bad name or a directory that already holds any of them."""
    from palaestra.scaffold.templates import ENV_PY, EXAMPLES, INIT_PY, README, TEST_PY

    if not _NAME.match(name):
        raise ConfigError(f"environment name '{name}' is not valid",
                          hint="use lowercase letters, digits, '-' or '_', starting with a letter (e.g. my-env)")
    pkg = package_name(name)
    root = Path(directory) if directory is not None else Path(pkg)
    values = {"name": name, "cls": class_name(name), "pkg": pkg, "dir": root.as_posix().rstrip("/")}
    files = {
        root / "__init__.py": INIT_PY,
        root / "env.py": ENV_PY,
        root / "README.md": README,
        root / "tests" / f"test_{pkg}.py": TEST_PY,
        root / "data" / "examples.jsonl": "".join(json.dumps(row) + "\n" for row in EXAMPLES),
    }
    existing = [str(p) for p in files if p.exists()]
    if existing:
        raise ConfigError(f"not overwriting existing files: {', '.join(existing)}",
                          hint="choose another --dir or remove them")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template(text).safe_substitute(values), encoding="utf-8")
    return list(files)
