"""What a folder holds, byte for byte: the studies' tests compare it before and after a refusal."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def tree_state(folder: Path) -> dict[str, str] | None:
    """Every path under ``folder`` (lock files included, folders too) with the SHA-1 of a file's
    bytes, ``"folder"`` or a link's target; None when ``folder`` does not exist."""
    if not os.path.lexists(folder):
        return None
    state = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            key = str(path.relative_to(folder))
            if path.is_symlink():
                state[key] = "link to " + os.readlink(path)
            elif path.is_dir():
                state[key] = "folder"
            else:
                state[key] = hashlib.sha1(path.read_bytes()).hexdigest()
    return state
