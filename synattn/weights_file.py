"""Checks of a safetensors weights file against the model it is loaded into, before it is read.

:func:`read_header` reads a file's header (names, shapes, dtypes) with the ``safetensors``
library, which leaves the tensors unread: only a regular file is opened (a named pipe or a device
is refused without blocking on it), and a file too short for the header it declares (truncated,
or a header length of petabytes) is refused before the library allocates anything.
:func:`check_against` compares the header with the tensors of a model: a weight of another shape,
or floating weights in a type the model does not compute in (float64 halves nothing and silently
doubles memory; an integer type is not weights at all), is refused naming the file and the
tensor. Every refusal is an :class:`~synattn.errors.InputError` naming the file.
"""

from __future__ import annotations

import os
from pathlib import Path

from synattn.errors import InputError
from synattn.io import open_regular
from synattn.limits import format_bytes

FLOAT_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}
"""The safetensors dtypes accepted for floating weights."""

MAX_HEADER_BYTES = 100 * 1024 * 1024
"""The safetensors library's own bound of a header."""

Header = dict[str, tuple[tuple[int, ...], str]]


def read_header(path: str | Path, what: str = "weights file") -> Header:
    """``{name: (shape, safetensors dtype)}`` of the safetensors file ``path``, its tensors unread.

    Raises:
        InputError: ``path`` is missing, a link, not a regular file, truncated or not safetensors.
    """
    path = Path(path)
    try:
        fd = open_regular(path, os.O_RDONLY, what=what)
    except FileNotFoundError:
        raise InputError(f"is missing (the {what})", str(path)) from None
    except OSError as err:
        raise InputError(f"cannot be read: {err.strerror}", str(path)) from None
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
    declared = int.from_bytes(head, "little") if len(head) == 8 else None
    if declared is None or declared > size - 8 or declared > MAX_HEADER_BYTES:
        shown = (f"a file of {format_bytes(size)} has no header" if declared is None else
                 f"its header declares {format_bytes(declared)} in a file of {format_bytes(size)}")
        raise InputError(f"not a safetensors file ({shown}: truncated, damaged or another format)", str(path))
    try:
        from safetensors import safe_open

        out: Header = {}
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                part = f.get_slice(name)
                out[name] = (tuple(part.get_shape()), str(part.get_dtype()))
        return out
    except Exception as err:  # noqa: BLE001 (SafetensorError and friends: a damaged file)
        raise InputError(f"not a safetensors file ({' '.join(str(err).split())[:200]}; "
                         "truncated or damaged?)", str(path)) from None


def check_tensor(path: str | Path, key: str, stored: tuple[tuple[int, ...], str], shape: tuple[int, ...],
                 floating: bool, implied_by: str) -> None:
    """Refuses the stored ``(shape, dtype)`` of tensor ``key`` when it is not ``shape``, or not a
    float type of :data:`FLOAT_DTYPES` for a ``floating`` tensor (``implied_by`` names what says
    the shape: ``config.json``, ``the run's config``)."""
    got, dtype = stored
    if tuple(got) != tuple(shape):
        raise InputError(f"weights do not fit the model: weight {key} has shape {list(got)}, but {implied_by} "
                         f"implies {list(shape)} (were they saved from another config?)", str(path))
    if floating and dtype not in FLOAT_DTYPES:
        raise InputError(f"weight {key} is stored as {dtype}; model weights are "
                         f"{', '.join(FLOAT_DTYPES.values())}", str(path))


def check_against(path: str | Path, model, implied_by: str = "the run's config") -> Header:
    """Reads the header of ``path`` and refuses a tensor whose shape or dtype differs from the
    tensor of the same name of ``model`` (an ``nn.Module``); names missing from the file are left
    to the strict load that follows (tied weights are stored once). Returns the header."""
    header = read_header(path)
    for name, tensor in model.state_dict().items():
        if name in header:
            check_tensor(path, name, header[name], tuple(tensor.shape), tensor.is_floating_point(), implied_by)
            if not tensor.is_floating_point() and header[name][1] in FLOAT_DTYPES:
                raise InputError(f"weight {name} is stored as {header[name][1]}, where the model keeps "
                                 f"{str(tensor.dtype).removeprefix('torch.')}", str(path))
    return header
