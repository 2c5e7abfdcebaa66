"""Honest activity from ``amdsmi_get_gpu_metrics_info`` (the driver's ``gpu_metrics`` table).

One call per whole GPU, and one per partitioned board (through its first answering partition:
the table is the socket's, the same through every partition). What each field becomes:

=================================  ============================================================
``xcp_stats.gfx_busy_inst``         per XCC (accelerator complex die) busy percent, grouped by
                                    XCP (compute partition): a partition's
                                    ``compute_active_percent`` is the mean of its own XCCs, a
                                    whole GPU's or board's the mean of all of them (source
                                    ``gfx_busy``). Read only where the table says how many
                                    partitions it describes (``num_partition``, metrics 1.6 and
                                    later, MI300 class): older tables have no such rows.
``average_gfx_activity``            a whole GPU's or board's ``compute_active_percent`` where
                                    there are no per-XCC rows (source ``gfx_busy``); never a
                                    partition's (it is the whole socket's).
``average_umc_activity``            ``memory_bandwidth_percent`` (memory controller busy), of
                                    the whole GPU or board.
``average_mm_activity``             ``details.mm_activity_percent`` (video engines), documented
                                    only: not compute.
``xgmi_read_data_acc`` /            per-link accumulated KB (1024 bytes) read and written over
``xgmi_write_data_acc``             xGMI; the change between two cycles over the time between
                                    them is ``interconnect_rx_bytes_per_second`` /
                                    ``interconnect_tx_bytes_per_second``.
``pcie_bandwidth_inst``             ``details.pcie_bandwidth_gigabytes_per_second``: both
                                    directions together, so not the rx/tx fields.
=================================  ============================================================

"N/A" (amdsmi's rendering of the all-ones sentinel, and of an activity above 100) is unknown,
never 0. ``xcp_stats.gfx_busy_acc`` (accumulated busy) is not used: its time base is not
documented well enough to turn it into a percentage without guessing. The xGMI counters are
first read when the backend opens, so the first cycle has a rate where at least
:data:`MIN_RATE_SECONDS` passed since. A counter that goes backwards (a driver reload, a reset)
gives no rate for that cycle and a warning; the next cycle measures from the new value.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from allsmi.backends.amd import convert as conv
from allsmi.backends.amd.calls import Calls, mapping
from allsmi.backends.amd.read import Readings
from allsmi.schema import DetailValue

FUNCTION = "amdsmi_get_gpu_metrics_info"
SOURCE = "gfx_busy"
#: xGMI counters are in KB; the driver's KB are 1024 bytes.
_KB = 1024
#: The shortest interval a rate is computed over: the firmware refreshes the table every few
#: milliseconds, so a shorter one would be mostly rounding. A cycle sooner than this keeps
#: measuring from the older reading.
MIN_RATE_SECONDS = 0.1


def read_metrics(calls: Calls, handle: Any) -> Mapping[str, Any]:
    """The handle's ``gpu_metrics`` table, empty when it gives none."""
    return mapping(calls("GPU metrics", FUNCTION, handle))


def _percent(value: object) -> float | None:
    number = conv.reading(value, conv.SENTINELS_U32)
    if number is None or not 0.0 <= number <= 100.0:
        return None
    return float(number)


def xcc_busy(metrics: Mapping[str, Any], partition: int | None) -> list[float]:
    """Busy percent of each XCC reported for ``partition`` (``None``: every partition)."""
    partitions = conv.whole(metrics.get("num_partition"), conv.SENTINELS_U32)
    rows = metrics.get("xcp_stats.gfx_busy_inst")
    if partitions is None or partitions <= 0 or not isinstance(rows, list):
        return []
    rows = rows[:partitions]
    if partition is not None:
        rows = rows[partition:partition + 1] if partition >= 0 else []
    busy: list[float] = []
    for row in rows:
        if isinstance(row, list):
            busy.extend(p for p in map(_percent, row) if p is not None)
    return busy


def device_activity(metrics: Mapping[str, Any], partition: int | None
                    ) -> tuple[dict[str, Any], dict[str, DetailValue]]:
    """``(values, details)`` of a whole GPU or board (``partition=None``) or of compute
    partition ``partition`` (its XCCs only; the socket-wide fields belong to the board)."""
    values: dict[str, Any] = {}
    details: dict[str, DetailValue] = {}
    if not metrics:
        return values, details
    busy = xcc_busy(metrics, partition)
    if busy:
        values["compute_active_percent"] = round(sum(busy) / len(busy), 3)
        details["xcc_busy_percent"] = tuple(busy)
    elif partition is None:
        values["compute_active_percent"] = _percent(metrics.get("average_gfx_activity"))
    if values.get("compute_active_percent") is not None:
        values["compute_active_source"] = SOURCE
    if partition is None:
        values["memory_bandwidth_percent"] = _percent(metrics.get("average_umc_activity"))
        mm = _percent(metrics.get("average_mm_activity"))
        if mm is not None:
            details["mm_activity_percent"] = mm
        pcie = conv.reading(metrics.get("pcie_bandwidth_inst"), conv.SENTINELS_U64)
        if pcie is not None and pcie >= 0:
            details["pcie_bandwidth_gigabytes_per_second"] = float(pcie)
    return values, details


def _links(value: object) -> dict[int, int] | None:
    """Link number -> accumulated KB, for the links that report; ``None`` when none does."""
    if not isinstance(value, list):
        return None
    links = {}
    for position, raw in enumerate(value):
        number = conv.whole(raw, conv.SENTINELS_WIDE_ONLY)
        if number is not None:
            links[position] = number
    return links or None


class LinkCounters:
    """xGMI read/write counters of each device between cycles, turned into rates."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, dict[int, int], dict[int, int]]] = {}

    def rates(self, key: str, metrics: Mapping[str, Any], now: float, label: str,
              warnings: list[str]) -> dict[str, float]:
        """Bytes per second received and sent since the previous call for ``key`` (empty the
        first time, after a gap, when the links changed or a counter went backwards)."""
        read = _links(metrics.get("xgmi_read_data_acc"))
        written = _links(metrics.get("xgmi_write_data_acc"))
        previous = self._last.pop(key, None)
        if read is None or written is None:
            return {}
        self._last[key] = (now, read, written)
        if previous is None:
            return {}
        then, read_before, written_before = previous
        elapsed = now - then
        if 0 <= elapsed < MIN_RATE_SECONDS and read.keys() == read_before.keys():
            self._last[key] = previous  # too soon: the next cycle measures from the older one
            return {}
        if elapsed <= 0 or read.keys() != read_before.keys() \
                or written.keys() != written_before.keys():
            return {}
        if any(read[k] < read_before[k] for k in read) or \
                any(written[k] < written_before[k] for k in written):
            warnings.append(f"{label}: xGMI data counters went backwards (driver reload or "
                            "reset); interconnect traffic unknown for this interval")
            return {}
        return {
            "interconnect_rx_bytes_per_second":
                sum(read[k] - read_before[k] for k in read) * _KB / elapsed,
            "interconnect_tx_bytes_per_second":
                sum(written[k] - written_before[k] for k in written) * _KB / elapsed,
        }


class ActivityReader:
    """The backend's side: one ``gpu_metrics`` read per whole GPU or board per cycle, its
    figures put into the readings of the GPU, the board and each partition."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._links = LinkCounters()
        #: Which partition of each board gave the table last time (by position).
        self._metrics_from: dict[str, int] = {}

    def baseline(self, calls: Calls, handle: Any, key: str, label: str) -> Mapping[str, Any]:
        """The xGMI counters' first reading (at open), so the first cycle has a rate; the
        table read (empty when none), for the partition count it states."""
        metrics = read_metrics(calls, handle)
        self._links.rates(key, metrics, self._clock(), label, [])
        return metrics

    def whole(self, readings: Readings, calls: Calls, handle: Any, key: str, label: str,
              warnings: list[str]) -> None:
        """A whole GPU's figures, through its own handle."""
        self._socket(readings, read_metrics(calls, handle), key, label, warnings)

    def board(self, own: Readings, parts: Sequence[tuple[Any, Calls, Readings]], key: str,
              label: str, warnings: list[str]) -> None:
        """A partitioned board's figures into ``own``, each partition's into its readings:
        one table (it is the socket's), through the first partition that gives one."""
        metrics = self._board_metrics(parts, key)
        for dev, _, readings in parts:
            partition = dev.partition_id if dev.partition_id is not None else -1
            values, details = device_activity(metrics, partition)
            readings.values.update(values)
            readings.details.update(details)
        self._socket(own, metrics, key, label, warnings)

    def _board_metrics(self, parts: Sequence[tuple[Any, Calls, Readings]], key: str
                       ) -> Mapping[str, Any]:
        """The socket's table through the first answering partition that gives one, starting
        at the one that did last time: a partition whose call fails (its failure reported
        under it) leaves the board and the other partitions their figures. A board that gave
        no table on a full scan is asked through one partition a cycle after that."""
        start = self._metrics_from.get(key, 0)
        for position in list(range(start, len(parts))) + list(range(0, start)):
            dev, calls, _ = parts[position]
            if calls.health == "lost":
                continue
            failures = sum(len(whats) for whats in calls.errors.values())
            metrics = read_metrics(calls, dev.handle)
            if metrics:
                self._metrics_from[key] = position
                return metrics
            failed = sum(len(whats) for whats in calls.errors.values()) > failures
            if key in self._metrics_from and not failed:
                break  # known to give none: one call a cycle, not one per partition
        self._metrics_from[key] = start
        return {}

    def _socket(self, readings: Readings, metrics: Mapping[str, Any], key: str, label: str,
                warnings: list[str]) -> None:
        values, details = device_activity(metrics, None)
        values.update(self._links.rates(key, metrics, self._clock(), label, warnings))
        readings.values.update(values)
        readings.details.update(details)
