"""Transformer models built on ``synattn.attention``: translation, causal LM, masked LM.

Each model has one config dataclass (YAML load/save, strict validation) and saves/loads as
``config.json`` + ``model.safetensors``.
"""

from synattn.models.config import (
    BIRD_EYE,
    CROSS_ATTENTION,
    RELATIONS,
    EncoderDecoderConfig,
    LanguageModelConfig,
    MaskedLMConfig,
    ModelConfig,
    SpecializedHeadsConfig,
    StackConfig,
    SupervisedHeadConfig,
    SyntacticAttentionConfig,
)
from synattn.models.encoder_decoder import EncoderDecoderTransformer
from synattn.models.language_model import TransformerLM
from synattn.models.masked_lm import MaskedLM
from synattn.models.pretrained import PretrainedModel
from synattn.models.state import DecoderState, LayerCache, ModelOutput, StackExtras

__all__ = [
    "BIRD_EYE", "CROSS_ATTENTION", "RELATIONS", "DecoderState", "EncoderDecoderConfig", "EncoderDecoderTransformer",
    "LanguageModelConfig", "LayerCache", "MaskedLM", "MaskedLMConfig", "ModelConfig",
    "ModelOutput", "PretrainedModel", "SpecializedHeadsConfig", "StackConfig", "StackExtras",
    "SupervisedHeadConfig", "SyntacticAttentionConfig", "TransformerLM",
]
