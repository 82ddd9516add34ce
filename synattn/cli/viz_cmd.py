"""``synattn viz``: attention heatmaps of a trained run, with the dependency tree drawn over them.

  synattn viz --run runs/dbsa_enc --split test --index 3 -o plots/
  synattn viz --run runs/tree_transformer_mlm -i sentences.txt --index 0 -o plots/ --parse

One PNG per layer of each self-attention stack (every head of the layer, rows attending to
columns): the encoder over the source pieces and ``</s>`` (masked LM, translation), the decoder
over ``<s>`` and the pieces (language model; a translation model's decoder, teacher-forced on the
reference, for a ``--split`` sentence with a target side). Where the sentence has a tree (a split
prepared with trees, or ``--parse``), its subword dependency arcs are drawn above the heatmaps
and each row's head is boxed. For a model with constituent attention, the Tree Transformer's
induced tree is drawn too (``tree.png``). Input text (``-i``) is split into words as the run's
dataset was (by its spaCy pipeline when ``prepare`` parsed raw text: ``servants.`` is ``servants
.``), or at whitespace with ``--pretokenized``; ``--index`` picks the sentence (0-based line of the
file, or index in the split). The maps are :func:`synattn.viz.maps.attention_maps`; this module
reads the arguments, draws and prints.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from synattn.cli.checks import check_lengths, check_vocabulary, resolve_min_layer
from synattn.cli.common import (
    add_pretokenized_argument,
    add_run_arguments,
    load,
    run_inputs,
    split_sentences,
    text_sentences,
)
from synattn.cli.induce_cmd import add_decoding_arguments, induced_trees
from synattn.cli.options import nonnegative_int, split_name
from synattn.cli.paths import check_apart, input_file, output_folder
from synattn.errors import InputError
from synattn.folders import FolderKind, check_own_folder
from synattn.models import EncoderDecoderTransformer, MaskedLM, TransformerLM
from synattn.train.tasks import syntax_request_for
from synattn.viz.attention import plot_attention, plot_constituency
from synattn.viz.maps import attention_maps, sentence_pieces

_IMAGE = re.compile(r"(encoder|decoder|cross)_layer\d+\.png|tree\.png")
PLOTS = FolderKind(".synattn-viz", "a folder of 'synattn viz'",
                   made_before_markers=lambda folder: all(_IMAGE.fullmatch(p.name) for p in folder.iterdir()))
"""viz's images folder (:mod:`synattn.folders`): new, empty, or holding only viz's images (viz writes no
marker: its images say whose the folder is)."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("viz", help="attention heatmaps with dependency arcs, induced trees (PNG)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(p)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("-i", "--input", help="text file, one sentence per line")
    source.add_argument("--split", type=split_name, help="a split of the run's prepared dataset")
    add_pretokenized_argument(p)
    p.add_argument("--index", type=nonnegative_int, default=0, help="which sentence (0-based; default 0)")
    p.add_argument("-o", "--output", required=True, help="folder for the PNG files")
    p.add_argument("--layers", type=nonnegative_int, nargs="+", help="only these layers (0-based; default all)")
    p.add_argument("--parse", action="store_true",
                   help="parse text input with the dataset's spaCy pipeline to draw its dependency arcs "
                        "(automatic when the model reads source trees)")
    add_decoding_arguments(p, skippable=False)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.input is not None:
        input_file(args.input, "-i")
    output_folder(args.output, "-o")
    check_own_folder(args.output, "-o", PLOTS)
    check_apart({"-o": args.output}, {"-i": args.input, **run_inputs(args)})
    model, exp, data = load(args)
    if not isinstance(model, (MaskedLM, EncoderDecoderTransformer, TransformerLM)):
        raise InputError(f"cannot draw the attention of a {type(model).__name__}", args.run)
    reads_trees = bool(syntax_request_for(model.config).src)
    min_layer = resolve_min_layer(model, args.min_layer)
    check_vocabulary(model, exp.data, data, args.split)
    if args.split:
        sentences = split_sentences(data, args.split, [args.index])
    else:
        sentences = text_sentences(data, args.input, reads_trees or args.parse, line=args.index,
                                   pretokenized=args.pretokenized or None, max_len=args.max_len)
    check_lengths(sentences, args.max_len, None, args.input or f"{data}/{args.split}")
    example = sentences.examples[0]
    out_dir = Path(args.output)
    written = []
    for stack, layers, labels, heads in attention_maps(model, example, sentence_pieces(data, example)):
        chosen = range(len(layers)) if args.layers is None else args.layers
        for layer in chosen:
            if not 0 <= layer < len(layers):
                raise InputError(f"--layers {layer}: the {stack} has layers 0..{len(layers) - 1}", args.run)
            written.append(plot_attention(layers[layer], labels, out_dir / f"{stack}_layer{layer}.png",
                                          heads=heads, title=f"{stack} layer {layer} ({exp.task})"))
    if getattr(getattr(model.config, "encoder", None), "constituent", False):
        (tree,) = induced_trees(model, sentences, args, min_layer)
        written.append(plot_constituency(tree, out_dir / "tree.png", title="Tree Transformer induced tree"))
    for path in written:
        print(path)
    print(f"wrote {len(written)} images to {out_dir}", file=sys.stderr)
    return 0
