"""Imports the Python package `ibp` (python/) for the bench scripts.

The benchmarks call libibp through the real package, not a binding of their
own. Which libibp it loads:

* ``--lib PATH`` (a libibp.so, or a build directory holding one): that
  library, through the package's ``IBP_LIBRARY`` override;
* else the package as installed (``pip install ./python``: its own libibp);
* else, when the package is not installed, the package from the source tree
  (``python/src``) with the newest ``build*/libibp.so`` of this repository.

``load`` must run before anything else imports ``ibp`` (the library is
chosen once, at import).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "python" / "src"


def find_library(hint: str | None = None) -> Path:
    """libibp.so: ``hint`` (the .so itself, or a build directory holding it),
    else build/libibp.so, else the newest build-*/libibp.so. Raises
    FileNotFoundError naming the places looked at."""
    if hint:
        p = Path(hint)
        cands = [p] if p.suffix == ".so" or ".so." in p.name or p.is_file() else \
            [p / "libibp.so", p / "lib" / "libibp.so"]
    else:
        cands = [REPO / "build" / "libibp.so"]
        cands += sorted(REPO.glob("build-*/libibp.so"), key=lambda q: q.stat().st_mtime, reverse=True)
    for c in cands:
        if c.is_file():
            return c.resolve()
    raise FileNotFoundError("libibp.so not found; looked at: " + ", ".join(map(str, cands)))


def load(hint: str | None = None):
    """Imports and returns the `ibp` module (see the module doc for which
    libibp it loads). Raises ImportError or FileNotFoundError when neither
    an installed package nor the source tree with a built library is there."""
    if hint:
        lib = str(find_library(hint))
        if "ibp" in sys.modules and os.path.realpath(sys.modules["ibp"].library_path()) != \
                os.path.realpath(lib):
            raise ImportError("ibp is already imported with %s" % sys.modules["ibp"].library_path())
        os.environ["IBP_LIBRARY"] = lib
    try:
        import ibp
        return ibp
    except ImportError as e:
        if getattr(e, "name", None) != "ibp" or not (SRC / "ibp" / "__init__.py").is_file():
            raise
    if not os.environ.get("IBP_LIBRARY"):
        os.environ["IBP_LIBRARY"] = str(find_library(None))
    sys.path.insert(0, str(SRC))
    import ibp
    return ibp


def describe(ibp) -> str:
    """The package and library in use: where each is, and when the library was built."""
    lib = Path(ibp.library_path())
    built = time.strftime("%Y-%m-%d %H:%M", time.localtime(lib.stat().st_mtime))
    pkg = Path(ibp.__file__).resolve().parent
    where = os.path.relpath(pkg, REPO) if str(pkg).startswith(str(REPO)) else str(pkg)
    return f"{lib} (built {built}; libibp {ibp.library_version()}, package ibp {ibp.__version__} from {where})"
