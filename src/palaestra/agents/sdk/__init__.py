"""Agent SDKs as in-process harnesses (openai-agents, smolagents, strands-agents): each SDK's own loop,
pointed at the rollout's model on a loopback endpoint, with the environment's tools as SDK tools. The SDK
packages are imported only when a run uses them (the ``[sdk]`` extra installs them)."""

from __future__ import annotations

from palaestra.agents.sdk.base import SDKAgent, SDKRun, factory
from palaestra.agents.sdk.oai_agents import OpenAIAgentsAgent
from palaestra.agents.sdk.smol import SmolagentsAgent
from palaestra.agents.sdk.strands_sdk import StrandsAgent

SDK_AGENTS: dict[str, type[SDKAgent]] = {
    OpenAIAgentsAgent.name: OpenAIAgentsAgent,
    SmolagentsAgent.name: SmolagentsAgent,
    StrandsAgent.name: StrandsAgent,
}

openai_agents_agent = factory(OpenAIAgentsAgent)
smolagents_agent = factory(SmolagentsAgent)
strands_agent = factory(StrandsAgent)

__all__ = ["SDK_AGENTS", "OpenAIAgentsAgent", "SDKAgent", "SDKRun", "SmolagentsAgent", "StrandsAgent",
           "openai_agents_agent", "smolagents_agent", "strands_agent"]
