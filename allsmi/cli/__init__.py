"""allsmi.cli."""
