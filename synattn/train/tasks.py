"""Training tasks: what a batch asks of the data, and the loss a model gets on it.

A task is anything with ``syntax_request()`` and ``loss(model, batch) -> (loss, logs)``
(:class:`Task`). The loss is a scalar **summed** over the batch's ``sample_size`` predictions
(the trainer divides the gradients by the total ``sample_size`` of an update, over its
accumulated batches and all processes, as fairseq does). ``logs`` holds sums too, so that they
add up over batches and processes: ``loss``, ``nll_loss`` (plain negative log-likelihood),
``ntokens`` (predicted tokens), ``sample_size``, ``nsentences``, and ``aux/<name>`` for each
auxiliary loss of the model.

Models (``synattn.models`` or any module with the same call signature):

- translation: ``model(src, tgt_in, src_syntax=..., tgt_syntax=...)``
- language model: ``model(tokens, syntax=...)``;  masked LM: ``model(tokens, syntax=...)``

each returning an object with ``logits [batch_size, t, vocab]`` and optionally ``losses``
(auxiliary losses by name, already weighted, each a mean over its batch, e.g.
``encoder.3.parse``). The task adds ``sample_size × Σ aux`` to the summed token loss, so a
batch's normalised objective is ``token loss + Σ aux`` (docs/methods.md §2: label-smoothed CE +
λ_enc·CE_enc + λ_dec·CE_dec).
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from synattn.data.batching import Batch
from synattn.data.subwords import BOS, EOS
from synattn.methods import methods
from synattn.syntax.fields import syntax_field, syntax_fields
from synattn.syntax.inputs import IGNORE_INDEX
from synattn.syntax.request import SyntaxRequest

FIRST_REGULAR_ID = EOS + 1
"""The first id of an ordinary piece (ids below are ``<pad> <unk> <s> </s>``)."""


class Task(Protocol):
    """What the trainer needs from a task."""

    def syntax_request(self) -> SyntaxRequest:
        """The syntax fields the model needs in every batch."""

    def loss(self, model: nn.Module, batch: Batch) -> tuple[Tensor, dict[str, Tensor]]:
        """``(loss summed over the batch, logs of sums)`` (see the module docstring)."""


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """Label-smoothed cross-entropy, summed over the positions whose target is not ignored.

    The smoothed target puts ``1 − ε`` on the gold token and spreads ``ε`` uniformly over the
    whole vocabulary (Szegedy et al. 2016; ``F.cross_entropy(label_smoothing=ε)``), computed in
    float32 even under autocast.

    Args:
        logits: ``[..., vocab]``.
        target: ``[...]`` gold ids, ``IGNORE_INDEX`` (−100) where there is no target.
        epsilon: ε in ``[0, 1)``.

    Returns:
        ``(smoothed loss sum, nll sum)``, two scalars.
    """
    lprobs = F.log_softmax(logits.float(), dim=-1)  # [..., V]
    keep = target != IGNORE_INDEX
    nll = -lprobs.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # [...]
    smooth = -lprobs.mean(-1)  # [...]  ε/V · Σ_v −log p_v = ε · mean
    loss = (1.0 - epsilon) * nll + epsilon * smooth
    return loss.masked_fill(~keep, 0.0).sum(), nll.masked_fill(~keep, 0.0).sum()


def loss_and_logs(loss: Tensor, nll: Tensor, ntokens: Tensor, nsentences: int, output) -> tuple[Tensor, dict]:
    """Adds the model's auxiliary losses (batch means) to the summed token loss, and the logs."""
    aux = dict(getattr(output, "losses", None) or {})
    size = ntokens.to(loss.dtype)
    total = loss
    for value in aux.values():
        total = total + size * value.float()
    logs = {"loss": total.detach(), "task_loss": loss.detach(), "nll_loss": nll.detach(), "ntokens": size,
            "sample_size": size, "nsentences": torch.tensor(float(nsentences))}
    logs.update({f"aux/{name}": (size * value.detach().float()) for name, value in aux.items()})
    return total, logs


def syntax_request_for(config) -> SyntaxRequest:
    """The syntax fields a ``synattn.models`` config needs, per side.

    Encoder features read the source (``src``), decoder features of a translation model read the
    target (``tgt``); each registered method (``synattn.methods``) says what it reads
    (``Method.reads``), and each field which setting its labels depend on and its default
    (``SyntaxField.setting``/``default``, :mod:`synattn.syntax.fields`), read from the stack (the
    default where the stack has no such setting). A language model's decoder side
    is its input ``<s> x``, whose fields ``collate`` computes from the monolingual data's trees:
    only those a language model may read (``SyntaxField.language_model``: the BET(SG) hints).

    Raises:
        ValueError: two stacks use different values of a field's setting (``max_distance``: a
            batch has one), or a language model asks for decoder syntax it may not read.
    """
    sides = {"encoder": "src", "decoder": "tgt"}
    wanted: dict[str, set[str]] = {"src": set(), "tgt": set()}
    clips: dict[str, tuple[int, str]] = {}
    for name, stack in config.stacks().items():
        fields = wanted[sides[name]]
        for method in methods():
            fields |= method.reads(stack)
        for spec in syntax_fields():  # a field's setting (max_distance) has one value per batch
            clip = spec.setting
            if spec.name in fields and clip is not None and spec.default is not None:  # (set together)
                value = getattr(stack, clip, spec.default)
                if clip in clips and clips[clip][0] != value:
                    raise ValueError(f"{clips[clip][1]}.{clip}={clips[clip][0]} and {name}.{clip}={value} "
                                     f"differ, but a batch has one {clip}; use the same value")
                clips[clip] = (value, name)
    unsupported = {f for f in wanted["tgt"] if not syntax_field(f).language_model}
    if "encoder" not in config.stacks() and unsupported:  # a decoder-only model reads monolingual text
        allowed = ", ".join(f.name for f in syntax_fields() if f.language_model)
        raise ValueError(f"the language model's decoder asks for {', '.join(sorted(unsupported))}, but "
                         f"batches of monolingual text carry no decoder-side syntax other than {allowed}")
    return SyntaxRequest(src=frozenset(wanted["src"]), tgt=frozenset(wanted["tgt"]),
                         src_bos=bool(getattr(config, "src_bos", False)),
                         settings={clip: value for clip, (value, _) in clips.items()})


class TranslationTask:
    """Label-smoothed cross-entropy on ``batch.tgt_out`` plus every auxiliary loss of the model.

    Args:
        label_smoothing: ε.
        request: the syntax fields to put in batches (e.g. ``syntax_request_for(model.config)``).
    """

    def __init__(self, label_smoothing: float = 0.1, request: SyntaxRequest = SyntaxRequest()):
        self.label_smoothing = label_smoothing
        self.request = request

    def syntax_request(self) -> SyntaxRequest:
        return self.request

    def loss(self, model: nn.Module, batch: Batch) -> tuple[Tensor, dict[str, Tensor]]:
        if batch.tgt_in is None:
            raise ValueError("translation needs parallel data, but the batch has no target side")
        assert batch.tgt_out is not None and batch.tgt_padding is not None  # (set with tgt_in)
        out = model(batch.src, batch.tgt_in, src_syntax=batch.src_syntax, tgt_syntax=batch.tgt_syntax)
        target = batch.tgt_out.masked_fill(batch.tgt_padding, IGNORE_INDEX)  # [B, m]
        loss, nll = label_smoothed_nll(out.logits, target, self.label_smoothing)
        return loss_and_logs(loss, nll, (~batch.tgt_padding).sum(), batch.src.shape[0], out)


class LanguageModelTask:
    """Causal LM over monolingual batches: input ``<s> x``, output ``x </s>`` (``</s>`` is predicted).

    Args:
        label_smoothing: ε (0 for plain perplexity training).
        request: decoder-side syntax for the input ``<s> x`` (``tgt``: the BET(SG) ``hints``).
    """

    def __init__(self, label_smoothing: float = 0.0, request: SyntaxRequest = SyntaxRequest()):
        self.label_smoothing = label_smoothing
        self.request = request

    def syntax_request(self) -> SyntaxRequest:
        return self.request

    def loss(self, model: nn.Module, batch: Batch) -> tuple[Tensor, dict[str, Tensor]]:
        if self.request.tgt and batch.tgt_in is not None:
            raise ValueError("the language model's decoder-side syntax comes from the trees of "
                             "monolingual data, but the batch is parallel (use a monolingual dataset)")
        tokens = batch.src  # [B, n]: pieces, </s>, padding
        bos = torch.full_like(tokens[:, :1], BOS)
        inputs = torch.cat([bos, tokens[:, :-1]], dim=1)  # [B, n]: <s> x
        out = model(inputs, syntax=batch.tgt_syntax)
        target = tokens.masked_fill(batch.src_padding, IGNORE_INDEX)  # [B, n]
        loss, nll = label_smoothed_nll(out.logits, target, self.label_smoothing)
        return loss_and_logs(loss, nll, (~batch.src_padding).sum(), tokens.shape[0], out)


def mask_tokens(tokens: Tensor, maskable: Tensor, mask_id: int, vocab_size: int, prob: float = 0.15,
                generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """BERT's corruption (Devlin et al. 2019, §3.1): choose ``prob`` of the maskable positions;
    of those, 80% become ``mask_id``, 10% a random ordinary piece, 10% stay unchanged.

    Random draws are made on the CPU from ``generator`` (the global generator when None), so the
    masks depend only on its state, not on the device.

    Args:
        tokens: ``[batch_size, n]`` ids.
        maskable: ``[batch_size, n]`` bool, positions that may be chosen (not padding, ``</s>``).
        mask_id: id of the mask token (not one of the special pieces).
        vocab_size: random replacements are drawn from the ordinary ids below it, except ``mask_id``.
        prob: share of maskable positions chosen.
        generator: a CPU ``torch.Generator``.

    Returns:
        ``(inputs [batch_size, n], targets [batch_size, n])``: the corrupted ids, and the
        original ids at chosen positions with ``IGNORE_INDEX`` elsewhere.
    """
    shape = tokens.shape
    choose = torch.rand(shape, generator=generator)  # [B, n]
    action = torch.rand(shape, generator=generator)  # [B, n]
    regular = vocab_size - FIRST_REGULAR_ID - (FIRST_REGULAR_ID <= mask_id < vocab_size)
    random_ids = torch.randint(0, max(regular, 1), shape, generator=generator) + FIRST_REGULAR_ID
    random_ids += (random_ids >= mask_id) & (mask_id >= FIRST_REGULAR_ID)  # skip the mask id
    device = tokens.device
    chosen = (choose.to(device) < prob) & maskable
    to_mask = chosen & (action.to(device) < 0.8)
    to_random = chosen & (action.to(device) >= 0.9)
    inputs = tokens.masked_fill(to_mask, mask_id)
    inputs = torch.where(to_random, random_ids.to(device), inputs)
    return inputs, tokens.masked_fill(~chosen, IGNORE_INDEX)


class MaskedLMTask:
    """Masked LM: corrupt with :func:`mask_tokens`, cross-entropy at the chosen positions.

    Masks are drawn from the global CPU generator, which the trainer seeds for every batch from
    ``(seed, update, rank, batch)``: they are deterministic given the update.

    Args:
        mask_id: the mask token's id (the model's ``config.mask_id``); it must not be one of the
            data's special pieces (``<pad> <unk> <s> </s>`` = 0..3).
        vocab_size: the model's vocabulary size.
        prob: share of the pieces chosen (0.15).
        label_smoothing: ε.
        request: syntax fields for the encoder (e.g. ``syntax_request_for(model.config)``).
    """

    def __init__(self, mask_id: int, vocab_size: int, prob: float = 0.15, label_smoothing: float = 0.0,
                 request: SyntaxRequest = SyntaxRequest()):
        if not FIRST_REGULAR_ID <= mask_id < vocab_size:
            raise ValueError(f"mask_id={mask_id} must be an id of its own in [{FIRST_REGULAR_ID}, "
                             f"vocab_size={vocab_size}); ids 0..{EOS} are <pad> <unk> <s> </s> in prepared data")
        self.mask_id, self.vocab_size, self.prob = mask_id, vocab_size, prob
        self.label_smoothing = label_smoothing
        self.request = request

    def syntax_request(self) -> SyntaxRequest:
        return self.request

    def loss(self, model: nn.Module, batch: Batch) -> tuple[Tensor, dict[str, Tensor]]:
        tokens = batch.src  # [B, n]
        maskable = ~batch.src_padding & (tokens != EOS) & (tokens != BOS)
        inputs, target = mask_tokens(tokens, maskable, self.mask_id, self.vocab_size, self.prob)
        out = model(inputs, syntax=batch.src_syntax)
        chosen = target != IGNORE_INDEX  # [B, n]
        loss, nll = label_smoothed_nll(out.logits[chosen], target[chosen], self.label_smoothing)  # over [K, V]
        return loss_and_logs(loss, nll, chosen.sum(), tokens.shape[0], out)
