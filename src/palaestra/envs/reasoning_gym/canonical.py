"""Canonical reasoning-gym entries: the same (dataset, seed, size, config, index) gives the same entry in every
process, whatever that process's string-hash seed.

Some of reasoning-gym's generators draw from ``list(a_set_of_letters)`` (``isomorphic_strings``,
``ransom_note``) or sympy structures whose order follows ``hash(str)`` (``polynomial_multiplication``), so
the library's own output changes with ``PYTHONHASHSEED``: a row generated in one process is a different
question in the next. The canonical entry is defined as the one generated with hash randomization off
(``PYTHONHASHSEED=0``). The process-wide ``random`` and
``numpy.random`` are seeded from the recipe before each entry, since some generators draw from them.
A process already running with hash seed 0 generates in-process; any other process hands
generation and scoring to one long-lived worker child started with ``PYTHONHASHSEED=0`` (the environment
of a child process, not a setting this library reads), spoken to over pickled frames on its stdin/stdout.
Scoring runs next to generation, so a scorer sees exactly the objects the generator made.
"""

from __future__ import annotations

import os
import pickle
import random
import struct
import subprocess
import sys
import threading
import weakref
import zlib
from collections import OrderedDict
from typing import IO, Any

from palaestra.core.errors import InvalidTask, VerifierError

_CACHE_SIZE = 64


class CreateError(Exception):
    """reasoning-gym refused to create the dataset (unknown name, bad config)."""


class ScoreError(Exception):
    """The dataset's scorer raised on an answer (a wrong answer, not an outage)."""


def dataset_config(name: str, config: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments for ``create_dataset``: ``composite``'s ``datasets`` entries become the
    library's ``DatasetSpec`` objects (a JSON row can only hold them as objects ``{name, weight, config}``)."""
    if name != "composite" or "datasets" not in config:
        return dict(config)
    from reasoning_gym.composite import DatasetSpec

    specs = []
    for spec in config["datasets"]:
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise CreateError("composite: each of config.datasets needs a name, e.g. "
                              '{"name": "chain_sum", "weight": 1, "config": {}}')
        specs.append(DatasetSpec(name=spec["name"], weight=float(spec.get("weight", 1.0)),
                                 config=dict(spec.get("config") or {})))
    return {**config, "datasets": specs}


def seed_globals(*parts: Any) -> None:
    """Seed the process-wide ``random`` and ``numpy.random`` from the recipe: some generators (``codeio``'s
    sampled programs) draw from them instead of the dataset's own seeded ``Random``."""
    value = zlib.crc32(repr(parts).encode())
    random.seed(value)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(value)


class Generator:
    """Datasets created in this process, cached by recipe (generation is deterministic in the recipe)."""

    def __init__(self) -> None:
        self._datasets: OrderedDict[str, Any] = OrderedDict()

    def dataset(self, name: str, seed: int, size: int, config: dict[str, Any]) -> Any:
        key = pickle.dumps((name, seed, size, sorted(config.items(), key=lambda kv: kv[0])))
        cache_key = key.hex()
        if cache_key in self._datasets:
            self._datasets.move_to_end(cache_key)
            return self._datasets[cache_key]
        import reasoning_gym

        seed_globals(name, seed, size)
        try:
            ds = reasoning_gym.create_dataset(name, size=size, seed=seed, **dataset_config(name, config))
        except CreateError:
            raise
        except Exception as exc:
            raise CreateError(f"{type(exc).__name__}: {exc}") from None
        self._datasets[cache_key] = ds
        while len(self._datasets) > _CACHE_SIZE:
            self._datasets.popitem(last=False)
        return ds

    def entry(self, name: str, seed: int, size: int, config: dict[str, Any], index: int) -> dict[str, Any]:
        ds = self.dataset(name, seed, size, config)
        seed_globals(name, seed, index)
        try:
            return dict(ds[index])
        except Exception as exc:
            raise CreateError(f"generating entry {index}: {type(exc).__name__}: {exc}") from None

    def score(self, name: str, seed: int, size: int, config: dict[str, Any], index: int, answer: str) -> float:
        ds = self.dataset(name, seed, size, config)
        seed_globals(name, seed, index)
        item = ds[index]
        try:
            return float(ds.score_answer(answer, item))
        except Exception as exc:
            raise ScoreError(f"{type(exc).__name__}: {exc}"[:300]) from None


def _write(stream: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack(">Q", len(data)) + data)
    stream.flush()


def _read(stream: IO[bytes]) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError("closed")
    (length,) = struct.unpack(">Q", head)
    data = stream.read(length)
    if len(data) < length:
        raise EOFError("truncated")
    return pickle.loads(data)  # frames come from our own child process only


def _serve() -> None:
    """The worker child: answer (op, args) frames until stdin closes. Library prints go to stderr."""
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr
    gen = Generator()
    while True:
        try:
            op, args = _read(inp)
        except EOFError:
            return
        try:
            _write(out, ("ok", getattr(gen, op)(*args)))
        except CreateError as exc:
            _write(out, ("create", str(exc)))
        except ScoreError as exc:
            _write(out, ("score", str(exc)))
        except Exception as exc:  # anything else is the worker's own fault
            _write(out, ("error", f"{type(exc).__name__}: {exc}"[:500]))


class Worker:
    """A ``PYTHONHASHSEED=0`` child running :class:`Generator`; restarted when it dies; one call at a time."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        # the parent's import path, so the child finds palaestra and reasoning-gym however the parent did
        code = (f"import sys; sys.path[:0] = {[p for p in sys.path if p]!r}; "
                "from palaestra.envs.reasoning_gym.canonical import _serve; _serve()")
        proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                env=env)
        weakref.finalize(self, _stop, proc)
        return proc

    def call(self, op: str, *args: Any) -> Any:
        with self._lock:
            for attempt in (0, 1):
                if self._proc is None or self._proc.poll() is not None:
                    self._proc = self._start()
                assert self._proc.stdin is not None and self._proc.stdout is not None
                try:
                    _write(self._proc.stdin, (op, args))
                    status, value = _read(self._proc.stdout)
                    break
                except (EOFError, BrokenPipeError, OSError) as exc:
                    _stop(self._proc)
                    self._proc = None
                    if attempt:
                        raise VerifierError(f"the reasoning-gym worker process died ({exc})") from None
        if status == "ok":
            return value
        if status == "create":
            raise CreateError(value)
        if status == "score":
            raise ScoreError(value)
        raise VerifierError(f"the reasoning-gym worker failed: {value}")

    def close(self) -> None:
        with self._lock:
            if self._proc is not None:
                _stop(self._proc)
                self._proc = None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()


def hash_seed_is_zero() -> bool:
    """True when this process hashes strings as ``PYTHONHASHSEED=0`` does (randomization off)."""
    return not sys.flags.hash_randomization


class Canonical:
    """Entries and scores as the canonical (hash seed 0) process gives them: in-process when this process
    is one, else through a :class:`Worker`."""

    def __init__(self) -> None:
        self._local = Generator() if hash_seed_is_zero() else None
        self._worker = None if self._local is not None else Worker()
        self._lock = threading.Lock()  # seeding the global generators and drawing from them is one step

    def _call(self, op: str, *args: Any) -> Any:
        if self._local is not None:
            with self._lock:
                return getattr(self._local, op)(*args)
        assert self._worker is not None
        return self._worker.call(op, *args)

    def entry(self, name: str, seed: int, size: int, config: dict[str, Any], index: int) -> dict[str, Any]:
        try:
            result: dict[str, Any] = self._call("entry", name, seed, size, config, index)
        except CreateError as exc:
            raise InvalidTask(f"reasoning-gym cannot create dataset {name!r} with config {config}: {exc}",
                              hint="check the dataset name (reasoning_gym.factory.DATASETS) and its config "
                                   "fields; composite needs config.datasets") from None
        return result

    def score(self, name: str, seed: int, size: int, config: dict[str, Any], index: int, answer: str) -> float:
        """The dataset's score; raises :class:`ScoreError` when its scorer raised on the answer."""
        return float(self._call("score", name, seed, size, config, index, answer))

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
