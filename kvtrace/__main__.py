"""``python -m kvtrace``."""

from kvtrace.cli import main

main()
