"""Re-run the command in each shipped `sim calibrate` or `sim fit-routing` file's header in a scratch copy of the
project and compare what it writes with the shipped file, byte for byte.

    python benchmarks/reproduce_calibrations.py [strata_moe.yaml] [basalt_moe.yaml] [routing.yaml]

Minutes per file on one core (the full search; the routing fit about 40 s); prints the wall time and whether each
file reproduced; exits 1 if one did not. The fast check of the same promise (the code simulates every recorded
residual at the file's values) is tests/test_shipped_calibrations.py; tests/test_routing_fit.py checks the routing
fit's rows.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = ("strata_moe.yaml", "basalt_moe.yaml", "routing.yaml")


def main(names: list[str]) -> int:
    failed = 0
    for name in names or FILES:
        shipped = os.path.join(ROOT, "calibration", name)
        with open(shipped, encoding="utf-8") as fh:
            text = fh.read()
        command = shlex.split(text.splitlines()[1].removeprefix("#").strip())
        with tempfile.TemporaryDirectory() as scratch:
            for part in ("scenarios", "calibration"):
                shutil.copytree(os.path.join(ROOT, part), os.path.join(scratch, part))
            start = time.perf_counter()
            assert command[0] == "sim" and command[1] in ("calibrate", "fit-routing"), command
            # this checkout's sim, whatever `sim` is on PATH
            run = subprocess.run([sys.executable, "-m", "sim", *command[1:]], cwd=scratch, capture_output=True,
                                 text=True, env={**os.environ, "PYTHONPATH": ROOT})
            wall = time.perf_counter() - start
            with open(os.path.join(scratch, "calibration", name), encoding="utf-8") as fh:
                again = fh.read()
        same = run.returncode == 0 and again == text
        failed += not same
        print(f"{name}: {'reproduced' if same else 'DIFFERS'} in {wall:.0f} s ({' '.join(command)})")
        if run.returncode:
            print(run.stderr[-2000:])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
