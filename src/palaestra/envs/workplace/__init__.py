"""Stateful office environment (``workplace``): calendar, email and tickets in per-session SQLite."""

from palaestra.envs.workplace.env import Workplace

__all__ = ["Workplace"]
