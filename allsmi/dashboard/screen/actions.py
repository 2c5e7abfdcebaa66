"""What the keys do: the dashboard's bindings and actions (a mixin of :class:`DashboardApp`).

Each action changes the view state (view, sort, filter, panel, theme) and
asks the app to redraw; the drawing itself stays in :mod:`allsmi.dashboard.screen.app`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from textual.binding import Binding

from allsmi.dashboard.state.idle import IDLE_SORTS
from allsmi.dashboard.screen.keynames import key_display
from allsmi.dashboard.state.filtering import Filter, filter_choices
from allsmi.dashboard.state.model import DESCENDING_BY_DEFAULT, SORT_KEYS
from allsmi.dashboard.screen.options import DEFAULT_THEME, LIGHT_THEME
from allsmi.dashboard.views.render import Palette

BINDINGS = [
    Binding("q", "quit", "Quit", tooltip="Quit at once"),
    Binding("ctrl+c", "quit", "Quit", show=False, priority=True, tooltip="Quit at once"),
    Binding("question_mark,h,f1", "help", "Help", key_display="?", tooltip="Show this help"),
    Binding("d", "view('devices')", "Devices", tooltip="Device view (one row per device)"),
    Binding("g", "view('groups')", "Groups",
            tooltip="Resource-group view: per-group and per-vendor totals, energy since start"),
    Binding("i", "view('idle')", "Idle",
            tooltip="Idle view: who holds allocated-but-idle devices over the history window"),
    Binding("c", "view('cluster')", "Cluster",
            tooltip="Cluster overview: hosts, their status and data age (with --hosts/--prometheus)"),
    Binding("s", "cycle_sort", "Sort",
            tooltip="Next sort order (index, util, memory, power, temp; idle view: cost, time)"),
    Binding("r", "reverse_sort", "Reverse", show=False, tooltip="Reverse the sort order"),
    Binding("u", "sort('utilization')", "Util", show=False, tooltip="Sort by utilization"),
    Binding("m", "sort('memory')", "Memory", show=False, tooltip="Sort by memory in use (share)"),
    Binding("w", "sort('power')", "Power", show=False, tooltip="Sort by power draw"),
    Binding("t", "sort('temperature')", "Temp", show=False, tooltip="Sort by temperature"),
    Binding("n", "sort('index')", "Index", show=False, tooltip="Sort by host, vendor and index"),
    Binding("slash", "filter_text", "Filter", tooltip="Filter by text (model, id, group, user, command)"),
    Binding("v", "cycle_vendor", "Vendor", show=False, tooltip="Filter by vendor (cycles through them)"),
    Binding("f", "cycle_group", "Group", show=False,
            tooltip="Filter by resource group (cycles through them)"),
    Binding("escape", "clear_or_back", "Back", show=False, tooltip="Clear filters, or go back to the main view"),
    Binding("p", "toggle_processes", "Procs",
            tooltip="Processes panel: selected device or all devices shown"),
    Binding("z", "toggle_panel", "Zoom", show=False,
            tooltip="Hide or show the details and processes panel"),
    Binding("space", "pause", "Pause", show=False, tooltip="Pause or resume live updates"),
    Binding("L", "toggle_light", "Light", show=False, tooltip="Switch between dark and light theme"),
]


#: Actions that act in the devices view only (its details and processes panel): elsewhere the
#: footer and the help leave them out, and a press says where they act.
DEVICES_ONLY = {
    "toggle_processes": "p chooses the processes panel's devices: press d for the devices view",
    "toggle_panel": "z hides or shows the details and processes panel: press d for the devices view",
}


class KeyActions:
    """The ``action_*`` methods of the app (``self`` is the :class:`DashboardApp`)."""

    # The app provides these (declared for readers and type checkers).
    source: Any
    view: str
    sort_key: str
    descending: bool
    filter: Filter
    drilled_from: str | None
    process_scope: str
    paused: bool
    idle_sort: str
    idle_descending: bool
    _signature: Any
    _panel_choice: bool | None
    names: Any

    def offered(self, action: str) -> bool:
        """Whether a binding's ``action`` does something in the current view: the footer and
        the help list only those (no cluster key on one node, no ``p`` or ``z`` outside the
        devices view, no sort key but ``s`` and ``r`` in the idle view)."""
        if action == "view('cluster')":
            return bool(self.source.cluster)
        if action in DEVICES_ONLY:
            return self.view == "devices"
        return not (action.startswith("sort(") and self.view == "idle")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide the cluster key where there is no cluster."""
        if action == "view" and parameters == ("cluster",) and not self.source.cluster:
            return False
        return True

    def get_key_display(self, binding: Binding) -> str:
        """A binding's key as the footer shows it, from :data:`KEY_NAMES` where it is known."""
        if binding.key_display:
            return binding.key_display
        shown = key_display(binding.key)
        return shown if shown is not None else super().get_key_display(binding)  # type: ignore[misc]

    def action_help(self) -> None:
        """Show every key."""
        from allsmi.dashboard.screen.help import HelpScreen  # imported on first use: most sessions never open it
        # Only the keys that do something here: no cluster key on a single node, no panel key
        # outside the devices view.
        keys = [b for b in self.BINDINGS if not isinstance(b, Binding) or self.offered(b.action)]
        self.push_screen(HelpScreen(keys, self.view))  # type: ignore[arg-type]

    def action_view(self, view: str) -> None:
        """Switch to the devices, groups or cluster view."""
        if view == "cluster" and not self.source.cluster:
            self.notify("The cluster view needs other nodes: allsmi view --hosts URL... or "
                        "--prometheus URL.", severity="warning")
            return
        if view == self.view and view in ("groups", "idle"):
            view = "cluster" if self.source.cluster else "devices"
        self.drilled_from = None  # a view chosen by its key: Esc no longer goes back
        self._switch(view)

    def action_sort(self, key: str) -> None:
        """Sort by ``key``; choosing the current key again reverses the order."""
        if self.view == "idle":
            self.notify("The idle view sorts by idle cost or idle time: s switches, r reverses.")
            return
        if key == self.sort_key:
            self.descending = not self.descending
        else:
            self.sort_key = key
            self.descending = key in DESCENDING_BY_DEFAULT
        self.refresh_view()

    def action_cycle_sort(self) -> None:
        """The next sort order (in the idle view: idle cost, idle time)."""
        if self.view == "idle":
            self.idle_sort = IDLE_SORTS[(IDLE_SORTS.index(self.idle_sort) + 1) % len(IDLE_SORTS)]
            self.idle_descending = True
            self.refresh_view()
            return
        key = SORT_KEYS[(SORT_KEYS.index(self.sort_key) + 1) % len(SORT_KEYS)]
        self.sort_key, self.descending = key, key in DESCENDING_BY_DEFAULT
        self.refresh_view()

    def action_reverse_sort(self) -> None:
        """Reverse the order."""
        if self.view == "idle":
            self.idle_descending = not self.idle_descending
        else:
            self.descending = not self.descending
        self.refresh_view()

    def action_filter_text(self) -> None:
        """Open the text filter."""
        box = self.filter_box(build=True)  # type: ignore[attr-defined]
        box.open(self.filter.text)

    def _cycle(self, current: str | None, values: list[str]) -> str | None:
        if not values:
            return None
        if current not in values:
            return values[0]
        i = values.index(current) + 1
        return values[i] if i < len(values) else None

    def action_cycle_vendor(self) -> None:
        """Filter to the next vendor (then back to all)."""
        vendors = filter_choices(self.all_refs(), self.filter, "vendor",  # only those on view
                                 self.names.places, self.host_names())
        vendor = self._cycle(self.filter.vendor, vendors)
        self._set_filter(replace(self.filter, vendor=vendor))

    def action_cycle_group(self) -> None:
        """Filter to the next resource group (then back to all)."""
        groups = filter_choices(self.all_refs(), self.filter, "group",  # only combinations that exist
                                self.names.places, self.host_names())
        group = self._cycle(self.filter.group, groups)
        self._set_filter(replace(self.filter, group=group))

    def action_clear_or_back(self) -> None:
        """Close the filter box, clear filters, or return to the main view."""
        box = self.filter_box()  # type: ignore[attr-defined]
        if box is not None and box.has_class("-visible"):
            box.value = ""
            self._close_filter()
            self._set_filter(replace(self.filter, text=""))
            return
        if self.filter.active:
            had_host = self.filter.host is not None
            back, self.drilled_from = self.drilled_from, None
            self.filter = Filter()
            if had_host and self.source.cluster:
                self._switch("cluster")
            elif back is not None and self.view == "devices":  # drilled into from groups/idle
                self._switch(back)
            else:
                self.refresh_view()
            return
        main = "cluster" if self.source.cluster else "devices"
        if self.view != main:
            self._switch(main)

    def _devices_only(self, action: str) -> bool:
        """Whether ``action`` acts here; if not, say where it does (nothing changes unseen)."""
        if self.view == "devices":
            return True
        self.notify(DEVICES_ONLY[action] + ".", severity="warning")  # type: ignore[attr-defined]
        return False

    def action_toggle_processes(self) -> None:
        """Processes of the selected device, or of every device shown."""
        if not self._devices_only("toggle_processes"):
            return
        self.process_scope = "all" if self.process_scope == "selected" else "selected"
        if self.view == "devices":
            self._show_selected()
        self._update_summary()

    def action_toggle_panel(self) -> None:
        """Give the whole screen to the device table, or bring the panel back."""
        if not self._devices_only("toggle_panel"):
            return
        self._panel_choice = self.query_one("#bottom").has_class("-hidden")
        self._fit_panel(self.size.height)

    def action_pause(self) -> None:
        """Freeze the screen (data keeps being collected)."""
        self.paused = not self.paused
        if not self.paused:
            self._signature = None
        self.poll()

    def action_toggle_light(self) -> None:
        """Dark or light theme."""
        dark = self.current_theme.dark
        self.theme = LIGHT_THEME if dark else (
            self.options.theme if self.options.theme != LIGHT_THEME else DEFAULT_THEME)

    def watch_theme(self, theme: str) -> None:
        self._palette = Palette.from_theme(self.current_theme, self.no_color)
        if self.is_mounted:
            self.device_table.invalidate()
            self._summary_text = ""
            self.refresh_view()

