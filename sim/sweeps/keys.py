"""What a sweep's run key hashes, besides the resolved scenario and the seed: the contents of every file the scenario
makes the run read (:func:`sim.config.files.input_files`) and the code that computes the result (every module of the
package, wherever it lives, and the versions of Python and of the libraries that draw its numbers)."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import sys

from sim.config.files import input_files
from sim.config.paths import set_dotted
from sim.core.numerics import numpy_dispatch

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the sim package's folder
_CODE_DIGEST: str | None = None
_FILE_DIGESTS: dict[tuple, str] = {}


def package_modules(root: str = PACKAGE) -> list[str]:
    """Every module of the package under ``root``, and the data files shipped with it (the catalog's YAML), as paths
    relative to it, sorted."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__")))
        found += [os.path.relpath(os.path.join(folder, f), root) for f in files if f.endswith((".py", ".yaml"))]
    return sorted(found)


def code_digest(root: str | None = None) -> str:
    """sha256 of the source of every module of the package (under ``root``; default: this one, kept once computed),
    of the versions of Python, numpy and simpy and of the CPU features numpy's loops use (they round differently):
    rows from other code are not reused."""
    global _CODE_DIGEST
    if root is None and _CODE_DIGEST is not None:
        return _CODE_DIGEST
    import numpy
    import simpy

    h = hashlib.sha256(f"python {sys.version_info[:2]} numpy {numpy.__version__} simpy "
                       f"{getattr(simpy, '__version__', '')} dispatch {numpy_dispatch()}\0".encode())
    for name in package_modules(root or PACKAGE):
        with open(os.path.join(root or PACKAGE, name), "rb") as fh:
            h.update(name.encode() + b"\0" + fh.read() + b"\0")
    if root is None:
        _CODE_DIGEST = h.hexdigest()
    return h.hexdigest()


def file_digest(path: str) -> str:
    st = os.stat(path)
    stamp = (os.path.abspath(path), st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
    if stamp not in _FILE_DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        _FILE_DIGESTS[stamp] = h.hexdigest()
    return _FILE_DIGESTS[stamp]


_NOT_RESULTS = ("description", "calibrate", "uncertainty")


def run_key(resolved: dict, seed: int) -> str:
    """Hash of a resolved scenario mapping, the seed, the files it reads (by content) and the code."""
    data = {k: v for k, v in resolved.items() if k not in _NOT_RESULTS}
    files = [(path, file) for path, file in input_files(data) if os.path.isfile(file)]
    if files:
        data = copy.deepcopy(data)
        for path, file in files:
            set_dotted(data, path, "sha256:" + file_digest(file), "run key")
    text = json.dumps({"scenario": data, "seed": seed, "code": code_digest()}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]
