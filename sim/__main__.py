import sys

try:  # Ctrl-C while the command line is still being imported: the same one line and exit code as later
    from sim.cli import main
except KeyboardInterrupt:
    sys.stderr.write("sim: error: interrupted\n")
    sys.exit(130)

if __name__ == "__main__":
    main()
