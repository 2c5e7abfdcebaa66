"""What the dashboard keeps between refreshes: devices and their history, idle time, totals."""
