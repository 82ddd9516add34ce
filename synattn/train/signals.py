"""Ctrl-C (SIGINT) and ``kill`` (SIGTERM) during training: the run stops after the update under way,
with a checkpoint of it, so that ``--resume`` always has one.

While :class:`StopSignals` is entered (the training loop of :class:`~synattn.train.trainer.Trainer`),
either signal only sets a flag; the loop reads it after each update, writes a checkpoint of that
update (atomically, as every checkpoint: :mod:`synattn.train.checkpoint`) and then stops as the
signal would have stopped the process before: by the handler that was installed when training
began (Python's own for SIGINT raises ``KeyboardInterrupt``; a study's run process exits), or, for
a signal whose handler was the system's default, by :class:`TrainingStopped`. A second signal does
not wait for the update: it stops at once, as without this module. A signal that was ignored
(``SIG_IGN``: the run processes of a study leave Ctrl-C to the study) stays ignored, and outside the
main thread (where Python cannot install handlers) nothing changes.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals that stop a training run with a checkpoint."""


class TrainingStopped(KeyboardInterrupt):
    """The run was stopped by ``signum`` (SIGTERM with the system's default handler), after its
    checkpoint was written."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopSignals:
    """A context manager: SIGINT and SIGTERM set :attr:`received` instead of stopping at once (see
    the module docstring); :meth:`stop` then stops as the signal would have."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in SIGNALS:
            current = signal.getsignal(signum)
            if current in (signal.SIG_IGN, None):  # ignored (or set outside Python): left alone
                continue
            self.previous[signum] = current
            signal.signal(signum, self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()

    def _note(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:  # a second signal: at once, as without this handler
            self._deliver(signum, frame)
            return
        self.received = signum

    def restore(self) -> None:
        """Puts back the handlers found on entering (idempotent)."""
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous = {}

    def stop(self) -> None:
        """Stops as :attr:`received` would have stopped the process without this handler (raises)."""
        self._deliver(self.received or signal.SIGINT, None)

    def _deliver(self, signum: int, frame: FrameType | None) -> None:
        previous = self.previous.get(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
        self.restore()
        if callable(previous):
            previous(signum, frame)  # Python's SIGINT handler raises KeyboardInterrupt; a study's run exits
        raise TrainingStopped(signum)  # the system's default (SIGTERM ends the process) or a handler that returned
