"""The billing commands: ``allsmi export`` (:mod:`.export`), ``idle`` (:mod:`.idle`), ``waste``
(:mod:`.waste`) and ``report`` (:mod:`.htmlreport`), each reading usage for a window from the
ledger, from Prometheus or from a simulation.

* :mod:`.reportoptions` are the options every one of them takes, and :mod:`.reportcmd` what
  they share: the source, the window and the grouping read into one report;
* :mod:`.holderreport` ranks the holders of a report (``idle`` and ``waste``);
* :mod:`.budgets` reads the month to date for the budget columns, whatever the window;
* :mod:`.sparing` refuses an output that would write over a ledger.
"""
