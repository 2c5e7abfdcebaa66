"""The host evidence of a simulated node (``--simulate``): what the simulated backends say
their processes did, and a quiet node, as pure functions of the simulation's time.

The simulated backends know what their jobs stall on (``backends/simulated/activity.py``);
the CLI hands their ``host_evidence`` methods to :class:`SimulatedHostActivity`, so this layer
never imports a backend.
"""

from __future__ import annotations

from typing import Any, Callable, Collection, Mapping, Sequence

from .sampler import HostActivity, NodeActivity, ProcessActivity

Evidence = Callable[[Collection[int]], Mapping[int, Mapping[str, Any]]]

#: The simulated node: a little background traffic, no InfiniBand, no pressure to speak of.
SIMULATED_NODE = NodeActivity(cpu_iowait_percent=0.4, pressure_percent={"cpu": 1.0, "io": 0.5,
                                                                         "memory": 0.0},
                              network_rx_bytes_per_second=2.0e6, network_tx_bytes_per_second=1.5e6)


class SimulatedHostActivity:
    """A :class:`allsmi.collection.waiting.HostSource` over the simulated backends' evidence."""

    def __init__(self, sources: Sequence[Evidence]) -> None:
        self.sources = tuple(sources)
        #: Each process's last evidence and what was made of it: much of it (helpers, stalls)
        #: is the same from one cycle to the next.
        self._last: dict[int, tuple[Mapping[str, Any], ProcessActivity]] = {}

    def sample(self, pids: Collection[int],
               detailed: Collection[int] | None = None) -> HostActivity:
        processes: dict[int, ProcessActivity] = {}
        wanted = set(pids)
        last = self._last
        for source in self.sources:
            for pid, fields in source(wanted).items():
                seen = last.get(pid)
                if seen is not None and seen[0] == fields:
                    processes[pid] = seen[1]
                else:
                    processes[pid] = activity = ProcessActivity(pid=pid, **fields)
                    last[pid] = (fields, activity)
        if len(last) > 4 * len(processes) + 256:  # processes long gone
            self._last = {pid: last[pid] for pid in processes}
        return HostActivity(processes, SIMULATED_NODE, None)
