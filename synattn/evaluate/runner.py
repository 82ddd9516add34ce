"""Evaluating a trained run on a prepared split: the numbers ``synattn evaluate`` prints.

* translation (task mt): sacreBLEU and chrF of beam-search output against the split's references;
* perplexity of the reference (teacher forcing; masked positions for task mlm);
* every dependency-supervised head (docs/methods.md §2): word-level unlabeled attachment against the
  split's trees (parser trees, or gold trees when the dataset was prepared from CoNLL-U);
* every attention head of every self-attention layer: how often its most-attended position is the
  piece's head in the subword tree (attention-head agreement with trees; chance ≈ 1/length).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from synattn.config_io import config_error, parse_yaml
from synattn.data.batching import PreparedDataset, collate, token_batches
from synattn.errors import InputError, SynattnError, UsageError
from synattn.evaluate.attachment import tree_predictions, word_arc_scores, word_predictions
from synattn.evaluate.result import Evaluation
from synattn.evaluate.translation import perplexity, translation_scores
from synattn.models import PretrainedModel
from synattn.progress import progress
from synattn.train.checkpoint import CHECKPOINTS, SNAPSHOTS, WEIGHTS, check_no_nan, list_checkpoints, resolve_checkpoint
from synattn.train.experiment import ExperimentConfig
from synattn.train.kinds import task_for
from synattn.train.libraries import library_of_checkpoint, library_of_section
from synattn.trees.metrics import attachment_scores
from synattn.trees.subword import word_heads_of_pieces


def named_checkpoint(run: Path, which: str) -> Path:
    """The folder that ``--checkpoint which`` names: a bare name (``ckpt_000500``) is the run's
    own, in ``RUN/checkpoints`` or else ``RUN/snapshots``, before any folder of that name where
    the command runs; anything else is a checkpoint folder's path.

    Raises:
        UsageError: no such checkpoint, a file, or a folder without weights (the message lists the
            run's checkpoints).
    """
    path = Path(which)
    if which and path.name == which:
        for folder in (CHECKPOINTS, SNAPSHOTS):
            if (run / folder / which / WEIGHTS).is_file():
                return run / folder / which
    if path.is_file():
        raise UsageError(f"--checkpoint: {which}: is a file; give the checkpoint's folder ({path.parent})")
    if not path.is_dir():
        raise UsageError(f"--checkpoint: {which}: no such checkpoint ({_kept(run)})")
    if not (path / WEIGHTS).is_file() and not (path / (WEIGHTS + ".index.json")).is_file():
        raise UsageError(f"--checkpoint: {which}: not a checkpoint folder, no {WEIGHTS} in it ({_kept(run)})")
    return path


def _kept(run: Path) -> str:
    """What ``--checkpoint`` can name in ``run``, for error messages."""
    parts = []
    for folder in (CHECKPOINTS, SNAPSHOTS):
        names = [p.name for p in list_checkpoints(run / folder)]
        if len(names) > 4:
            parts.append(f"{folder}: {names[0]} … {names[-1]}, {len(names)} of them")
        elif names:
            parts.append(f"{folder}: {', '.join(names)}")
    kept = "; ".join(parts) or "none kept"
    return f"give best, last, a checkpoint of the run ({kept}) or a checkpoint's folder"


def load_run(run: str | Path, which: str = "best") -> tuple[nn.Module, ExperimentConfig, Path]:
    """The model of a run directory's ``best``/``last`` checkpoint (or a checkpoint path) and its
    experiment config (from the run's ``config.yaml``; ``exp.run`` is set to the run directory, so
    that :func:`evaluate_run` checks the dataset against the run's fingerprint).

    Raises:
        InputError: no such checkpoint, or no ``config.yaml`` in the run.
    """
    run = Path(run)
    if not run.is_dir():
        raise InputError("not a run directory of 'synattn train' (no such folder)", str(run))
    config_path = run / "config.yaml"
    if not config_path.is_file():
        raise InputError("config.yaml is missing: not a run directory of 'synattn train'", str(run))
    if which in ("best", "last"):
        checkpoint = resolve_checkpoint(run, which)
        if checkpoint is None and which == "best":  # a run that never validated has no best
            checkpoint = resolve_checkpoint(run, "last")
    else:
        checkpoint = named_checkpoint(run, which)
    if checkpoint is None:
        raise InputError(f"has no {which} checkpoint (--checkpoint)", str(run))
    try:
        if (library := library_of_checkpoint(checkpoint)) is not None:  # another library's model
            model = library.load_checkpoint(checkpoint)
        else:
            model = PretrainedModel.from_pretrained(checkpoint)
    except (SynattnError, MemoryError):
        raise
    except Exception as err:
        if isinstance(err, OSError) and err.filename:  # the file system's error: says which file
            raise  # a damaged file: safetensors or JSON errors
        raise InputError(f"cannot read the checkpoint ({type(err).__name__}: {' '.join(str(err).split())[:200]})",
                         str(checkpoint)) from None
    check_no_nan(model, checkpoint / WEIGHTS)
    try:
        exp = ExperimentConfig.from_dict(parse_yaml(config_path.read_text(encoding="utf-8"))["experiment"])
    except (SynattnError, OSError):
        raise
    except (KeyError, TypeError, ValueError) as err:
        raise config_error(err, str(config_path)) from None
    except Exception as err:  # YAML errors
        raise InputError(f"not a config.yaml of 'synattn train' ({type(err).__name__}: "
                         f"{' '.join(str(err).split())[:200]})", str(config_path)) from None
    exp.run = run  # type: ignore[attr-defined]  # (the run directory: an attribute, not a config key)
    return model, exp, checkpoint


@torch.no_grad()
def evaluate_run(model, exp: ExperimentConfig, split: str = "test", *, data: str | None = None,
                 beam: int | None = None, translate: bool = True, max_translate: int | None = None,
                 max_tokens: int = 4000, show_progress: bool = True) -> Evaluation:
    """Evaluate ``model`` (trained with ``exp``) on a split of its prepared dataset.

    Args:
        model: the trained model; exp: its experiment config.
        split: the split of the prepared dataset.
        data: the prepared dataset folder (default ``exp.data``).
        beam: beam size of translation (default ``exp.eval.beam``).
        translate: translate the split and score BLEU/chrF (task mt).
        max_translate: translate only the first sentences of the split (perplexity, attachment and
            agreement still use all).
        max_tokens: batch size of the teacher-forced passes.
        show_progress: progress bars.
    """
    if getattr(exp, "run", None) is not None:
        from synattn.runs import check_dataset

        check_dataset(exp.run, data or exp.data)  # type: ignore[attr-defined]  # (set by load_run)
    try:
        dataset = PreparedDataset(data or exp.data, split)
    except (FileNotFoundError, KeyError) as err:
        raise InputError(str(err).strip('"'), str(data or exp.data)) from None
    if library_of_section(exp.model) is not None:  # a transformers model, the one other library
        from synattn.evaluate.hf_model import evaluate_hf

        return evaluate_hf(model, dataset, split, max_tokens, show_progress)
    model.eval()
    task = task_for(model, label_smoothing=0.0)
    request = task.syntax_request()
    has_trees = {s: dataset.has(f"{s}_heads") for s in ("src", "tgt")}
    probe = replace(request, src=request.src | ({"head_targets"} if has_trees["src"] else set()),
                    tgt=request.tgt | ({"head_targets"} if has_trees["tgt"] and exp.kind.parallel else set()))
    nll, tokens = 0.0, 0
    pred: dict[str, list] = defaultdict(list)
    arcs: dict[str, list] = defaultdict(list)
    gold: dict[str, list] = defaultdict(list)
    agree: dict[str, np.ndarray] = {}
    counts: dict[str, float] = defaultdict(float)
    torch.manual_seed(0)  # masked-LM masks: the same positions on every evaluation
    batches = token_batches(dataset.lengths(), max_tokens, shuffle=False)
    for indices in progress(batches, desc=f"evaluate {split}", unit="batch", enabled=show_progress):
        batch = collate(dataset, indices, probe)
        _, logs = task.loss(model, batch)  # the probe's extra head targets are read by no feature
        nll, tokens = nll + float(logs["nll_loss"]), tokens + int(logs["ntokens"])
        if not exp.kind.attention_analysis:
            continue
        assert exp.kind.evaluate is not None  # (a kind with attention analysis has its evaluation hook)
        out = exp.kind.evaluate(model, batch)
        examples = [dataset[int(i)] for i in indices]
        for key, log_probs in out.head_log_probs.items():
            side, offset = ("tgt", 1) if key.startswith("decoder") else ("src", batch.src_offset)
            for b, ex in enumerate(examples):
                p = len(ex[f"{side}_ids"])
                scores = log_probs[b, offset:offset + p, offset:offset + p].float().numpy()
                pred[key].append(word_predictions(scores, ex[f"{side}_word"]))
                arcs[key].append(word_arc_scores(scores, ex[f"{side}_word"]))
                gold[key].append(word_heads_of_pieces(ex[f"{side}_heads"], ex[f"{side}_word"]))
        for name, layers in out.attentions.items():
            if not name.endswith(".self"):
                continue
            syntax = batch.tgt_syntax if name.startswith("decoder") else batch.src_syntax
            if syntax is None or syntax.head_targets is None:
                continue
            targets = syntax.head_targets  # [B, t]
            valid = targets >= 0
            stacked = torch.stack([a.float() for a in layers], 1)  # [B, L, H, t, t]
            hits = (stacked.argmax(-1) == targets[:, None, None, :]) & valid[:, None, None, :]
            agree[name] = agree.get(name, 0) + hits.sum((0, 3)).numpy()
            counts[name] += float(valid.sum())
    result = Evaluation(split, len(dataset), perplexity(nll, max(tokens, 1)))
    for key in pred:
        result.attachment[key] = attachment_scores(pred[key], gold[key]).uas
        result.tree_attachment[key] = attachment_scores(tree_predictions(arcs[key]), gold[key]).uas
    result.head_agreement = {k: (v / max(counts[k], 1)).round(4).tolist() for k, v in agree.items()}
    if exp.kind.translates and translate:
        from synattn.generate.translate import Translator

        ev = exp.eval
        translator = Translator(model, data or exp.data, beam or ev.beam, ev.length_penalty, ev.max_len_a,
                                ev.max_len_b, ev.batch_size)
        count = len(dataset) if max_translate is None else min(max_translate, len(dataset))
        result.hypotheses = translator.translate([dataset[i] for i in range(count)], show_progress)
        scores = translation_scores(result.hypotheses, dataset.text("tgt")[:count])
        result.translation = {"bleu": scores.bleu, "chrf": scores.chrf, "bleu_signature": scores.bleu_signature,
                              "chrf_signature": scores.chrf_signature}
    return result

