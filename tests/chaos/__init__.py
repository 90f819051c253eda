"""Tests of the pure chaos checkers in om.chaos."""
