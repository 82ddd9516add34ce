"""Tests of synattn/models/."""
