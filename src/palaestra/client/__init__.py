"""Clients of the role servers: ``EnvClient`` (one class for every placement; the transport decides how
a call travels) and the byte-level HTTP transports it and the other clients use."""
