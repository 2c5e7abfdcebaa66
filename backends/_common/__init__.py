"""What more than one vendor package uses: finding and running vendor tools, device presence,
process owners. Importing this package imports none of its modules."""
