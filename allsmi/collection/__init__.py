"""Collecting: the backends found (``registry``), each run on its own thread (``backendrunner``),
the one sampling loop every consumer shares (``collector``), and what it adds to each snapshot:
the host (``host``), resource groups (``groups``) and what each holder waited on
(``waiting``). Below every consumer and the CLI (import-linter's contracts)."""
