"""The checks of one encoder/decoder stack of a model config: each registered method's settings
(``synattn.methods``: its values, where it may go, the heads it claims), for each stack.

A mixin of :class:`synattn.models.config.ModelConfig`, which calls :meth:`StackChecks._validate_stack`
for each of its stacks; errors are :class:`synattn.errors.ConfigError` naming both sides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from synattn.config_bounds import MAX_LAYERS, at_most
from synattn.errors import ConfigError
from synattn.methods import check_claims, methods

if TYPE_CHECKING:
    from synattn.models.config import StackConfig


class StackChecks:
    """The per-stack checks of a model config (needs ``heads``, ``num_pos_tags``, ``num_deprels``,
    ``model_type`` and ``has_cross_attention``)."""

    def _validate_stack(self, side: str, stack: StackConfig) -> None:
        if stack.layers < 1:
            raise ConfigError(f"{side}.layers={stack.layers} must be at least 1")
        at_most(f"{side}.layers", stack.layers, MAX_LAYERS)
        registry = methods()
        for method in registry:
            if method.active(stack) and not method.allowed(self, side):
                raise ConfigError(method.misplaced(self, side, stack))
            method.validate(self, side, stack)
        check_claims(self, side, stack, registry)
