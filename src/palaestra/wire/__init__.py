"""The wire layer: the bodies every role sends and answers (``env.py``: pydantic models, exported as
OpenAPI), the one error codec (``errors.py``: the envelope, its status, its failure kind) and the
translation between model API dialects (``translate.py``: what they share, ``responses.py``: OpenAI
Responses, ``anthropic.py``: Anthropic Messages). Shared by servers and clients; above ``core`` only."""
