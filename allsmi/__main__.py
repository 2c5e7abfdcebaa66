"""``python -m allsmi``."""

from allsmi.cli.main import main

main()
