"""A method that claims what it is given, for the tests of the claims rule (synattn/attention/claims.py)."""

from __future__ import annotations

from synattn.methods import Method


class Claims(Method):
    """A method that is always on and claims what it is given (not registered)."""

    name = "claims"

    def __init__(self, claims):
        self._claims = claims

    def active(self, stack):
        return True

    def claims(self, model, side, stack):
        return self._claims
