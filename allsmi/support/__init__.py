"""The tools under everything, which know nothing of accelerators: files written whole
(``atomic``) and read within a bound (``boundedread``), where a TOML key stands (``tomlkeys``),
installed entry points without ``importlib.metadata`` (``distinfo``), one call on one thread
(``worker``), loggers on first use (``lazylog``), the C heap kept small (``heap``), whose pids
``/proc`` shows (``pidns``), and what to tell a user who reached the wrong kind of server
(``nethint``). They import nothing else from allsmi (import-linter's first contract)."""
