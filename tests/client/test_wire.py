"""The wire models are the wire: what a real environment server answers validates against them, the
error envelope is the codec's, and the OpenAPI document exports every one of them."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson

from palaestra.core.records import Verdict
from palaestra.envs.registry import load_env
from palaestra.server.env_app import create_env_app
from palaestra.wire.env import MODELS, SessionHandle, ToolResult
from palaestra.wire.errors import ErrorEnvelope, exception_for

SPEC = f"{Path(__file__).with_name('faulty_env.py').resolve()}:FaultyEnv"
TASK = {"id": "t1", "env": "faulty", "input": "count to 2", "metadata": {"target": 2}}


async def test_server_answers_are_the_wire_models() -> None:
    app = create_env_app(load_env(SPEC))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
        opened = SessionHandle.model_validate((await http.post("/sessions", json={"task": TASK})).json())
        sid = opened.session_id
        assert [t["function"]["name"] for t in opened.tools] == ["add"]
        done = ToolResult.model_validate((await http.post(f"/sessions/{sid}/tools/add", json={"amount": 2})).json())
        assert done.output == "counter is now 2" and done.error is None
        verdict = Verdict.model_validate((await http.post(f"/sessions/{sid}/verify",
                                                          json={"trajectory": {"final_answer": "2"}})).json())
        assert verdict.reward == 1.0

        missing = await http.post("/sessions/nope/verify", json={})
        envelope = ErrorEnvelope.model_validate(missing.json())
        assert missing.status_code == 404 and envelope.error.kind == "unknown_session"
        assert exception_for(envelope.error.model_dump(), missing.status_code).kind == "environment"
        bad = await http.post(f"/sessions/{sid}/tools/add", content=b"[1]")
        assert bad.status_code == 422 and ErrorEnvelope.model_validate(bad.json()).error.kind == "bad_arguments"

        doc = orjson.loads((await http.get("/openapi.json")).content)
    assert set(MODELS) <= set(doc["components"]["schemas"])
    assert doc["components"]["schemas"]["SessionHandle"]["required"] == ["session_id"]
