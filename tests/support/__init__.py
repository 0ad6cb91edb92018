"""Helpers shared by the test suite and the fixture-capture scripts."""
