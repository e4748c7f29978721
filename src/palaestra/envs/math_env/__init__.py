"""Maths environment (registered as ``math``; the package is ``math_env`` so it never shadows the
standard library's ``math``)."""

from palaestra.envs.math_env.env import MathEnv

__all__ = ["MathEnv"]
