"""Tests of synattn/structs/."""
