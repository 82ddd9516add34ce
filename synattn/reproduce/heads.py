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
from synattn.train.kinds import task_for
from synattn.trees.subword import last_piece_index, word_heads_of_pieces


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
    model.eval()
    request = task_for(model, 0.0).syntax_request()
    request = replace(request, src=request.src | {"head_targets"})

    def outputs():
        for indices in token_batches(dataset.lengths(), max_tokens, shuffle=False):
            batch = collate(dataset, indices, request)
            if batch.tgt_in is not None:  # a translation model: the encoder's heads read the source trees
                out = model(batch.src, batch.tgt_in, src_syntax=batch.src_syntax, tgt_syntax=batch.tgt_syntax,
                            need_weights=True)
            else:
                out = model(batch.src, syntax=batch.src_syntax, need_weights=True)
            stack = torch.stack([a.float() for a in out.attentions["encoder.self"]], 1).numpy()  # [B, L, H, t, t]
            sup = {k: v.float().numpy() for k, v in out.head_log_probs.items() if k.startswith("encoder")}
            yield [dataset[int(i)] for i in indices], stack, sup, batch.src_offset

    return _score(outputs(), PreparedData(data).labels)


@torch.no_grad()
def hf_head_attachment(model, data: str | Path, split: str, tokenizer, max_tokens: int = 4000,
                       probe: bool = False) -> dict:
    """:func:`head_attachment` for a ``transformers`` encoder that reads its own ``tokenizer``'s
    pieces (a pretrained model: the dataset's words are tokenized again,
    :class:`synattn.hf.retokenize.RetokenizedDataset`), with synattn features or without.
    ``probe=True`` adds every head's accuracies as Clark et al. (2019) measure them
    (:mod:`synattn.evaluate.probe`: word-level attention, both directions, per relation) under
    ``"probe"``.
    """
    from synattn.hf.retokenize import RetokenizedDataset, collate_pretrained
    from synattn.hf.task import syntax_request

    limit = getattr(model.config, "max_position_embeddings", 512)
    dataset = RetokenizedDataset(PreparedDataset(data, split), tokenizer, limit)
    model.eval()
    request = syntax_request(model.config)
    request = replace(request, src=request.src | {"head_targets"})

    def outputs():
        for indices in token_batches(dataset.lengths(), max_tokens, shuffle=False):
            batch = collate_pretrained(dataset, indices, request)
            syntax = {f"syntax_{k}": v for k, v in batch.src_syntax.present().items()} \
                if getattr(model, "synattn", None) is not None and batch.src_syntax is not None else {}
            out = model(input_ids=batch.src, attention_mask=(~batch.src_padding).long(), output_attentions=True,
                        **syntax)
            stack = torch.stack([a.float() for a in out.attentions], 1).numpy()  # [B, L, H, t, t]
            sup = {k: v.float().numpy() for k, v in (getattr(out, "synattn_head_log_probs", None) or {}).items()}
            yield [dataset[int(i)] for i in indices], stack, sup, batch.src_offset

    return _score(outputs(), PreparedData(data).labels, probe)


def _score(outputs, labels: dict[str, list[str]], probe: bool = False) -> dict:
    """Scores ``(examples, attention [B, L, H, t, t], supervised log-probs {key: [B, t, t]}, offset)``
    batches against the examples' trees (see :func:`head_attachment`)."""
    from synattn.evaluate.probe import ProbeCounts, word_attention

    upos = labels.get("src_upos", [])
    punct_id = upos.index("PUNCT") if "PUNCT" in upos else -1
    deprels = labels.get("src_deprels", [])
    hits: dict[str, np.ndarray] = {}
    sup_hits: dict[str, np.ndarray] = {}
    tree_hits: dict[str, np.ndarray] = {}
    words = np.zeros(2)
    counts = None
    for examples, stack, sup, o in outputs:
        arcs: dict[str, list] = {key: [] for key in sup}
        golds, keeps = [], []
        if probe and counts is None:
            counts = ProbeCounts(stack.shape[1:3])
        for b, ex in enumerate(examples):
            p, word = len(ex["src_ids"]), ex["src_word"]
            gold = word_heads_of_pieces(ex["src_heads"], word)  # [n]
            last = last_piece_index(word)
            keep = ex["src_upos"][last] != punct_id  # [n]
            words += (len(gold), int(keep.sum()))
            golds.append(gold)
            keeps.append(keep)
            pieces = stack[b, :, :, o:o + p, o:o + p]  # [L, H, p, p]
            correct = word_predictions(pieces, word) == gold  # [L, H, n]
            both = np.stack([correct.sum(-1), (correct & keep).sum(-1)], -1)  # [L, H, 2]
            hits["encoder"] = hits.get("encoder", 0) + both
            if counts is not None:
                relations = [deprels[i] if 0 <= i < len(deprels) else "_" for i in ex["src_deprel"][last]]
                counts.add(word_attention(pieces, word), gold, relations)
            for key, log_probs in sup.items():
                correct = word_predictions(log_probs[b, o:o + p, o:o + p], word) == gold
                sup_hits[key] = sup_hits.get(key, 0) + np.array([correct.sum(), (correct & keep).sum()])
                arcs[key].append(word_arc_scores(log_probs[b, o:o + p, o:o + p], word))
        for key, scores in arcs.items():
            for pred, gold, keep in zip(tree_predictions(scores), golds, keeps):
                correct = pred == gold
                tree_hits[key] = tree_hits.get(key, 0) + np.array([correct.sum(), (correct & keep).sum()])
    out = {"heads": {k: (v / words).tolist() for k, v in hits.items()},
           "supervised": {k: (v / words).tolist() for k, v in sup_hits.items()},
           "supervised_tree": {k: (v / words).tolist() for k, v in tree_hits.items()},
           "words": int(words[0]), "words_no_punct": int(words[1])}
    if counts is not None:
        out["probe"] = counts.summary()
    return out


def head_metrics(scores: dict[str, dict], supervised: bool) -> dict:
    """A study's metrics from :func:`head_attachment`-style ``scores`` per split: the supervised
    head's UAS (and its decoded tree's) when ``supervised``, else the best head's on dev, on every
    split, in %, with ``head`` naming it and ``all_heads_dev`` every head's."""
    out: dict = {}
    if not supervised:
        layer, head = best_head(scores["dev"]["heads"]["encoder"])
        out["head"] = f"layer {layer} head {head} (best on dev)"
        pick = {split: s["heads"]["encoder"][layer][head] for split, s in scores.items()}
    else:
        key = next(iter(scores["dev"]["supervised"]))
        out["head"] = key
        pick = {split: s["supervised"][key] for split, s in scores.items()}
        for split, s in scores.items():
            out[f"uas_{split}_tree"], out[f"uas_{split}_tree_nopunct"] = (100 * v for v in s["supervised_tree"][key])
    for split, (uas, nopunct) in pick.items():
        out[f"uas_{split}"], out[f"uas_{split}_nopunct"] = 100 * uas, 100 * nopunct
    out["all_heads_dev"] = scores["dev"]["heads"]
    return out


def best_head(table: list[list[list[float]]]) -> tuple[int, int]:
    """``(layer, head)`` with the highest UAS (punctuation included) in a ``[L][H][2]`` table."""
    scores = np.asarray(table)[..., 0]
    layer, head = np.unravel_index(int(scores.argmax()), scores.shape)
    return int(layer), int(head)
