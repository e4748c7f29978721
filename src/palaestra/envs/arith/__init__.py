"""Short additions for training on a CPU (``arith``: single turn; ``arith_tools``: call ``add``, then answer).

The classes live in ``palaestra.train.arith_env`` (the GRPO and TRL examples' environments); this package
only gives them registered names, so a task row or a trainer says ``arith_tools`` instead of a
``module:Class`` path. Discovered by palaestra.envs.registry; importing it must stay cheap.
"""

ENVIRONMENTS = {
    "arith": "palaestra.train.arith_env:Arith",
    "arith_tools": "palaestra.train.arith_env:ArithTools",
}
