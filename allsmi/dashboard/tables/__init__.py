"""The line-based tables (device table, processes panel) and the DataTable-based ones (groups, idle, hosts), with their columns and rows."""
