"""Multiple-choice question answering environment (``mcqa``)."""

from palaestra.envs.mcqa.env import MCQA

__all__ = ["MCQA"]
