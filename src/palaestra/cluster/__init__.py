"""Scale-out placement: rollouts and environment servers on a Ray cluster, and Slurm batch scripts that
start one. Nothing here imports Ray at module import time, so the single-process path never pays for it
and Palaestra works without the ``[ray]`` extra."""
