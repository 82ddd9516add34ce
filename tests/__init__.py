"""The test suite, laid out like the synattn package (tests/README.md)."""
