"""Fine-tune a pretrained transformers model with a dependency-supervised attention head.

A biaffine head (Strubell et al. 2018; docs/methods.md, supervised head) replaces one attention
head of one layer of the model and is trained toward the gold heads of a CoNLL-U treebank, projected
onto the tokenizer's pieces; the script reports the head's unlabeled attachment score (UAS, over
words, read at each word's final piece) on the dev set after every epoch, then saves the model
(``synattn.hf.from_pretrained`` loads it back, head included).

    python examples/hf_supervised_head.py --train synattn/samples/train.conllu \\
        --dev synattn/samples/dev.conllu --layer 4 --head 0 --output out/

fine-tunes all-MiniLM-L6-v2, which ``scripts/setup.sh`` installs offline, on the sample treebanks
that ship with synattn (Bible verses parsed by spaCy; UD English-EWT's files for a real measure).
``--model`` takes a model folder too; nothing is downloaded.

Encoder models (BERT, RoBERTa, ...) get a bidirectional head; decoder-only models (GPT-2) a
causal one, whose targets to the right of a token are left out. Byte-level BPE tokenizers (GPT-2,
RoBERTa) need ``--add-prefix-space``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import torch
from transformers import AutoModel, AutoTokenizer

import synattn.hf as sh
from synattn.errors import SynattnError
from synattn.hf.align import word_attachment
from synattn.hf.model import transformers_bars_off
from synattn.hf.pretrained import model_folder
from synattn.hf.sites import find_sites
from synattn.trees import read_conllu
from synattn.trees.samples import sample_conllu


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="all-MiniLM-L6-v2",
                   help="all-MiniLM-L6-v2 (installed offline by scripts/setup.sh) or a model folder (config.json, "
                        "weights, tokenizer); nothing is downloaded")
    p.add_argument("--train", default=str(sample_conllu("train")),
                   help="CoNLL-U training file (default: the sample shipped with synattn)")
    p.add_argument("--dev", default=str(sample_conllu("dev")),
                   help="CoNLL-U dev file, UAS is reported on it (default: the sample shipped with synattn)")
    p.add_argument("--layer", type=int, default=0, help="layer of the supervised head")
    p.add_argument("--head", type=int, default=0, help="attention head it replaces")
    p.add_argument("--weight", type=float, default=1.0, help="λ, weight of its loss")
    p.add_argument("--epochs", type=int, default=3, help="passes over the training file")
    p.add_argument("--batch-size", type=int, default=16, help="sentences per update")
    p.add_argument("--lr", type=float, default=5e-5, help="AdamW learning rate (the whole model is fine-tuned)")
    p.add_argument("--max-length", type=int, default=256, help="longer sentences (in subword tokens) are cut")
    p.add_argument("--add-prefix-space", action="store_true", help="for byte-level BPE tokenizers")
    p.add_argument("--seed", type=int, default=0, help="seed of the shuffling and the head's initialisation")
    p.add_argument("--output", default=None, help="directory to save the fine-tuned model")
    return p.parse_args(argv)


def batches(items: list, size: int, shuffle: bool):
    order = list(range(len(items)))
    if shuffle:
        random.shuffle(order)
    for start in range(0, len(order), size):
        yield [items[i] for i in order[start:start + size]]


def evaluate(model, tokenizer, collate, items, key: str, size: int) -> float:
    """Word-level UAS of the supervised head over ``items``."""
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for chunk in batches(items, size, shuffle=False):
            batch = collate([item["features"] for item in chunk])
            out = model(**batch)
            predicted = out.synattn_head_log_probs[key].argmax(-1)  # [B, T]
            for row, item in zip(predicted.tolist(), chunk):
                c, t = word_attachment(row, item["word_ids"], item["heads"])
                correct, total = correct + c, total + t
    return correct / max(total, 1)


def prepare(trees, tokenizer, encoder, max_length: int) -> list[dict]:
    items = []
    for tree in trees:
        encoding = tokenizer(tree.words, is_split_into_words=True, truncation=True,
                             max_length=max_length)
        features = dict(encoding)
        features.update({"syntax_" + k: v
                         for k, v in encoder.encode(tree, encoding.word_ids()).items()})
        kept = max((w for w in encoding.word_ids() if w is not None), default=-1) + 1
        heads = [h if h <= kept else 0 for h in tree.heads[:kept].tolist()]
        items.append({"features": features, "word_ids": encoding.word_ids(), "heads": heads})
    return items


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    train_trees, dev_trees = read_conllu(args.train), read_conllu(args.dev)  # a bad file stops here
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    tok_kwargs = {"add_prefix_space": True} if args.add_prefix_space else {}
    source = str(model_folder(args.model))  # the installed model, or a folder: never a download
    tokenizer = AutoTokenizer.from_pretrained(source, **tok_kwargs)
    tokenizer.padding_side = "right"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    with transformers_bars_off():
        model = AutoModel.from_pretrained(source)
    side = "encoder" if any(s.side == "encoder" for _, _, s in find_sites(model)) else "decoder"
    sh.attach(model, [{"feature": "supervised_head", "side": side, "layers": [args.layer],
                       "head": args.head, "weight": args.weight}])
    key = f"{side}_{args.layer}.parse"
    encoder = sh.SyntaxEncoder(["head_targets"])
    collate = sh.SyntaxCollator(tokenizer, encoder)
    train = prepare(train_trees, tokenizer, encoder, args.max_length)
    dev = prepare(dev_trees, tokenizer, encoder, args.max_length)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    history = []
    for epoch in range(1, args.epochs + 1):
        model.train()
        losses = []
        for chunk in batches(train, args.batch_size, shuffle=True):
            out = model(**collate([item["features"] for item in chunk]))
            loss = out.synattn_losses[key]  # the head's loss (the base model has no task loss)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        row = {"epoch": epoch, "train_loss": sum(losses) / max(len(losses), 1),
               "dev_uas": evaluate(model, tokenizer, collate, dev, key, args.batch_size)}
        history.append(row)
        print(json.dumps(row), flush=True)
    if args.output:
        with transformers_bars_off():
            model.save_pretrained(args.output)
        tokenizer.save_pretrained(args.output)
        print(f"saved to {args.output} (load with synattn.hf.from_pretrained)", file=sys.stderr)
    return {"history": history, "uas": history[-1]["dev_uas"] if history else None}


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except (SynattnError, ValueError, OSError) as err:  # a bad file or option: one line, no traceback
        print(f"{Path(sys.argv[0]).name}: error: {' '.join(str(err).split())}", file=sys.stderr)
        sys.exit(2)
