"""The HTML shell shared by the static report and the live viewer: inline CSS and script, embedded data.

The page must open offline from a file, so nothing is fetched: the stylesheet and the script are inlined
and the data rides in a ``<script type="application/json">`` block. Model output is untrusted, so the data
is JSON with ``<``, ``>`` and ``&`` escaped (no ``</script>`` can end the block early), and a
Content-Security-Policy allows only this page's own script, by hash: even markup that slipped through could
not run code or load anything from the network.
"""

from __future__ import annotations

import base64
import hashlib
from functools import cache
from importlib import resources
from typing import Any

import orjson

from palaestra.report.charts import esc

__all__ = ["asset", "csp", "dumps", "embed_json", "render_page", "render_static_page", "viewer_script"]


@cache
def asset(name: str) -> str:
    """A file of ``palaestra/report/assets`` as text (packaged with the wheel as package data)."""
    return resources.files("palaestra.report").joinpath("assets").joinpath(name).read_text(encoding="utf-8")


def viewer_script() -> str:
    return asset("viewer.js")


def dumps(data: Any, option: int = 0) -> bytes:
    """``orjson.dumps``, writing keys that are not strings as strings. orjson's option for them
    (``OPT_NON_STR_KEYS``) slows every dump, by half for a transcript (4 µs of 9), and the data of a
    report almost never holds such a key: the option is used only when the plain dump refuses one."""
    try:
        return orjson.dumps(data, option=option)
    except TypeError:  # orjson.JSONEncodeError: a key that is not a string, or a value JSON cannot hold
        return orjson.dumps(data, option=option | orjson.OPT_NON_STR_KEYS)


def embed_json(data: Any) -> bytes:
    """JSON safe inside a script element, as UTF-8: ``JSON.parse`` reads the escapes back as the same
    characters. Escaped in the encoded bytes, never decoded: these three bytes are never part of a longer
    UTF-8 sequence, and a report's data (megabytes of transcripts) would otherwise be decoded, copied
    three times by ``str.replace`` and encoded again, slowly once one character of it is not ASCII."""
    raw = dumps(data, orjson.OPT_SERIALIZE_NUMPY)
    return raw.replace(b"<", b"\\u003c").replace(b">", b"\\u003e").replace(b"&", b"\\u0026")


def csp(scripts: list[str], *, connect_self: bool = False) -> str:
    """A policy that runs only the given inline scripts (by sha256) and loads nothing from elsewhere."""
    hashes = " ".join(
        f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'" for s in scripts)
    script_src = hashes or "'none'"
    connect = "'self'" if connect_self else "'none'"
    return (f"default-src 'none'; script-src {script_src}; style-src 'unsafe-inline'; img-src data:; "
            f"connect-src {connect}; base-uri 'none'; form-action 'none'")


_VIEWER = """
<section id="rollouts">
<h2>Rollouts</h2>
<div class="filters">
  <label>task <select id="f-task"><option value="">all tasks</option></select></label>
  <label>outcome <select id="f-outcome"><option value="all">any outcome</option></select></label>
  <label>reward ≥ <input id="f-min" type="number" step="0.1"></label>
  <label>≤ <input id="f-max" type="number" step="0.1"></label>
  <label><input id="f-effective" type="checkbox"> counted attempts only</label>
  <button id="f-reset" type="button">reset</button>
</div>
<div class="viewer">
  <div class="list">
    <table id="rows"><thead><tr><th>#</th><th>task</th><th>rep</th><th>att</th><th>outcome</th><th>reward</th>
    <th>steps</th><th>tokens</th><th>time</th></tr></thead><tbody></tbody></table>
    <div class="pager"><button id="prev" type="button">‹ prev</button><button id="next" type="button">next ›</button>
    <span id="page-info"></span></div>
  </div>
  <div class="detail" id="detail"><div class="empty">Click a rollout to see its transcript, tool calls,
  timings, verdict and tokens.</div></div>
</div>
</section>"""


def render_page(*, title: str, overview_html: str, data: dict[str, Any], live: bool = False,
                extra_sections: str = "") -> bytes:
    """The whole document, as UTF-8 (its data is encoded once, never as text: ``embed_json``).
    ``overview_html`` must already be escaped (``overview.py`` builds it so)."""
    script = viewer_script()
    policy = csp([script], connect_self=live)
    status = '<span class="status" id="live-status">live</span>' if live else \
        '<span class="status">static report · opens offline</span>'
    head = f"""{_head(title, policy)}<body data-mode="{'live' if live else 'static'}">
<header><h1>{esc(title)}</h1><a href="#overview">overview</a><a href="#rollouts">rollouts</a>{status}</header>
<main>
<section id="overview">{overview_html}</section>
{extra_sections}{_VIEWER}
</main>
<script type="application/json" id="palaestra-data">"""
    return b"".join((head.encode(), embed_json(data), f"""</script>
<script>{script}</script>
</body></html>
""".encode()))


def _head(title: str, policy: str) -> str:
    """The document head both pages share; only their Content-Security-Policy differs."""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{esc(policy)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title>
<style>{asset("report.css")}</style>
</head>"""


def render_static_page(*, title: str, body_html: str) -> str:
    """A page with no script at all (the comparison page): same styles, nothing can run."""
    policy = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
    return f"""{_head(title, policy)}<body><header><h1>{esc(title)}</h1></header><main>{body_html}</main></body></html>
"""
