"""Counterexamples: public issues reproduced as buggy/fixed pairs, each with the verdict it should get."""
