"""What a backend declares about its vendor, for the parts of allsmi that never import a backend.

Attribution matches Kubernetes device-plugin ids and job-mapping file names to devices,
``allsmi doctor`` lists device nodes, the docs tables name every vendor, the layering tests
clear every tool override: each reads these declarations instead of a list of its own. A
backend class sets them as class attributes (:class:`allsmi.backend_api.Backend`) and
:meth:`~allsmi.backend_api.Backend.declaration` bundles them into a :class:`VendorDeclaration`;
the CLI collects the installed backends' declarations (:func:`allsmi.collection.registry.declarations`)
and hands them to attribution, which sits beside the backends and imports none of them.

This module is plain data at the bottom of the layers: it imports nothing from allsmi but
:mod:`allsmi.schema.records` (its frozen records) and :mod:`allsmi.schema.numbers` (the check of an option's
number, which imports nothing from allsmi).
"""

from __future__ import annotations

from typing import Any, Mapping

from allsmi.schema.numbers import FINITE, setting_number, whole_setting
from allsmi.schema.records import Record, record


#: How a device plugin writes the ids of the devices it allocates.
#: ``core`` is a global sub-device number (a NeuronCore, or any core or partition a plugin numbers
#: across the node): it names the device whose :data:`CORE_RANGE_DETAILS` range holds it.
ID_KINDS = ("auto", "uuid", "bus_id", "index", "serial", "core")
#: The ``DeviceSample.details`` keys a backend sets on each whole device whose sub-devices a plugin
#: hands out by a global number: the first global number on the device and how many it has.
CORE_RANGE_DETAILS = ("core_first", "core_count")


@record
class KubernetesResource(Record):
    """One extended resource (or a glob of them) a vendor's Kubernetes device plugin advertises."""

    pattern: str
    """The resource name or a glob (``nvidia.com/mig-*``), matched case-insensitively."""
    id_kind: str = "auto"
    """How the plugin writes device ids (one of :data:`ID_KINDS`; ``auto`` tries each form)."""
    plugin: str = ""
    """Which plugin advertises it and how its ids look (for the docs table)."""

    def __post_init__(self) -> None:
        if self.id_kind not in ID_KINDS:
            raise ValueError(f"id_kind must be one of {', '.join(ID_KINDS)}, got {self.id_kind!r}")


#: The longest text a backend option takes (a path, an address).
MAX_OPTION_TEXT = 4096


@record
class BackendOption(Record):
    """One key of a backend's ``[backends.NAME]`` table. Its kind follows its default: true or
    false, a whole number, a number, or text (one of ``choices`` where given, matched
    case-insensitively). Checked when the config is read (exit 2 naming the file, line and
    key; ``allsmi doctor`` lists each problem) and read by the backend with :meth:`value`."""

    name: str
    default: bool | int | float | str
    """The value where the table does not set the key."""
    meaning: str = ""
    """What it does, for ``allsmi backends`` and the docs."""
    minimum: float | None = None
    """A number's least value (inclusive; a number option must declare it)."""
    maximum: float | None = None
    """A number's greatest value (inclusive; a number option must declare it)."""
    choices: tuple[str, ...] = ()
    """The values a text option takes (lower case); empty: any printable text."""

    def __post_init__(self) -> None:
        """A number option declares both ends of its range, finite, around its default (every
        setting has a range: a plug-in's option without one took ``1e308`` or an integer of 400
        digits); ``ValueError`` naming the option where it does not."""
        default = self.default
        if isinstance(default, bool) or not isinstance(default, (int, float)):
            return
        low, high = (setting_number(end) for end in (self.minimum, self.maximum))
        if low is None or high is None or abs(low) == FINITE or abs(high) == FINITE:
            raise ValueError(f"option {self.name}: a number option declares its minimum and "
                             f"maximum (finite numbers), got {self.minimum!r} and {self.maximum!r}")
        if setting_number(default) is None or not low <= default <= high:
            raise ValueError(f"option {self.name}: its default {default!r} is not from "
                             f"{self.minimum!r} to {self.maximum!r}")

    def range_text(self) -> str:
        """What the option takes, in words (``true or false``, ``1 to 64, whole``...)."""
        default = self.default
        if isinstance(default, bool):
            return "true or false"
        if isinstance(default, (int, float)):
            span = f"{self.minimum:g} to {self.maximum:g}"
            return f"{span}, whole" if isinstance(default, int) else span
        if self.choices:
            return " or ".join(f'"{c}"' for c in self.choices)
        return "text"

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not a value of this option; ``None`` when it is."""
        default = self.default
        if isinstance(default, bool):
            return None if isinstance(value, bool) else f"must be true or false, got {value!r}"
        if isinstance(default, (int, float)):
            if setting_number(value) is None:  # (a huge integer is a number: out of range below)
                return f"must be a number ({self.range_text()}), got {value!r}"
            if isinstance(default, int) and whole_setting(value) is None:
                return f"must be a whole number ({self.range_text()}), got {value!r}"
            if not self.minimum <= value <= self.maximum:  # type: ignore[operator]
                return f"must be {self.range_text()}, got {value!r}"
            return None
        if not isinstance(value, str) or not value.strip():
            return f"must be a non-empty string, got {value!r}"
        if self.choices:
            if value.strip().lower() not in self.choices:
                return f"must be {self.range_text()}, got {value!r}"
            return None
        if not value.isprintable() or len(value) > MAX_OPTION_TEXT:
            return f"must be printable text of at most {MAX_OPTION_TEXT} characters"
        return None

    def value(self, options: Mapping[str, Any] | None) -> Any:
        """The option's value in ``options`` (the default where it is not set); ``ValueError``
        naming the option where the value is not one of its values."""
        if not options or self.name not in options:
            return self.default
        raw = options[self.name]
        problem = self.problem(raw)
        if problem is not None:
            raise ValueError(f"option {self.name}: {problem}")
        if isinstance(self.default, bool):
            return raw
        if isinstance(self.default, (int, float)):
            return int(raw) if isinstance(self.default, int) else setting_number(raw)
        text = raw.strip()
        return text.lower() if self.choices else text


@record
class VendorDeclaration(Record):
    """Everything allsmi outside a backend needs to know about it."""

    backend: str
    """The registry name (``gaudi``)."""
    vendor: str
    """The schema vendor (``intel``)."""
    kind: str
    """``gpu`` or ``npu``."""
    product: str = ""
    """The devices in words, for docs (``Intel Gaudi``)."""
    interface: str = ""
    """What the backend reads (``hl-smi``, ``NVML``)."""
    version_command: tuple[str, ...] = ()
    """The command that prints the vendor interface's version (``("hl-smi", "--version")``)."""
    kubernetes_resources: tuple[KubernetesResource, ...] = ()
    """The resources of the vendor's device plugin; attribution's default rules."""
    node_names: tuple[str, ...] = ()
    """Prefixes of device-node names that carry a device index (``hl`` for ``hl3``,
    ``accel`` for ``/dev/accel/accel3``; ``""`` for a bare number under ``/dev/<dir>/``)."""
    device_nodes: tuple[str, ...] = ()
    """Glob patterns of the vendor driver's device nodes, listed by ``allsmi doctor``."""
    env_vars: tuple[str, ...] = ()
    """Environment variables the backend reads (``ALLSMI_HL_SMI``)."""
    compute_active_source: str = ""
    """What the backend's ``compute_active_percent`` measures (a name of
    ``allsmi.schema.COMPUTE_ACTIVE_SOURCES``: ``core_busy``, ``engine_time``...), where the backend
    sets it from a declaration rather than per device; ``--simulate`` gives the devices it
    impersonates that source. Empty: not declared."""
    tool_flags: tuple[str, ...] = ()
    """Options of the vendor's own tools that its docs name in backticks (``--json-output``); the
    docs test accepts them beside ``allsmi``'s own (the flags of ``version_command`` count too)."""
    options: tuple[BackendOption, ...] | None = None
    """The keys of the backend's ``[backends.NAME]`` table (``()``: it takes none); ``None``: not
    declared (a plug-in that does not say), so its table is handed over unchecked."""

    def option(self, name: str) -> BackendOption:
        """The declared option ``name`` (``KeyError`` where the backend declares none so called)."""
        for option in self.options or ():
            if option.name == name:
                return option
        raise KeyError(f"backend {self.backend!r} declares no option {name!r}")

    def probe_value(self, options: Mapping[str, Any] | None, name: str) -> Any:
        """Option ``name``'s value in ``options`` for a quick probe or a constructor, which never
        raise: its default where the value is not one it takes (the config check refuses such a
        file when it is read, and the backend's ``open()`` a backend built in code with it)."""
        option = self.option(name)
        try:
            return option.value(options)
        except ValueError:
            return option.default
