"""Tests of synattn/syntax/."""
