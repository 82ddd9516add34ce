"""Tests of synattn/cli/."""
