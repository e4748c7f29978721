"""The Responses API's ``previous_response_id``, backed by the responses this proxy produced.

A client that chains turns by id sends only the new input; dropping the id would run the turn without its
history, a different conversation that still answers 200. So the proxy keeps what each stored response
consisted of (its input items, earlier turns included, and its output items) and prepends them when a
later request names it; an id it does not hold is a 400, as OpenAI answers it. The store is bounded (oldest
dropped first), so a long-lived server does not grow without limit.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from palaestra.wire.requests import InvalidRequest

Body = dict[str, Any]


def input_items(body: Body) -> list[Body]:
    """A request's ``input`` as a list of items (a plain string is one user message)."""
    items = body.get("input", [])
    if isinstance(items, str):
        return [{"type": "message", "role": "user", "content": items}]
    return list(items) if isinstance(items, list) else []


class ResponseStore:
    """Conversation items per response id, at most ``capacity`` responses."""

    def __init__(self, capacity: int = 1024) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, list[Body]] = OrderedDict()
        self._lock = threading.Lock()

    def resolve(self, body: Body) -> Body:
        """``body`` with the named previous response's items before its own input; unchanged without one.

        ``instructions`` are not carried over, as in OpenAI's API: each request states its own."""
        previous = body.get("previous_response_id")
        if previous is None:
            return body
        if not isinstance(previous, str):
            raise InvalidRequest("Invalid type for 'previous_response_id': expected a string.",
                                 param="previous_response_id", code="invalid_type")
        with self._lock:
            prior = self._items.get(previous)
            if prior is not None:
                self._items.move_to_end(previous)
        if prior is None:
            raise InvalidRequest(f"Previous response with id '{previous}' not found.",
                                 param="previous_response_id", code="previous_response_not_found")
        return {**body, "input": [*prior, *input_items(body)]}

    def remember(self, response_id: str, items: list[Body]) -> None:
        with self._lock:
            self._items[response_id] = items
            self._items.move_to_end(response_id)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


__all__ = ["ResponseStore", "input_items"]
