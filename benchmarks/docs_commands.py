"""Run, for real, the documentation blocks the test suite only parses: every console or python block of README.md and
docs/*.md marked ``<!-- docs-test: slow -->`` (the convention: tests/docs_blocks.py), with each command's wall time.

    python benchmarks/docs_commands.py                 # every slow block
    python benchmarks/docs_commands.py docs/sweeps.md  # the slow blocks whose id (FILE:N) starts with this
    python benchmarks/docs_commands.py --all README.md # every block of README.md, slow or not

Each block runs in its own scratch folder holding copies of scenarios/, calibration/ and benchmarks/ (a slow block
may write there: the checkout is never touched), each sim command as its own process (`python -m sim`, this
checkout's code). The same checks as the suite's: exit codes, the quoted lines, the files written. Prints one line
per command (seconds, the command) and per block (ok or FAILED with the reason); exits 1 if a block failed.
Minutes: the shipped sweeps and calibrations are among the slow blocks.
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
sys.path.insert(0, os.path.join(ROOT, "tests"))

from docs_blocks import LINKED, Block, DocsError, Step, all_blocks, run_console, run_subprocess  # noqa: E402


def timed(step: Step) -> tuple[int, str, str]:
    """A step as its own process, its wall time printed."""
    start = time.perf_counter()
    result = run_subprocess(step)
    print(f"  {time.perf_counter() - start:7.1f} s  {shlex.join(step.args)[:110]}", flush=True)
    return result


def run_python_block(block: Block, folder: str) -> None:
    """A python block as its own process in ``folder``; DocsError with its stderr if it fails."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "\n".join(block.body)], cwd=folder, capture_output=True, text=True,
                          check=False)
    print(f"  {time.perf_counter() - start:7.1f} s  python block", flush=True)
    if done.returncode:
        raise DocsError(f"{block.at(0)}: the block exits {done.returncode}:\n{done.stderr[-2000:]}")


def run_block(block: Block) -> str | None:
    """Run one block in a scratch copy of the project's inputs; None when it passes, else why."""
    with tempfile.TemporaryDirectory() as scratch:
        for name in LINKED:
            shutil.copytree(os.path.join(ROOT, name), os.path.join(scratch, name), symlinks=True)
        try:
            if block.info == "python":
                run_python_block(block, scratch)
            else:
                run_console(block, scratch, execute=True, runner=timed)
        except DocsError as exc:
            return str(exc)
    return None


def main(argv: list[str]) -> int:
    every = "--all" in argv
    prefixes = [a for a in argv if a != "--all"]
    chosen = [b for b in all_blocks() if (every or b.slow) and (not prefixes or any(b.id.startswith(p)
                                                                                     for p in prefixes))]
    os.environ["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")  # this checkout's sim
    failed = 0
    for block in chosen:
        print(f"{block.id} (line {block.line}{', slow' if block.slow else ''})", flush=True)
        start = time.perf_counter()
        why = run_block(block)
        failed += why is not None
        print(f"{block.id}: {'ok' if why is None else 'FAILED'} in {time.perf_counter() - start:.1f} s"
              + ("" if why is None else f"\n{why}"), flush=True)
    print(f"{len(chosen)} blocks, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
