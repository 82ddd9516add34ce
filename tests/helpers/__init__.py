"""Shared pieces of the tests (no tests here): brute-force enumerations of the structures, attention
references, tiny models and runs, the command's sandbox. A test module imports them from here, never
from another test module (tests/test_architecture.py checks it)."""
