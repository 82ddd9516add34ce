"""Tests of synattn/methods/."""
