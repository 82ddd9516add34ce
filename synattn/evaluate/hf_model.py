"""``synattn evaluate`` of a Hugging Face ``transformers`` masked LM (:mod:`synattn.hf.task`): masked
perplexity, each supervised head's word-level UAS against the split's trees and every head's
agreement with the subword tree, read through the model's own tokenizer for a pretrained model.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import torch
from torch import nn

from synattn.data.batching import token_batches
from synattn.evaluate.attachment import word_predictions
from synattn.evaluate.result import Evaluation
from synattn.evaluate.translation import perplexity
from synattn.hf.task import HFMaskedLMTask
from synattn.progress import progress
from synattn.trees.metrics import attachment_scores
from synattn.trees.subword import word_heads_of_pieces


@torch.no_grad()
def evaluate_hf(model: nn.Module, dataset, split: str, max_tokens: int = 4000,
                show_progress: bool = True):
    """Masked perplexity (None without the masked-LM loss), supervised heads' word-level UAS and
    head agreement on ``dataset`` (through the model's own tokenizer for a pretrained model)."""
    model.eval()
    task = HFMaskedLMTask(model)
    has_trees = dataset.has("src_heads")
    dataset = task.wrap_dataset(dataset)
    request = task.request
    probe = replace(request, src=request.src | ({"head_targets"} if has_trees else set()))
    nll, tokens = 0.0, 0
    pred: dict[str, list] = defaultdict(list)
    gold: dict[str, list] = defaultdict(list)
    hits, count = None, 0.0
    masked_lm = task.text is None or task.text.get("mlm", True)
    torch.manual_seed(0)  # the same masked positions on every evaluation
    batches = token_batches(dataset.lengths(), max_tokens, shuffle=False)
    for indices in progress(batches, desc=f"evaluate {split}", unit="batch", enabled=show_progress):
        batch = task.collate(dataset, indices, probe)
        if masked_lm:
            _, logs = task.loss(model, batch)
            nll, tokens = nll + float(logs["nll_loss"]), tokens + int(logs["ntokens"])
        out = task.forward(model, batch.src, batch, output_attentions=True)
        examples = [dataset[int(i)] for i in indices]
        at = batch.src_offset  # piece k sits at position k + at
        for key, log_probs in out.synattn_head_log_probs.items():
            for b, ex in enumerate(examples):
                p = len(ex["src_ids"])
                pred[key].append(word_predictions(log_probs[b, at:at + p, at:at + p].float().numpy(), ex["src_word"]))
                gold[key].append(word_heads_of_pieces(ex["src_heads"], ex["src_word"]))
        targets = None if batch.src_syntax is None else batch.src_syntax.head_targets
        if targets is not None and out.attentions is not None:
            valid = targets >= 0  # [B, n]
            stacked = torch.stack([a.float() for a in out.attentions], 1)  # [B, L, H, n, n]
            hit = (stacked.argmax(-1) == targets[:, None, None, :]) & valid[:, None, None, :]
            hits = hit.sum((0, 3)).numpy() + (0 if hits is None else hits)
            count += float(valid.sum())
    result = Evaluation(split, len(dataset), perplexity(nll, max(tokens, 1)) if masked_lm else None)
    result.attachment = {key: attachment_scores(pred[key], gold[key]).uas for key in pred}
    if hits is not None:
        result.head_agreement = {"encoder": (hits / max(count, 1)).round(4).tolist()}
    return result
