"""Tests of synattn/viz/."""
