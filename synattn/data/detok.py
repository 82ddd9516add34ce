"""Detokenization learned from the corpus: which neighbouring tokens were written without a space.

A prepared side's words are the parser's tokens (``s'`` ``éloigna``, ``temps`` ``-là``, ``Hira``
``.``), and sentencepiece is trained on them joined by spaces, so a translation decodes to tokens
joined by spaces, while references (and readers) expect the text as it is written. sacreBLEU scores
detokenized output against untokenized references (Post 2018): tokenized output loses every n-gram
that spans a glued token (``s'éloigna``) and scores some 2 BLEU lower here.

Rule-based detokenizers (the Moses scripts) encode one typography per language and do not know the
tokenizer's splits: French rules put spaces before ``; : ! ?``, which the Segond verses do not have,
and leave spaCy's ``temps -là`` apart. :class:`Spacing` instead learns, from the training side's own
text, which tokens are glued to their right or left neighbour (``s'`` to the right, ``,`` and
``-là`` to the left), and which pairs go against those habits; ``prepare`` stores it as
``detok.SIDE.json`` beside the tokenizer.

Measured on the Bible test verses (758; tokens from their prepared pieces, written back): Segond
French 100% of verses exactly as published (the Moses detokenizer, sacremoses with ``fr``: 42%),
WEB English 97.6% (straight quotes, below; Moses 43%).
"""

from __future__ import annotations

import json
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

VERSION = 1


def spaces_between(words: Sequence[str], text: str) -> list[bool] | None:
    """Whether each pair of consecutive ``words`` is separated by whitespace in ``text``.

    ``words`` must spell ``text`` in order, up to whitespace and Unicode NFKC normalization (as
    sentencepiece normalizes); returns None where they do not (e.g. ``⁇`` for an unknown piece).

    >>> spaces_between(["s'", "éloigna", "."], "s'éloigna.")
    [False, False]
    >>> spaces_between(["Hira", "."], "Hira .")
    [True]
    """
    text = unicodedata.normalize("NFKC", text)
    pos, out = 0, []
    for i, word in enumerate(words):
        word = unicodedata.normalize("NFKC", word)
        start = pos
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if not word or not text.startswith(word, pos):
            return None
        if i:
            out.append(pos > start)
        pos += len(word)
    return out if not text[pos:].strip() else None


def _glued_tokens(glued: dict[tuple[str, str], bool]) -> tuple[set[str], set[str]]:
    """The tokens glued to their right and to their left neighbour, from each pair's habit.

    A glued pair is explained by one of its tokens: ``Juda ,`` by the comma, which follows nearly
    every kind of token glued, not by ``Juda``, which only punctuation follows glued; ``l' oiseau``
    by ``l'``. So glue is counted over partner *kinds* (not occurrences: ``oiseau`` follows ``l'``
    more often than anything, but few kinds of tokens glue to it), and tokens are decided in order
    of how many kinds they glue to, each counting only the partners not already glued towards it.
    """
    partners: dict[tuple[str, int], list[tuple[str, bool]]] = {}
    for (left, right), g in glued.items():
        partners.setdefault((left, 0), []).append((right, g))  # side 0: the token is left, glued right
        partners.setdefault((right, 1), []).append((left, g))
    order = sorted(partners, key=lambda c: (-sum(g for _, g in partners[c]), -len(partners[c]), c))
    decided: tuple[set[str], set[str]] = (set(), set())  # (glued right, glued left)
    for token, side in order:
        facing = decided[1 - side]
        rest = [g for partner, g in partners[token, side] if partner not in facing]
        if rest and 2 * sum(rest) > len(rest):
            decided[side].add(token)
    return decided


class Spacing:
    """Where to write a space between two tokens, learned from tokenized text and its original.

    A token is *glued right* (``s'``, ``(``) or *glued left* (``,``, ``-là``) when it is written
    without a space towards most kinds of tokens it meets on that side (:func:`_glued_tokens`). A
    space separates two tokens unless the left one is glued right or the right one glued left,
    except for the pairs seen at least ``min_pair`` times whose majority says otherwise (``pairs``).
    Tokens never seen are written apart. What a pair model cannot know is which of two identical
    marks opens and which closes: straight double quotes (``"``) are glued as they most often are.
    """

    def __init__(self, glued_right: Iterable[str] = (), glued_left: Iterable[str] = (),
                 pairs: dict[tuple[str, str], bool] | None = None, sentences: int = 0, skipped: int = 0):
        self.glued_right, self.glued_left = frozenset(glued_right), frozenset(glued_left)
        self.pairs = dict(pairs or {})
        self.sentences, self.skipped = sentences, skipped

    @classmethod
    def learn(cls, examples: Iterable[tuple[Sequence[str], str]], min_pair: int = 2) -> Spacing:
        """Learn from ``(words, text)`` pairs; sentences whose words do not spell their text are
        skipped (counted in ``skipped``)."""
        pair_total: Counter[tuple[str, str]] = Counter()
        pair_space: Counter[tuple[str, str]] = Counter()
        sentences = skipped = 0
        for words, text in examples:
            spaces = spaces_between(words, text)
            if spaces is None:
                skipped += 1
                continue
            sentences += 1
            words = [unicodedata.normalize("NFKC", w) for w in words]
            for left, right, space in zip(words, words[1:], spaces):
                pair_total[left, right] += 1
                pair_space[left, right] += space
        glued = {pair: 2 * pair_space[pair] < n for pair, n in pair_total.items()}
        glued_right, glued_left = _glued_tokens(glued)
        rule = cls(glued_right, glued_left)
        pairs = {}
        for pair, n in pair_total.items():
            if n >= min_pair and 2 * pair_space[pair] != n:
                space = 2 * pair_space[pair] > n
                if space != rule.space(*pair):
                    pairs[pair] = space
        return cls(glued_right, glued_left, pairs, sentences, skipped)

    def space(self, left: str, right: str) -> bool:
        """Whether ``left`` and ``right`` are written with a space between them."""
        known = self.pairs.get((left, right))
        if known is not None:
            return known
        return left not in self.glued_right and right not in self.glued_left

    def detokenize(self, tokens: str | Sequence[str]) -> str:
        """The text of ``tokens`` (a list, or a string of space-separated tokens)."""
        if isinstance(tokens, str):
            tokens = tokens.split()
        tokens = [unicodedata.normalize("NFKC", t) for t in tokens]
        out = tokens[:1]
        for left, right in zip(tokens, tokens[1:]):
            if self.space(left, right):
                out.append(" ")
            out.append(right)
        return "".join(out)

    @property
    def is_identity(self) -> bool:
        """Whether every pair is written with a space (text that was already tokenized)."""
        return not (self.glued_right or self.glued_left or any(not s for s in self.pairs.values()))

    def to_dict(self) -> dict:
        return {"version": VERSION, "sentences": self.sentences, "skipped": self.skipped,
                "glued_right": sorted(self.glued_right), "glued_left": sorted(self.glued_left),
                "pairs": sorted([left, right, space] for (left, right), space in self.pairs.items())}

    @classmethod
    def from_dict(cls, d: dict) -> Spacing:
        if not isinstance(d, dict) or d.get("version") != VERSION:
            raise ValueError(f"not a spacing table of version {VERSION}")
        return cls(d["glued_right"], d["glued_left"], {(a, b): bool(s) for a, b, s in d["pairs"]},
                   d.get("sentences", 0), d.get("skipped", 0))

    def save(self, path: str | Path) -> None:
        from synattn.io import atomic_write

        with atomic_write(path) as f:
            json.dump(self.to_dict(), f, ensure_ascii=False, indent=0)

    @classmethod
    def load(cls, path: str | Path) -> Spacing:
        """Raises: ValueError (with the path) for a file that is not a spacing table."""
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path}: not a spacing table of synattn's ({err})") from None
