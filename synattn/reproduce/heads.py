"""Word-level attachment of attention heads: every head of every layer, or a supervised head,
scored against a treebank's gold trees (UD English-EWT in the ``supervised-head`` study)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from synattn.data.batching import PreparedDataset, collate, token_batches
from synattn.data.prepared import PreparedData
from synattn.evaluate.attachment import tree_predictions, word_arc_scores, word_predictions
from synattn.evaluate.runner import gold_word_heads
from synattn.train.tasks import task_for
from synattn.trees.subword import last_piece_index


@torch.no_grad()
def head_attachment(model, data: str | Path, split: str, max_tokens: int = 4000) -> dict:
    """UAS of every encoder self-attention head and of every encoder supervised head on ``split``
    (the source side's trees: gold trees of a treebank, or the parser's).

    Returns:
        ``{"heads": {"encoder": [layers][heads] (uas, uas without punctuation)},
        "supervised": {key: (uas, uas without punctuation)}, "supervised_tree": {key: (…)},
        "words": n, "words_no_punct": n}``; ``supervised`` reads each word's head as the argmax of
        its final piece's attention, ``supervised_tree`` decodes the best projective single-root
        tree under the head's word-level arc scores
        (:func:`synattn.evaluate.attachment.tree_predictions`); punctuation is UPOS ``PUNCT`` of the
        gold tree.
    """
    dataset = PreparedDataset(data, split)
    labels = PreparedData(data).labels
    punct_id = labels.get("src_upos", []).index("PUNCT") if "PUNCT" in labels.get("src_upos", []) else -1
    model.eval()
    request = task_for(model, 0.0).syntax_request()
    request = replace(request, src=request.src | {"head_targets"})
    hits: dict[str, np.ndarray] = {}
    sup_hits: dict[str, np.ndarray] = {}
    tree_hits: dict[str, np.ndarray] = {}
    words = np.zeros(2)
    for indices in token_batches(dataset.lengths(), max_tokens, shuffle=False):
        batch = collate(dataset, indices, request)
        if batch.tgt_in is not None:  # a translation model: the encoder's heads read the source trees
            out = model(batch.src, batch.tgt_in, src_syntax=batch.src_syntax, tgt_syntax=batch.tgt_syntax,
                        need_weights=True)
        else:
            out = model(batch.src, syntax=batch.src_syntax, need_weights=True)
        stacks = {"encoder": torch.stack([a.float() for a in out.attentions["encoder.self"]], 1).numpy()}
        # stacks: [B, L, H, t, t]; supervised heads of the encoder: [B, t, t]
        sup = {k: v.float().numpy() for k, v in out.head_log_probs.items() if k.startswith("encoder")}  # log
        arcs: dict[str, list] = {key: [] for key in sup}
        golds, keeps = [], []
        o = batch.src_offset  # piece k at position k + o
        for b, i in enumerate(indices):
            ex = dataset[int(i)]
            p, word = len(ex["src_ids"]), ex["src_word"]
            gold = gold_word_heads(ex["src_heads"], word)  # [n]
            last = last_piece_index(word)
            keep = ex["src_upos"][last] != punct_id  # [n]
            words += (len(gold), int(keep.sum()))
            golds.append(gold)
            keeps.append(keep)
            for name, probs in stacks.items():
                correct = word_predictions(probs[b, :, :, o:o + p, o:o + p], word) == gold  # [L, H, n]
                both = np.stack([correct.sum(-1), (correct & keep).sum(-1)], -1)  # [L, H, 2]
                hits[name] = hits.get(name, 0) + both
            for key, log_probs in sup.items():
                correct = word_predictions(log_probs[b, o:o + p, o:o + p], word) == gold
                sup_hits[key] = sup_hits.get(key, 0) + np.array([correct.sum(), (correct & keep).sum()])
                arcs[key].append(word_arc_scores(log_probs[b, o:o + p, o:o + p], word))
        for key, scores in arcs.items():
            for pred, gold, keep in zip(tree_predictions(scores), golds, keeps):
                correct = pred == gold
                tree_hits[key] = tree_hits.get(key, 0) + np.array([correct.sum(), (correct & keep).sum()])
    return {"heads": {k: (v / words).tolist() for k, v in hits.items()},
            "supervised": {k: (v / words).tolist() for k, v in sup_hits.items()},
            "supervised_tree": {k: (v / words).tolist() for k, v in tree_hits.items()},
            "words": int(words[0]), "words_no_punct": int(words[1])}


def best_head(table: list[list[list[float]]]) -> tuple[int, int]:
    """``(layer, head)`` with the highest UAS (punctuation included) in a ``[L][H][2]`` table."""
    scores = np.asarray(table)[..., 0]
    layer, head = np.unravel_index(int(scores.argmax()), scores.shape)
    return int(layer), int(head)
