"""Tests of synattn/evaluate/."""
