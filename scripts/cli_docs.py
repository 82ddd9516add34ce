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
  interrupted (Ctrl-C at any moment, also while the command is still starting, and `train`'s own
  Ctrl-C, which keeps a checkpoint first). Errors are one line, `synattn COMMAND: error: ...`,
  naming the option or file, the key or line, and the cause; `--debug` (or `SYNATTN_DEBUG=1`) shows
  the traceback instead.
- **Error lines are safe to print**: a control character of an echoed path, override, YAML key or
  argument (an escape sequence, a carriage return, `\\x1e`, a bidi override) is written escaped as
  Python writes it (`\\x1b[2J`), the line breaks and tabs of a message become spaces, and a run of
  more than 300 characters without a space (a long path or value) is cut in its middle
  (`xxx…(119,700 characters left out)…xxx`), so a crafted file name cannot drive the terminal and
  an error stays one short line. A path too long for the file system is a usage error (exit 2).
- **Environment variables** are checked when a command starts, each error one line with exit status
  2: `SYNATTN_DEBUG` is on for `1`, `true`, `yes` or `on` (any case) and off for `0`, `false`, `no`,
  `off` or empty, and any other value is refused (a typo must not silently turn errors into
  tracebacks, or back); `SYNATTN_STRUCTS_BACKEND` must name a backend (`auto`, `torch`, `numba`,
  `triton`, `reference`; docs/structs.md).
- **Option ranges** are checked when the options are read: batch and beam sizes, limits,
  `--max-len`, `--min-layer` are positive integers, `--threshold` is in [0, 1], indices are 0 or
  more, split names are plain folder names (`train`, `dev`, `test`, ...). Counts that would only
  exhaust the machine are bounded: `--threads` (of any command) at most 1,024, the `--seeds` of
  `demo` and `reproduce` at most 1,000, a budget at most 1,000,000,000 updates or 1,000,000 minutes,
  `reproduce --jobs` at most 256.
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
  under the name asked for (a `viz` image, a translation, a checkpoint, a run's copy of the
  tokenizers), the temporaries are removed when the write fails (no `ckpt_NNNNNN.tmp`, `vocab.tmp` or
  `.building` is left behind), and a checkpoint that cannot be written keeps the last complete one.
  A disk that fills under `train`'s TensorBoard events is the same one-line error, never a success.
  `tests/cli/test_full_disk.py` fills the disk under `translate`, `viz`, `prepare`, `train` (the
  tokenizer copy, a checkpoint, the events) and `reproduce`.
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
  `synattn train` (and every run a study of `synattn reproduce` trains) also holds a reader's
  (shared) lock on its dataset until it ends: `prepare` into that dataset (`--force` included) stops
  with exit status 1 naming the train, and a `train` started while `prepare` writes the dataset stops
  naming the `prepare`, before it reads anything; a `prepare` with the same settings, which writes
  nothing, needs no lock (`tests/cli/test_races.py` runs the two processes against each other). The
  lock file is opened without following a link: a `.synattn.lock` that is a symbolic link (or a named
  pipe, a device) is refused with exit status 2 naming it, and the file it points to is left as it
  is; a lock file removed and made anew while a lock is taken is locked again by its new name.
- **Links are never followed where synattn writes or removes**: inside the folders a command makes
  its own, the lock files, a dataset's `cache/`, a run's `checkpoints/`, `snapshots/`, `vocab/`,
  `tensorboard/`, `log.jsonl` and `config.yaml`, a study's `runs/`, `configs/`, `plots/` and `text/`
  (and a demo's `configs/`, `logs/`) must not be symbolic links: one is refused before anything is
  written (exit status 2, one line naming it), and what it points to stays as it was (a run whose
  `checkpoints/` links to a folder of yours, resumed with `keep_last_n: 1`, removes nothing there).
  A link left where synattn keeps a temporary (`.building`, `ckpt_NNNNNN.tmp`, `*.del`, `vocab.tmp`)
  is removed as a link; an output file that is a link is replaced by the new file, never written
  through (the system's own `/dev/stdout` and `/proc/self/fd/N` aside); a marker file that is a link
  makes no folder a command's own. The folder you name (`-o`, `--run-dir`, `--data`, a study's
  `data/`) may itself be a link: where it points is your choice. `tests/test_links.py` checks each.
- **`prepare -o OUT`** writes only inside `OUT` (see the folders above). Splits are built in
  `OUT/.building` and moved into place; a failure (a full disk, an interruption) removes it, and a
  link where a split folder was is removed, not followed. `--limit` and `--max-words` hold for
  every input (a corpus, text files, given treebanks), and the manifest says what was prepared.
- **Lines of input text are checked before any parser or tokenizer sees them**, by every command
  that reads sentences (`translate`, `induce`, `viz`, `parse`, `prepare`; the token lines of the
  CoNLL-U files of `stats` and `prepare --src-trees`): a line must be UTF-8, not empty, at most
  100,000 characters (a longer one is never read whole into memory), without control characters
  (a NUL byte, an escape, DEL; tabs and other white space are spaces), and of at most the
  command's words: `--max-words` (`prepare`, 250 by default; `parse`, none unless given) or
  `--max-len` (`translate`, `induce`, `viz`: every word is at least one subword piece). A bad line
  stops the command with `FILE:LINE: cause` (exit status 2); `--on-error skip` (`translate`,
  `induce`, `parse`, `prepare`, `stats`) leaves out exactly the bad lines (of a CoNLL-U file, their
  sentences; an empty output line each where the output follows the input's lines), writes the
  others and says how many it left out, why, and which (`FILE: skipped 2 line(s) (…): line(s) 4,
  9`). `viz` draws one line (`--index`): only that line must be a sentence, and its error names
  it. A file whose first 8 KiB hold NUL bytes on many lines is no text (a binary or UTF-16 file)
  and is refused whole.
  `tests/cli/test_text_limits.py` checks each limit under each command.
- **`--max-len`** (`translate`, `induce`, `viz`): an input sentence of more subword pieces stops the
  command with its line number, or with `--on-error skip` (`translate`, `induce`) is left out (an
  empty output line and a warning), instead of running out of memory. `parse` does the same with a
  line longer than the pipeline's `nlp.max_length` (spaCy's default, 1,000,000 characters, is above
  the 100,000 of every line): `FILE:LINE` and the ways out (`--max-words`, `--on-error skip`). A
  long sentence that `viz` draws is drawn with its labels thinned (each heatmap at most 2,000
  pixels a side).
- **Damaged files**: commands that read a run check its checkpoint (weights, config) and the
  prepared dataset (manifest, labels, sentencepiece models, arrays of the split) first; a damaged
  or hand-edited file is a one-line error naming it. `--data` must have the run's vocabulary.
  Opening a split of a prepared dataset always checks the manifest and the shapes of its arrays
  (one sentence count, offsets that fit: milliseconds); `synattn train` also checks every stored
  index of `train` and `dev` against its range before it writes anything (about a second for 30k
  sentence pairs). A checkpoint's weights are checked against the run's config before they are
  read: every tensor's shape, and floating weights stored as float32, float16 or bfloat16 (float64
  weights are refused naming the file and the tensor); the weights, `state.pt` and `log.jsonl`
  must be regular files (a named pipe or a device is refused, never waited on). A `log.jsonl` that
  is not a log (not UTF-8, a line of JSON that is no record) stops `train --resume` before it writes
  anything; a line cut by a killed process is skipped. A run whose copy of its tokenizers and labels
  (`RUN/vocab`) is gone is refused naming it, never read with whatever the dataset holds now.
  `tests/cli/test_damaged_runs.py` damages each file under `translate`, `evaluate` and `train --resume`.
- **Config values are typed and bounded when read**: a config nested more than 32 levels deep is
  refused naming the file; every integer and number is at most 10^15 in magnitude, and the keys that
  decide a run's size or numbers have their own bounds: `layers` of a stack at most 1,000,
  `train.seed` in [0, 2^32 − 1], `train.lr` at most 10, `train.max_epochs` at most 1,000,000,
  `train.max_steps` and `warmup_updates` at most 10^10, `train.max_minutes` at most ten years,
  `train.eps` at most 1, `train.weight_decay` at most 10, `num_pos_tags` and `num_deprels` at most
  100,000; `d_model`, `ffn_dim` and the vocabulary sizes are refused when the model's float32
  weights would exceed the machine's memory. Each error is one line naming the key
  (`config.yaml: train.seed=-1 must be in [0, 4294967295] …`); `tests/test_config_bounds.py`."""


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
