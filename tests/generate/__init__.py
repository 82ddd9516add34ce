"""Tests of synattn/generate/."""
