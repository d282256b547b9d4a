"""The examples of python/README.md run as doctests (in a scratch directory)."""

import doctest
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(os.path.dirname(HERE), "README.md")


def test_readme_examples(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = doctest.testfile(README, module_relative=False, optionflags=doctest.ELLIPSIS
                         | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert r.attempted >= 30, r  # the examples are there and ran
    assert r.failed == 0, r
