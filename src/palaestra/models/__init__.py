"""Model backends: OpenAI-compatible HTTP, scripted policies, local weights."""
