"""The processes panel: one line per process, drawn line by line, only where something changed.

A line-based widget (Textual's ``ScrollView`` with ``render_line``), as the device
table is, not a ``DataTable``: a ``DataTable`` keeps a row object, a cell
render cache, a line cache and row/column key maps of its own on top of the
cells, and renders every visible row again when one cell changes. Here each
process keeps, per cell, the value it was drawn from and its segments
(:class:`~allsmi.dashboard.tables.tablerows.Row`); a refresh compares the new cells
with those, renders again only the cells that changed (and only when their line
is on screen) and repaints only their lines. A new order repaints the visible
lines once. Every cell passes through :func:`~allsmi.dashboard.views.render.safe_text`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Hashable, Iterable, Mapping, Sequence

from rich.cells import cell_len
from rich.text import Text
from textual.geometry import Size
from textual.strip import Strip

from allsmi.fairshare import Holder, claim_units
from allsmi.schema.formatting import NA, human_bytes, percent
from allsmi.schema import DeviceSample, ProcessSample

from allsmi.dashboard.state.model import DeviceRef
from allsmi.dashboard.state.naming import device_name, fit_apart
from allsmi.dashboard.views.render import safe_text
from allsmi.dashboard.tables.linetable import LineTable, table_css
from allsmi.dashboard.tables.tablerows import PAD, Row, render_width

#: The processes panel shows at most this many processes (the biggest by memory); its title
#: says how many there are. A host of 4096 devices x 30 processes is 122,880.
MAX_PROCESS_ROWS = 100
#: The device column's widest (a long host name is cut before its ``:index``).
DEVICE_MAX_WIDTH = 40
#: The command column's narrowest; it widens to the panel's edge.
COMMAND_MIN_WIDTH = 12


def size(proc: ProcessSample) -> int:
    """The memory a process holds, for ordering: -1 where it is unknown (after 0 bytes)."""
    return -1 if proc.memory_bytes is None else proc.memory_bytes


def device_label(host: str, name: str, limit: int = DEVICE_MAX_WIDTH) -> str:
    """``host:name`` (``node-a:nvidia 7/1/0``), the host cut with an ellipsis so that the whole
    fits ``limit`` cells: the device's name is never cut."""
    whole = f"{host}:{name}"
    if cell_len(whole) <= limit:  # cells, not characters: a CJK or emoji host takes two each
        return whole
    cut = Text(host)
    cut.truncate(max(1, limit - cell_len(name) - 2) + 1, overflow="ellipsis")
    return f"{cut.plain}:{name}"


def holder_id(proc: ProcessSample, holder: Holder | None = None) -> str:
    """The process's batch job id, else the job or the pod of the holder it belongs to on its
    device (``holder``: the details panel's, :func:`process_holders`), else its pod's uid (from
    its cgroup), else ``-``: a process whose own sample names no job is still shown with the
    job that holds its device."""
    if proc.job_id:
        return proc.job_id
    if holder is not None and (holder.job or holder.pod):
        return holder.job or holder.pod  # type: ignore[return-value]
    return proc.pod_uid or "-"


def process_holders(dev: DeviceSample) -> dict[int, Holder]:
    """Pid -> the holder each process of ``dev`` belongs to, as the details panel and the
    ledger attribute them (:func:`allsmi.fairshare.claim_units`: every process of a device held
    by one workload is that workload's; with several, those whose job id is a workload's)."""
    out: dict[int, Holder] = {}
    for unit in claim_units(dev):
        for holder, mine in unit.members:
            for proc in mine:
                out.setdefault(proc.pid, holder)
    return out


def _freeze(cell: Any) -> Hashable:
    if isinstance(cell, Text):
        return (cell.plain, str(cell.style), cell.justify,
                tuple((s.start, s.end, str(s.style)) for s in cell.spans))
    return cell


class ProcessTable(LineTable):
    """Processes on the selected device (and its partitions) or on every device shown
    (header line fixed, rows scrolling beneath it; a row cursor, as the device table's)."""

    #: The device is as wide as it needs (``host:index`` in a cluster) up to
    #: :data:`DEVICE_MAX_WIDTH`; the command takes the rest of the panel's width, so that it is
    #: cut (with an ellipsis) at the panel's edge, never by the edge.
    COLUMNS = (("pid", "pid", 7), ("user", "user", 10), ("memory", "memory", 10),  # "1010.0 MiB"
               ("util", "util", 5), ("device", "device", None), ("job", "job / pod", 12),
               ("command", "command", COMMAND_MIN_WIDTH))
    """``util`` is the process's share of the device's compute engines over the last interval
    (``ProcessSample.utilization_percent``: NVIDIA %SM, AMD GFX time), ``N/A`` when the vendor
    does not report it. A width of ``None``: as wide as the widest cell shown."""
    #: Which columns a narrow panel keeps, first first: the command and ``util`` before a long
    #: device name. The columns left out are named in the panel's title (:attr:`hidden`).
    PRIORITY = ("pid", "util", "command", "user", "memory", "device", "job")

    COMPONENT_PREFIX = "process-table"
    COMPONENT_CLASSES: ClassVar[set[str]] = {"process-table--header", "process-table--cursor"}
    DEFAULT_CSS = table_css("ProcessTable", "process-table")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._natural = [width or len(label) for _, label, width in self.COLUMNS]
        """Each column's width before the panel's width is applied (auto columns: their text's)."""
        self._widths = list(self._natural)
        """As drawn: 0 for a column left out."""
        self._table_width = sum(w + 2 * PAD for w in self._widths)
        self._laid_out_for = -1
        self._rows: dict[str, Row] = {}
        self._values: dict[str, tuple[Any, ...]] = {}
        """Each row's cells as last shown (rendered when their line is drawn)."""
        self._stale: dict[str, list[int]] = {}
        """Cells of a row whose value changed since they were rendered."""
        self._auto: dict[str, list[int]] = {}
        """Each row's cell widths in the auto-width columns."""
        self._header: Strip | None = None

    # -- the data side -------------------------------------------------------------------
    def show(self, refs: Sequence[DeviceRef], host_label: bool, names: dict[str, str],
             places: Mapping[str, str]) -> int:
        """Processes of ``refs``, biggest memory first: the :data:`MAX_PROCESS_ROWS` biggest,
        chosen without building a row for the others; each process's device by its one name
        (``places``: :mod:`allsmi.dashboard.state.naming`), after its host's in a cluster.
        Returns how many processes there are."""
        # An unknown size sorts after every known one (after 0 too); ties by device, then by
        # pid as a number (not as text: 162 before 1000).
        sizes = [-1 if p.memory_bytes is None else p.memory_bytes  # size(p), inline: 100,000s
                 for ref in refs for p in ref.device.processes or ()]
        total = len(sizes)
        smallest = -1
        if total > MAX_PROCESS_ROWS:  # the size of the Nth biggest: one sort of plain ints
            sizes.sort()
            smallest = sizes[-MAX_PROCESS_ROWS]
        del sizes

        def order(ref: DeviceRef, p: ProcessSample) -> tuple[int, str, int]:
            return -size(p), ref.key, p.pid

        biggest = [(ref, p) for ref in refs for p in ref.device.processes or ()
                   if (-1 if p.memory_bytes is None else p.memory_bytes) >= smallest]
        rows: list[tuple[tuple[int, str, int], str, tuple[Any, ...]]] = []
        if len(biggest) > MAX_PROCESS_ROWS:  # ties at the Nth size: the first in order
            biggest.sort(key=lambda c: order(*c))
            del biggest[MAX_PROCESS_ROWS:]
        holders: dict[str, dict[int, Holder]] = {}  # of the devices of the rows shown only
        here = {ref.host: names.get(ref.host, ref.host) for ref, _ in biggest} if host_label else {}
        cuts: dict[int, dict[str, str]] = {}  # room for the host -> the hosts' names cut apart
        for ref, proc in biggest:
            where = device_name(ref, places)
            if host_label:  # two hosts whose names are cut alike stay apart (fit_apart)
                room = DEVICE_MAX_WIDTH - cell_len(where) - 1
                fitted = cuts.get(room)
                if fitted is None:
                    fitted = cuts[room] = fit_apart(here, room)
                where = device_label(fitted[ref.host], where)
            mine = holders.get(ref.key)
            if mine is None:
                mine = holders[ref.key] = process_holders(ref.device) if ref.device.workloads else {}
            rows.append((order(ref, proc), f"{ref.key}\x1e{proc.pid}",
                         self.cells(proc, where, mine.get(proc.pid))))
        rows.sort(key=lambda r: r[0])
        self.set_rows((key, cells) for _, key, cells in rows)
        return total

    @staticmethod
    def cells(proc: ProcessSample, where: str, holder: Holder | None = None) -> tuple[Any, ...]:
        return (Text(str(proc.pid), justify="right"), proc.user or NA,
                Text(human_bytes(proc.memory_bytes), justify="right"),
                Text(percent(proc.utilization_percent), justify="right"), where,
                holder_id(proc, holder),
                proc.command or NA)

    def set_rows(self, rows: Iterable[tuple[str, Sequence[Any]]]) -> None:
        """Show ``rows`` (row key, cells in :attr:`COLUMNS` order) in this order; only the
        lines whose cells changed are repainted."""
        rows = list(rows)
        order = [key for key, _ in rows]
        reordered = order != self._order
        if reordered:
            wanted = set(order)
            for gone in [k for k in self._rows if k not in wanted]:
                for held in (self._rows, self._values, self._stale, self._auto):
                    held.pop(gone, None)
        auto = [i for i, (_, _, width) in enumerate(self.COLUMNS) if width is None]
        changed: list[str] = []
        size = len(self.COLUMNS)
        for key, cells in rows:
            row = self._rows.get(key)
            if row is None:
                row = self._rows[key] = Row(size)
            moved = [i for i, cell in enumerate(cells) if row.keys[i] != _freeze(cell)]
            if moved:
                for i in moved:
                    row.keys[i] = _freeze(cells[i])
                self._stale.setdefault(key, []).extend(moved)
                self._values[key] = tuple(cells)
                self._auto[key] = [safe_text(cells[i]).cell_len for i in auto]
                changed.append(key)
        self._order = order
        natural = list(self._natural)
        for n, i in enumerate(auto):
            label = self.COLUMNS[i][1]
            natural[i] = max([len(label)] + [lens[n] for lens in self._auto.values()])
        self._natural = natural
        if self._lay_out():  # a column grew, shrank, came or went: every cell again
            reordered = True
        self.virtual_size = Size(self._table_width, len(self._order) + 1)
        last = max(0, len(self._order) - 1)
        if self._cursor > last:  # (an empty table keeps its cursor at 0: nothing to repaint)
            self._cursor = last
            reordered = True
        if reordered:
            self.refresh()  # every visible line may show another process now
            return
        position = {key: i for i, key in enumerate(order)} if changed else {}
        for key in changed:
            self._refresh_row(position[key])

    def _lay_out(self) -> bool:
        """Fit the columns to the panel's width (:attr:`PRIORITY`; the command takes the rest);
        whether the widths changed."""
        # Inside the scrollbars: a command cut at the edge shows its ellipsis.
        room = self.scrollable_content_region.width or 10_000  # not laid out yet: everything
        ids = [cid for cid, _, _ in self.COLUMNS]
        keep: set[str] = set()
        used = 0
        for cid in self.PRIORITY:
            cells = self._natural[ids.index(cid)] + 2 * PAD
            if used + cells <= room or cid == "pid":
                keep.add(cid)
                used += cells
        widths = [self._natural[i] if cid in keep else 0 for i, cid in enumerate(ids)]
        command = ids.index("command")
        if widths[command]:
            widths[command] += max(0, room - used)
        self._laid_out_for = self.scrollable_content_region.width
        if widths == self._widths:
            return False
        self._widths = widths
        self._table_width = sum(w + 2 * PAD for w in widths if w)
        self._header = None
        size = len(self.COLUMNS)
        for key in self._order:
            self._rows[key] = Row(size)
            self._stale[key] = list(range(size))
        return True

    @property
    def hidden(self) -> list[str]:
        """The labels of the columns too narrow a panel leaves out."""
        return [label for (_, label, _), width in zip(self.COLUMNS, self._widths) if not width]

    def on_resize(self) -> None:
        self._fit_width()

    def render_lines(self, crop: Any) -> list[Strip]:
        self._fit_width()  # a scrollbar that came or went changes the room without a resize
        return super().render_lines(crop)

    def _fit_width(self) -> None:
        if self.scrollable_content_region.width != self._laid_out_for and self._lay_out():
            self.virtual_size = Size(self._table_width, len(self._order) + 1)
            self.refresh()

    def _row(self, key: str) -> Row:
        """The row of ``key`` with its changed cells rendered."""
        row = self._rows[key]
        stale = self._stale.pop(key, None)
        if stale:
            values = self._values[key]
            console = self.app.console
            for i in set(stale):
                if not self._widths[i]:  # left out at this width
                    row.cells[i] = []
                    row.styled[i] = None
                    continue
                value = values[i]  # rendering pads and cuts a Text: a copy keeps the value whole
                row.cells[i] = render_width(value.copy() if isinstance(value, Text) else value,
                                            self._widths[i], console)
                row.styled[i] = None
            row.line = None
            row.strip = Strip([s for cell in row.cells for s in cell], self._table_width)
        return row

    # -- what tests and the app read --------------------------------------------------------
    @property
    def row_keys(self) -> list[str]:
        """Row keys in display order."""
        return list(self._order)

    @property
    def row_count(self) -> int:
        """How many processes the panel holds (on screen or not)."""
        return len(self._order)

    @property
    def columns(self) -> list[tuple[str, str, int]]:
        """(id, label, width) of each column, as drawn now."""
        return [(key, label, width) for (key, label, _), width in zip(self.COLUMNS, self._widths)]

    @property
    def cursor_row(self) -> int:
        """Index of the highlighted row."""
        return self._cursor

    def get_row(self, row_key: str) -> list[Text]:
        """The texts a row shows now, one per column."""
        return [safe_text(c.copy() if isinstance(c, Text) else c) for c in self._values[row_key]]

    # -- drawing -------------------------------------------------------------------------
    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._header = None  # a theme change: the header's and rows' styles again

    def _header_strip(self) -> Strip:
        if self._header is None:
            console = self.app.console
            segments = [s for (_, label, _), width in zip(self.COLUMNS, self._widths) if width
                        for s in render_width(Text(label), width, console)]
            self._header = Strip(segments, self._table_width)
        return self._header


__all__ = ["MAX_PROCESS_ROWS", "ProcessTable", "device_label", "holder_id"]
