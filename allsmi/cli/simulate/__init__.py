"""Billing a simulation (``allsmi export|idle|waste|report --simulate SCENARIO``): the scenario
replayed over a past window into a temporary ledger, which the bill then reads as it reads a
real one.

* :mod:`.bill` plans the replay, runs its chunks in worker processes and writes what they send
  back into the ledger;
* :mod:`.grid` says when the replay samples and how its window is cut into chunks;
* :mod:`.collect` is the replay's collector (the live collector's cycle, on simulated time);
* :mod:`.rows` packs the intervals a worker sends back;
* :mod:`.reuse` keeps a command's replays until it ends (a month to date extends the window's).
"""
