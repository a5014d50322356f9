"""Shared fixtures: real servers started by the tests themselves."""

pytest_plugins = ["tests.pgfixtures", "tests.zkfixtures"]
