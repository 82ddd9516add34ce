"""Tests of synattn/hf/."""
