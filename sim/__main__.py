"""The ``sim`` command (the console script and ``python -m sim``): the same bits on every CPU, then the command line.

Reproducible numerics are the command's choice, not the library's: :func:`main` asks numpy for its baseline loops and
one BLAS thread before anything imports numpy (:func:`sim.core.numerics.reproducible_numerics`); ``import sim`` and
importing this module change nothing.
"""

import sys


def main() -> None:
    """Run the command line as ``sim``: numerics first, then the commands (Ctrl-C while they import is one line)."""
    from sim.core.numerics import reproducible_numerics

    reproducible_numerics()
    try:  # Ctrl-C while the command line is still being imported: the same one line and exit code as later
        from sim.cli import main as command_line
    except KeyboardInterrupt:
        sys.stderr.write("sim: error: interrupted\n")
        sys.exit(130)
    command_line()


if __name__ == "__main__":
    main()
