"""Distributions over sequences given by a model: :class:`Autoregressive`
(:mod:`~synattn.structs.sequence.autoregressive`, torch-struct's wrapper of an autoregressive model)."""

from .autoregressive import Autoregressive

__all__ = ["Autoregressive"]
