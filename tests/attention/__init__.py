"""Tests of synattn/attention/."""
