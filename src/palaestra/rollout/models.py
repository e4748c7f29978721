"""The run's models: each ``--model`` (or row/entry ``model``) spec becomes one proxied backend, built
once. A spec may name an entry of the run's ``models`` table, or be a router over such names."""

from __future__ import annotations

from collections.abc import Iterable

from palaestra.core.errors import ModelError
from palaestra.core.secrets import redact_url
from palaestra.models.base import ModelBackend
from palaestra.models.factory import make_backend, parse_model_spec
from palaestra.models.router import RouterBackend, RouteSpec, is_router, parse_route
from palaestra.rollout.config import RunConfig
from palaestra.server.continuation import with_continuation
from palaestra.server.model_proxy import ModelProxy


def needs_reference(spec: str) -> bool:
    """The scripted oracle plays the environment's reference, so its rollouts fetch it first."""
    return spec == "scripted" or spec.startswith("scripted:oracle")


class ModelPool:
    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self._backends: dict[str, ModelBackend] = {}
        self._proxies: dict[str, ModelProxy] = {}

    def resolve(self, spec: str) -> str:
        """A name from the ``models`` table → its spec; anything else is a spec already."""
        return self.cfg.models.get(spec, spec)

    def _backend(self, spec: str) -> ModelBackend:
        spec = self.resolve(spec)
        if spec not in self._backends:
            c = self.cfg
            # a backend that honours continuation ids continues every rollout's exact ids turn after turn
            self._backends[spec] = with_continuation(make_backend(
                spec, model_name=c.model_name, api_key_env=c.api_key_env, api_key_file=c.api_key_file,
                capture_tokens=c.capture_tokens, seed=c.seed or 0, max_concurrency=max(c.concurrency, 1)))
        return self._backends[spec]

    def route(self, spec: str) -> RouteSpec | None:
        return parse_route(spec, self.cfg.models) if is_router(spec) else None

    def proxy(self, spec: str) -> ModelProxy:
        """The proxy for a spec (a name, a spec, or a per-request router); built on first use."""
        if spec not in self._proxies:
            route = self.route(spec)
            backend: ModelBackend
            if route is None:
                backend = self._backend(spec)
            else:
                names = set(route.to) | set(route.tag_map.values()) | ({route.default} if route.default else set())
                backend = RouterBackend(route, {n: self._backend(n) for n in names})
            self._proxies[spec] = ModelProxy(backend)
        return self._proxies[spec]

    def prepare(self, specs: set[str]) -> None:
        """Build every backend up front, so a bad spec fails before the first rollout."""
        for spec in sorted(specs):
            route = self.route(spec)
            if route is not None and route.strategy == "cascade":
                for name in route.to:
                    self.proxy(name)
            else:
                self.proxy(spec)

    def leaves(self, specs: Iterable[str]) -> set[str]:
        """The model specs that ``specs`` call: a router's targets, each name resolved."""
        out: set[str] = set()
        for spec in specs:
            route = self.route(spec)
            names = [spec] if route is None else \
                [*route.to, *route.tag_map.values(), *([route.default] if route.default else [])]
            out.update(self.resolve(name) for name in names)
        return out

    async def aclose(self) -> None:
        for backend in self._backends.values():
            await backend.aclose()


def http_urls(spec: str) -> list[str]:
    """The base URLs a model spec sends its requests to (an endpoint pool has several); none for a model
    that runs here (``scripted``, ``local``) or a plugin's."""
    parsed = parse_model_spec(spec)
    if parsed.kind not in ("openai", "responses"):
        return []
    from palaestra.models.endpoints import split_urls  # with aiohttp: only a run with an HTTP model needs it

    return split_urls(parsed.name or "")


async def refuse_unreachable(cfg: RunConfig, specs: Iterable[str]) -> None:
    """Refuse the run (``ModelError``) when a model it calls has no server a connection reaches
    (``models.reach`` says why that is asked up front, and what is not taken for an answer). An endpoint
    pool is down only when every one of its URLs is."""
    pool = ModelPool(cfg)
    groups = [urls for spec in sorted(pool.leaves(specs)) if (urls := http_urls(spec))]
    if not groups:
        return
    from palaestra.models.reach import unreachable

    bad = await unreachable(url for urls in groups for url in urls)
    dead = {url: bad[url] for urls in groups if all(u in bad for u in urls) for url in urls}
    if dead:
        shown = "; ".join(f"{redact_url(url)} ({why})" for url, why in dead.items())
        raise ModelError(
            f"cannot reach the model server at {shown}: nothing was started",
            hint="start the model server (or wait until it listens) and run the same command again, or fix "
                 "--model / the run's models table")
