"""allsmi.accounting."""
