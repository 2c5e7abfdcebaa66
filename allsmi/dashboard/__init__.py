"""allsmi.dashboard."""
