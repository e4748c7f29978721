"""A minimal ASGI app with OpenEnv's health route, to test starting and stopping a server process."""

from fastapi import FastAPI

app = FastAPI()


@app.get("/health")
def health() -> dict[str, str]:
    return {"status": "healthy"}
