"""allsmi.exporter."""
