"""Tests of synattn/train/."""
