"""The generation engine: one worker thread owns the model and batches every sequence in flight.

Callers (the backend, on the event loop) submit sequences and get ``concurrent.futures.Future`` objects,
which asyncio can await without blocking the loop. Between two decode steps the worker admits whatever
has arrived (continuous batching): new sequences are prefilled as a group and join the running batch,
finished or cancelled ones leave it. When idle, the worker waits after the first arrival until no new
request has come for a few milliseconds (at most 50 ms), so a burst of concurrent requests is
prefilled together.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from palaestra.models.local.batch import KVBatch
from palaestra.models.local.sampling import Choice, Row, choose

log = logging.getLogger(__name__)


class Constraint(Protocol):
    """A grammar that restricts the next token (see ``toolcalls.ToolCallConstraint``)."""

    def allowed(self) -> torch.Tensor | None: ...

    def consume(self, token: int) -> None: ...


@dataclass
class Params:
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    top_logprobs: int = 0


@dataclass
class Generation:
    """What the model produced for one sequence: every token it sampled (EOS included) with its logprob."""

    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]]
    finish_reason: str  # "stop" (EOS or a stop string) | "length"


@dataclass
class Loaded:
    """A model ready to run, with the facts the engine needs about it."""

    model: Any
    tokenizer: Any
    eos_ids: frozenset[int]
    max_positions: int
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Seq:
    prompt: list[int]
    params: Params
    future: Future[Generation]
    constraint: Constraint | None
    generator: torch.Generator = field(init=False)
    out: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    tops: list[list[tuple[int, float]]] = field(default_factory=list)
    finish: str | None = None

    def __post_init__(self) -> None:
        self.generator = torch.Generator().manual_seed(self.params.seed)


class Engine:
    """Owns the model in one thread. ``loaded`` resolves once the loader has run (or fails with its error)."""

    def __init__(self, loader: Callable[[], Loaded], *, max_batch: int = 32, max_prefill_tokens: int = 8192,
                 gather_s: float = 0.005, gather_max_s: float = 0.05) -> None:
        self._loader = loader
        self.max_batch = max_batch
        self.max_prefill_tokens = max_prefill_tokens
        self.gather_s = gather_s
        self.gather_max_s = gather_max_s
        self.loaded: Future[Loaded] = Future()
        self._queue: queue.Queue[_Seq | None] = queue.Queue()
        self._waiting: list[_Seq] = []
        self._active: list[_Seq] = []
        self._batch: KVBatch | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.steps = 0  # sampling rounds (a prefill or a decode step)
        self.tokens = 0  # tokens sampled
        self.joins = 0  # groups admitted while other rows were mid-generation

    def start(self) -> None:
        with self._lock:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="palaestra-local-engine", daemon=True)
                self._thread.start()

    def submit(self, prompt: list[int], params: Params, constraint: Constraint | None = None) -> Future[Generation]:
        if self._closed:
            raise RuntimeError("the local model engine is closed")
        self.start()
        future: Future[Generation] = Future()
        self._queue.put(_Seq(prompt, params, future, constraint))
        return future

    def close(self, timeout: float = 30.0) -> None:
        self._closed = True
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout)

    # ---- worker -------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            loaded = self._loader()
        except Exception as exc:
            self.loaded.set_exception(exc)
            self._drain_failing(exc)
            return
        self._batch = KVBatch(loaded.model)
        self.loaded.set_result(loaded)
        while True:
            if not self._collect(block=not self._active and not self._waiting):
                break
            try:
                self._admit(loaded)
                if self._active:
                    self._decode(loaded)
            except Exception as exc:  # a bug or out-of-memory: fail the batch, keep serving
                log.exception("local model step failed")
                for seq in self._active:
                    _settle(seq.future, exc)
                self._active = []
                self._batch = KVBatch(loaded.model)
        self._drain_failing(RuntimeError("the local model engine was closed"))

    def _collect(self, *, block: bool) -> bool:
        """Move arrivals into ``_waiting``; False once ``close`` was called."""
        try:
            item = self._queue.get() if block else self._queue.get_nowait()
        except queue.Empty:
            return True
        if item is None:
            return False
        self._waiting.append(item)
        if block:  # first arrival after idling: wait until the burst it belongs to has stopped arriving
            deadline = time.monotonic() + self.gather_max_s
            while (left := deadline - time.monotonic()) > 0:
                try:
                    item = self._queue.get(timeout=min(left, self.gather_s))
                except queue.Empty:
                    break
                if item is None:
                    return False
                self._waiting.append(item)
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return True
            if item is None:
                return False
            self._waiting.append(item)

    def _admit(self, loaded: Loaded) -> None:
        self._waiting = [s for s in self._waiting if not s.future.cancelled()]
        room = self.max_batch - len(self._active)
        group: list[_Seq] = []
        for seq in self._waiting[:max(room, 0)]:
            width = max([len(seq.prompt)] + [len(s.prompt) for s in group])
            if group and width * (len(group) + 1) > self.max_prefill_tokens:
                break
            group.append(seq)
        if not group:
            return
        self._waiting = self._waiting[len(group):]
        assert self._batch is not None
        logits, cache, mask = self._batch.prefill([s.prompt for s in group])
        self._sample(loaded, group, logits)
        self.joins += bool(self._active)
        self._batch.join(cache, mask, [len(s.prompt) for s in group])
        self._active += group
        self._reap()

    def _decode(self, loaded: Loaded) -> None:
        assert self._batch is not None
        logits = self._batch.step([s.out[-1] for s in self._active])
        self._sample(loaded, self._active, logits)
        self._reap()

    def _sample(self, loaded: Loaded, seqs: list[_Seq], logits: torch.Tensor) -> None:
        rows = [Row(s.params.temperature, s.params.top_p, s.generator,
                    s.constraint.allowed() if s.constraint else None, s.params.top_logprobs) for s in seqs]
        choices: list[Choice] = choose(logits, rows)
        self.steps += 1
        self.tokens += len(seqs)
        for seq, choice in zip(seqs, choices, strict=True):
            seq.out.append(choice.token)
            seq.logprobs.append(choice.logprob)
            seq.tops.append(choice.top)
            if seq.constraint is not None:
                seq.constraint.consume(choice.token)
            ended = choice.token in loaded.eos_ids and not seq.params.ignore_eos
            if ended or (seq.params.stop and _hits_stop(loaded.tokenizer, seq)):
                seq.finish = "stop"
            elif len(seq.out) >= seq.params.max_new_tokens:
                seq.finish = "length"

    def _reap(self) -> None:
        keep = []
        for row, seq in enumerate(self._active):
            if seq.future.cancelled():
                continue
            if seq.finish is not None:
                _settle(seq.future, Generation(seq.out, seq.logprobs, seq.tops, seq.finish))
                continue
            keep.append(row)
        assert self._batch is not None
        self._batch.keep(keep)
        self._active = [self._active[r] for r in keep]

    def _drain_failing(self, exc: BaseException) -> None:
        pending = self._waiting + self._active
        self._waiting, self._active = [], []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                pending.append(item)
        for seq in pending:
            _settle(seq.future, exc)


def _settle(future: Future[Generation], outcome: Generation | BaseException) -> None:
    """Resolve a future unless its caller already gave up on it (a cancel may race with the worker)."""
    try:
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
    except InvalidStateError:
        pass


def _hits_stop(tokenizer: Any, seq: _Seq) -> bool:
    """Whether the text's tail now contains a stop string: decoding only a window of recent tokens keeps
    this cheap (a stop string of k characters spans at most k tokens, plus one for a split character)."""
    window = max(len(s) for s in seq.params.stop) + 2
    tail = tokenizer.decode(seq.out[-window:], skip_special_tokens=True)
    return any(stop in tail for stop in seq.params.stop)
