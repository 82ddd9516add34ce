"""Tests of synattn/trees/."""
