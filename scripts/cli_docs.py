"""Write docs/cli.md from the ``synattn`` argument parser (tests check it is up to date).

    .venv/bin/python scripts/cli_docs.py
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

GENERAL = """## Exit status, errors and safety

- **Exit status**: 0 success; 2 a usage or input error (a bad option or config value, a malformed
  input file, a run or dataset that does not fit the command); 1 a failure of the run itself (a
  folder locked by another process, a full disk, a file the system cannot read or write); 130
  interrupted. Errors are one line, `synattn COMMAND: error: ...`, naming the option or file, the
  key or line, and the cause; `--debug` (or `SYNATTN_DEBUG=1`) shows the traceback instead.
- **Option ranges** are checked when the options are read: batch and beam sizes, limits,
  `--max-len`, `--min-layer` are positive integers, `--threshold` is in [0, 1], indices are 0 or
  more, split names are plain folder names (`train`, `dev`, `test`, ...).
- **Input paths** are checked before any work: a missing input file or folder, a folder where a
  file is expected (or the reverse) or an unreadable one is a usage error (exit 2) of the form
  `OPTION: PATH: cause`, e.g. `synattn translate: error: -i: notes.txt: no such file` (every
  `-i`, `--config`, `--data`, `--run`, `--checkpoint`, `--gold`, `--src-trees SPLIT=FILE`, the
  files of a `prepare --train/--dev/--test` prefix, `stats FILE`, `parse FILE`).
- **Output paths** are checked before the work too: a folder where a file is expected (or the
  reverse), a folder that cannot be written (permissions, a read-only file system) stops the
  command with exit status 1 and `OPTION: PATH: cause`. A disk that fills up while writing is
  exit status 1 naming the file (`PATH: cannot write: No space left on device (is the disk
  full?)`); files are written to a temporary name and renamed, so nothing half-written is left
  under the name asked for, and a checkpoint that cannot be written keeps the last complete one.
- **An output is never an input**: before any work, every output (`-o`, `--json`, `--hypotheses`,
  `--plot`, `--run-dir`) is checked against every input of the command: a file it reads (`-i`,
  `--gold`, `--config`, `stats FILE`, `parse FILE`, the files of `prepare --train/--dev/--test` and
  `--src-trees`; a link to one counts), a run (`--run`) and a dataset (`--data`, the dataset the run
  was trained on). An output file that is an input or lies inside an input folder, an output folder
  that holds an input, two outputs that are one file are usage errors (exit 2), e.g.
  `synattn evaluate: error: --hypotheses data/dev/tgt.txt: lies inside the run's dataset data, which
  this command reads; write the output outside that folder`.
- **Folders a command fills** (`prepare -o`, `train --run-dir`, `reproduce -o`, `demo --out`,
  `viz -o`) must be new, empty, or the command's own: `prepare`, `train`, `reproduce` and `demo`
  write a marker file first (`.synattn-dataset`, `.synattn-run`, `.synattn-study`,
  `.synattn-demo`; folders of older versions are recognised by their own files: a manifest,
  checkpoints, the trainer's `config.yaml`, a study's `commands.sh`), and a `viz` folder holds only
  its images. Any other folder is a usage error naming a few of its files; only `prepare --force`
  writes into a folder of the user's (its `train/`, `dev/`, `test/` subfolders are then replaced), and
  never into or inside another command's folder (a run directory, a study). The file-system root,
  the home folder and the folders above it are refused by every command, `--force` or not.
  `corpus -o` takes a prefix of file names: a folder (`-o bible/`) is refused.
- **Locks**: one process at a time writes a run directory (`synattn train`) or a prepared dataset
  (`synattn prepare`): it holds an advisory lock on `.synattn.lock` in the folder, which names the
  holder (pid, host, start time, command). A second writer stops at once with exit status 1 and
  that name. The operating system drops the lock when its process ends, even by `kill -9`, so the
  file left behind is not a lock and the next run simply proceeds. Under `torchrun` rank 0 holds it.
  `synattn train` also holds a reader's (shared) lock on its dataset until it ends: `prepare` into that
  dataset (`--force` included) stops with exit status 1 naming the train, and a `train` started while
  `prepare` writes the dataset stops naming the `prepare`; a `prepare` with the same settings, which
  writes nothing, needs no lock.
- **`prepare -o OUT`** writes only inside `OUT` (see the folders above). Splits are built in
  `OUT/.building` and moved into place; a failure (a full disk, an interruption) removes it, and a
  link where a split folder was is removed, not followed. `--limit` and `--max-words` hold for
  every input (a corpus, text files, given treebanks), and the manifest says what was prepared.
- **`--max-len`** (`translate`, `induce`, `viz`): an input sentence of more subword pieces stops the
  command with its line number, or with `--on-error skip` (`translate`, `induce`) is left out (an
  empty output line and a warning), instead of running out of memory. `parse` does the same with a
  line longer than spaCy's `nlp.max_length` (1,000,000 characters): `FILE:LINE` and the ways out
  (`--max-words`, `--on-error skip`). `viz` draws one sentence (`--index`): only that line must be
  a sentence, and a long one is drawn with its labels thinned (each heatmap at most 2,000 pixels a
  side).
- **Damaged files**: commands that read a run check its checkpoint (weights, config) and the
  prepared dataset (manifest, labels, sentencepiece models, arrays of the split) first; a damaged
  or hand-edited file is a one-line error naming it. `--data` must have the run's vocabulary.
  Opening a split of a prepared dataset always checks the manifest and the shapes of its arrays
  (one sentence count, offsets that fit: milliseconds); `synattn train` also checks every stored
  index of `train` and `dev` against its range before it writes anything (about a second for 30k
  sentence pairs)."""


def render() -> str:
    os.environ["COLUMNS"] = "100"  # stable line wrapping of argparse help
    from synattn.cli.main import build_parser

    parser = build_parser()
    parts = ["# Command-line reference", "",
             "Generated by `scripts/cli_docs.py` from the commands' own `--help` "
             f"(Python {sys.version_info.major}.{sys.version_info.minor}).", "",
             "```", parser.format_help().rstrip(), "```", "", GENERAL, ""]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        parts += [f"## synattn {name}", "", "```", command.format_help().rstrip(), "```", ""]
    return "\n".join(parts)


if __name__ == "__main__":
    target = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
    target.write_text(render(), encoding="utf-8")
    print(f"wrote {target}", file=sys.stderr)
