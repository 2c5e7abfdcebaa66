"""What each view and panel shows: the details and totals panels, the summary lines, the cluster view's hosts, the idle view, and the drawing primitives (palette, gauges, safe text)."""
