"""The ctypes mirrors of C structs (ibp/_structs.py) against the C compiler:
tests/abi/abi_layout.c is compiled against the package's installed headers
and tests/abi/test_ctypes_abi.py compares sizes, alignments, member names,
offsets and sizes, and that every member the header declares is mirrored."""

import os
import shutil
import subprocess
import sys

import pytest

import ibp
from conftest import REPO

PKG = os.path.dirname(os.path.abspath(ibp.__file__))


def test_struct_layouts_match_c(tmp_path):
    src = os.path.join(REPO, "tests", "abi", "abi_layout.c")
    checker = os.path.join(REPO, "tests", "abi", "test_ctypes_abi.py")
    assert os.path.isfile(src) and os.path.isfile(checker), "tests/abi is missing in " + REPO
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler to print the C layout")
    inc = os.path.join(PKG, "include")
    assert os.path.isfile(os.path.join(inc, "ibp.h")), "the package installs its headers"
    exe = tmp_path / "abi_layout"
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", inc, src, "-o", str(exe)], check=True)
    # The checker reads the headers under REPO (member lists); the installed ones must be those.
    for h in sorted(os.listdir(os.path.join(inc, "ibp"))):
        with open(os.path.join(inc, "ibp", h), "rb") as f1, \
                open(os.path.join(REPO, "include", "ibp", h), "rb") as f2:
            assert f1.read() == f2.read(), "installed %s differs from the source tree's" % h
    r = subprocess.run([sys.executable, checker, str(exe), REPO, os.path.join(PKG, "_structs.py")],
                       capture_output=True, text=True)
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    from ibp import _structs
    mirrored = {c.c_name for c in vars(_structs).values() if hasattr(c, "c_name")}
    # the codec options at least; every mirror (cache structs too) goes through the checker above
    assert {"ibp_train_opts_t", "ibp_exp_opts_t", "ibp_fp8_opts_t"} <= mirrored
    for name in mirrored:
        assert "ok: " in r.stdout and name in r.stdout
