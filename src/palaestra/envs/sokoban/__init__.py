"""Sokoban puzzles played through a move tool (``sokoban``)."""

# Discovered by palaestra.envs.registry; importing this package must stay cheap (no env.py import).
ENVIRONMENTS = {"sokoban": "palaestra.envs.sokoban.env:Sokoban"}
