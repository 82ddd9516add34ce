"""Tests of synattn/data/."""
