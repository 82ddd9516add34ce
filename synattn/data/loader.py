"""Collated batches in order, built in DataLoader worker processes when asked.

Training and validation turn lists of example indices into :class:`~synattn.data.batching.Batch`
objects (padding, and the syntax fields a model asks for: relation labels, tags, supervision
targets, computed from the stored subword trees). :func:`collated` does that for a whole list:

- ``num_workers=0``: in this process, one batch when it is asked for (what training always did);
- ``num_workers=k``: in ``k`` worker processes of a :class:`torch.utils.data.DataLoader`, a few
  batches ahead of the loop, so that collating overlaps the forward and backward passes (on a GPU
  the CPU is otherwise idle while it works).

Either way the batches come out in the order of the list and equal, tensor for tensor: collating
is a function of the indices alone (it draws no random numbers; masking and dropout happen in the
training step, under its per-batch seed), and the loader gets its own generator, so starting
workers leaves torch's global generator where it was. ``pin_memory=True`` puts every tensor in
page-locked memory (for a CUDA device: the copies to it can then be ``non_blocking``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from synattn.data.batching import Batch, collate
from synattn.syntax.request import SyntaxRequest


class _Collation(Dataset):
    """Item ``i`` is batch ``i`` of ``batches``, collated (what a worker computes)."""

    def __init__(self, data, batches: Sequence[np.ndarray], request: SyntaxRequest,
                 collate_fn: Callable[..., Batch]):
        self.data, self.batches, self.request, self.collate_fn = data, batches, request, collate_fn

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> Batch:
        return self.collate_fn(self.data, self.batches[i], self.request)


def _as_is(batch: Batch) -> Batch:
    return batch


def collated(data, batches: Sequence[np.ndarray], request: SyntaxRequest,
             collate_fn: Callable[..., Batch] = collate, num_workers: int = 0,
             pin_memory: bool = False) -> Iterator[Batch]:
    """The batches ``collate_fn(data, indices, request)`` of every ``indices`` of ``batches``, in order.

    Args:
        data: the dataset ``collate_fn`` reads (e.g. a :class:`~synattn.data.batching.PreparedDataset`).
        batches: ``[batch_size_i]`` index arrays, one per batch.
        request: the syntax fields to build.
        collate_fn: ``(data, indices, request) -> Batch``.
        num_workers: worker processes (0: collate here, when each batch is asked for).
        pin_memory: return batches in page-locked memory.

    Closing the iterator (or dropping it) stops the workers.
    """
    if num_workers == 0:
        for indices in batches:
            batch = collate_fn(data, indices, request)
            yield batch.pin_memory() if pin_memory else batch
        return
    loader = DataLoader(_Collation(data, batches, request, collate_fn), batch_size=None, shuffle=False,
                        # (batch_size=None: collate_fn gets one item, not the list torch's types say)
                        num_workers=num_workers, collate_fn=_as_is,  # type: ignore[arg-type]
                        pin_memory=pin_memory,
                        generator=torch.Generator().manual_seed(0))  # (not the global generator)
    yield from loader
