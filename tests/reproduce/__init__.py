"""Tests of synattn/reproduce/."""
