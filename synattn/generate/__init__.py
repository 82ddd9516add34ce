"""Greedy and beam search over models that decode incrementally with a key/value cache."""

from synattn.generate.beam import beam_search
from synattn.generate.greedy import greedy_search
from synattn.generate.output import Generation

__all__ = ["Generation", "beam_search", "greedy_search"]
