"""Scale-out runs: the Ray collector (``driver``), its rollout workers and the actors' fleet, and Slurm
batch scripts that start a cluster. The environment replicas themselves are a placement
(``placement/ray.py``). Nothing here imports Ray at module import time, so the single-process path never
pays for it and Palaestra works without the ``[ray]`` extra."""
