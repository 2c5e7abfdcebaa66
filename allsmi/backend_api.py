"""The contract every backend implements. These docstrings are the contract.

A backend turns one vendor's interface into :class:`allsmi.schema.DeviceSample`
objects. Its life cycle, driven by the collector, is::

    probe()  ->  open()  ->  sample(), sample(), ...  ->  close()

Rules every backend follows (the contract test suite checks them):

* Vendor libraries are imported lazily, inside the backend's own methods,
  never at module import time. Listing backends imports no vendor library.
* Units are converted inside the backend to the schema's units.
* A value the vendor does not report is ``None``, never 0 or NaN.
* No hardware means an empty list from :meth:`Backend.sample`, not an exception.
* One faulty device or row never drops the others: mark that device
  ``lost``/``degraded`` or skip the row and say so in :attr:`Backend.warnings`.
* Subprocesses go through :mod:`allsmi.backends._common.runner` (argument lists,
  timeouts, output caps, process groups killed and reaped); CLI backends run
  their tool with its :class:`Tool`, which turns a non-zero exit, a signal, a
  timeout, truncation or unusable output into an error naming the status or
  signal and the tool's first line of stderr.
* A tool or library that fails is an error, never "no devices": an empty list
  means the vendor positively said there is no device (an empty device list,
  or the tool's own one-line "no devices" answer).

Decisions the contract makes (the contract suite checks them):

* **Health when the vendor gives none**: a device that answered this sample
  with fresh readings and no reported fault is ``"ok"`` (hl-smi and tt-smi
  print no health of their own); where the vendor has a health or liveness
  field, it decides, and a missing or ``N/A`` one is ``"unknown"``, never
  ``"ok"``. ``"degraded"`` is a reported fault, a device missing from this
  sample's output, or stale data (then its values are ``None``); ``"lost"`` a
  device the vendor says is gone (and then no values at all).
* **sample() after close()**: a backend reopens by itself on the next
  :meth:`Backend.sample` (as if :meth:`Backend.open` had been called), or
  raises :class:`BackendError` saying it was used before ``open()``; it never
  returns stale data or an empty list. ``open()`` after ``close()`` always
  works like the first time (the collector relies on it).
* **What a uuid is**: ``DeviceSample.uuid`` is the identifier the vendor
  itself assigns to one device and prints as such (NVML ``GPU-...``, amdsmi
  uuid, hl-smi ``uuid``, furiosa ``device_uuid``, rbln ``uuid``); ``None``
  when the vendor has none. Never a serial, a bus id, an index or anything
  allsmi made up: those go to ``id`` (``vendor:serial``, ``vendor:bus``...),
  which is the uuid when there is one and is stable across reboots either way.
  Partitions have their own uuid only when the vendor gives them one (MIG).
"""

from __future__ import annotations

import abc
from dataclasses import field, fields
from typing import Any, ClassVar, Mapping, Sequence

from allsmi.schema.declarations import BackendOption, KubernetesResource, VendorDeclaration
from allsmi.schema.records import Record, record
from allsmi.schema import DeviceSample


@record
class ProbeResult(Record):
    """Whether a vendor is present, and if not, why.

    ``details`` carries facts for ``allsmi doctor``: library and tool versions,
    paths, permissions.
    """

    available: bool
    reason: str = ""
    details: dict[str, str] = field(default_factory=dict)


class BackendError(Exception):
    """A backend is present but failing; the message is shown to the user."""


class BackendUnavailable(BackendError):
    """The vendor is absent (no library, driver, tool or device)."""


class BackendTimeout(BackendError):
    """A vendor call or tool did not answer in time (reported as status ``timeout``).

    A :class:`BackendError` raised *from* a :class:`TimeoutError` (such as the
    subprocess runner's ``ToolTimeout``) is reported the same way.
    """


#: The class attribute holding each :class:`VendorDeclaration` field, where the names differ.
_ATTRIBUTE = {"backend": "name", "options": "declared_options"}


class Backend(abc.ABC):
    """Base class of every backend.

    Subclasses set :attr:`name` (the registry name), :attr:`vendor` and
    :attr:`kind`. Construction must be cheap and must not touch the vendor:
    the registry may build a backend only to call :meth:`probe`. Subclasses
    may add keyword-only constructor arguments for injectable data sources
    (a library object, a tool path) as long as the defaults read the real
    vendor interface; the collector constructs backends as
    ``cls(timeout_seconds=..., options=...)``.
    """

    name: ClassVar[str] = ""
    """Registry name (the entry-point name), e.g. ``"nvidia"``."""
    vendor: ClassVar[str] = ""
    """Schema vendor, e.g. ``"nvidia"``, ``"intel"`` for Gaudi."""
    kind: ClassVar[str] = "gpu"
    """``"gpu"`` or ``"npu"``."""
    device_nodes: ClassVar[tuple[str, ...]] = ()
    """Glob patterns of the device nodes the vendor's driver creates (``"/dev/rbln[0-9]*"``);
    ``allsmi doctor`` lists them with their permissions."""
    product: ClassVar[str] = ""
    """The devices in words for the docs tables (``"Intel Gaudi"``)."""
    interface: ClassVar[str] = ""
    """What the backend reads, for the docs tables (``"NVML"``; a command-line backend: its tool)."""
    version_command: ClassVar[tuple[str, ...]] = ()
    """The command that prints the vendor interface's version (``("hl-smi", "--version")``)."""
    kubernetes_resources: ClassVar[tuple[KubernetesResource, ...]] = ()
    """The extended resources the vendor's Kubernetes device plugin advertises, and how it writes
    device ids: attribution's built-in resource rules (``docs/attribution.md``)."""
    node_names: ClassVar[tuple[str, ...]] = ()
    """Device-node name prefixes that carry the device index (``"hl"`` for ``hl3``); attribution
    matches ``<prefix><index>`` ids and ``/dev/.../<prefix><index>`` paths with them."""
    env_vars: ClassVar[tuple[str, ...]] = ()
    """Environment variables the backend reads (a command-line backend adds its tool override)."""
    compute_active_source: ClassVar[str] = ""
    """What ``compute_active_percent`` measures on this vendor, where declared (see
    :class:`~allsmi.schema.declarations.VendorDeclaration`)."""
    tool_flags: ClassVar[tuple[str, ...]] = ()
    """Options of the vendor's tools its docs page names (``--json-output``): the docs test accepts
    them (see :class:`~allsmi.schema.declarations.VendorDeclaration`)."""
    declared_options: ClassVar[tuple[BackendOption, ...] | None] = None
    """The keys its ``[backends.NAME]`` table takes, with their defaults and ranges (``None``:
    not declared; see :class:`~allsmi.schema.declarations.VendorDeclaration`). Read with :meth:`option`."""
    unreported_fields: ClassVar[frozenset[str]] = frozenset()
    """Measured fields (:data:`allsmi.schema.fields.MEASURED_FIELDS`) this backend leaves ``None`` on
    every device, with every tool or library version it was checked against: the vendor
    interface has no such value (tt-smi has no utilization or memory, rbln-smi no clock).
    ``--simulate`` leaves them ``None`` for the devices it impersonates under this backend's
    name, and a test checks the declaration against the contract fixtures' real output in
    both directions (each one ``None`` everywhere, every other one reported somewhere)."""

    def __init_subclass__(cls, declared: VendorDeclaration | None = None, **kwargs: Any) -> None:
        """``class XBackend(Backend, declared=DECLARATION)``: the class attributes above taken
        from the declaration its vendor package makes without importing the backend (so each
        is written once; see :mod:`allsmi.backends._common.declared`)."""
        super().__init_subclass__(**kwargs)
        if declared is not None:
            for f in fields(VendorDeclaration):
                setattr(cls, _ATTRIBUTE.get(f.name, f.name), getattr(declared, f.name))

    @classmethod
    def declaration(cls) -> VendorDeclaration:
        """What the rest of allsmi reads about this backend without running it (attribution,
        ``allsmi doctor``, the docs tables, the layering tests): see :mod:`allsmi.schema.declarations`."""
        def value(name: str) -> Any:
            v = getattr(cls, _ATTRIBUTE.get(name, name))
            return v if v is None or isinstance(v, str) else tuple(v)
        return VendorDeclaration(**{f.name: value(f.name) for f in fields(VendorDeclaration)})

    @classmethod
    def model_name(cls, raw: str | None) -> str | None:
        """The device ``name`` this backend shows for a model its vendor interface calls ``raw``.

        The one place a backend turns the vendor's model text into the schema's ``name``
        (furiosa-smi's ``RNGD`` is ``Furiosa RNGD``); the default is ``raw`` stripped. It is
        idempotent (a name it made comes back unchanged), so ``--simulate`` passes each
        scenario ``model`` through the impersonated backend's ``model_name`` and a rule written
        against the simulation's names matches the hardware's.
        """
        text = (raw or "").strip()
        return text or None

    def __init__(self, *, timeout_seconds: float = 5.0,
                 options: Mapping[str, Any] | None = None) -> None:
        self.timeout_seconds = timeout_seconds
        """Budget for one vendor call or tool run; the collector's per-backend
        timeout is a little longer, so tools are killed before it fires."""
        self.options: Mapping[str, Any] = dict(options or {})
        """Backend-specific settings from the ``[backends.NAME]`` config table."""
        self.warnings: list[str] = []
        """Non-fatal problems of the last :meth:`sample` (a bad row skipped...),
        shown in the backend status message. Reset at the start of each sample."""

    def option(self, name: str) -> Any:
        """The value of the declared option ``name`` in :attr:`options`, else its default.

        Raises :class:`BackendError` naming the option where the value is not one it takes: a
        config file with such a value is refused when it is read (exit 2), so this is for a
        backend built in code."""
        option = next((o for o in self.declared_options or () if o.name == name), None)
        if option is None:
            raise KeyError(f"backend {self.name!r} declares no option {name!r}")
        try:
            return option.value(self.options)
        except ValueError as exc:
            raise BackendError(f"{self.name}: {exc}") from None

    def check_options(self) -> None:
        """:meth:`option` for each declared option :attr:`options` sets (for a backend that
        takes its options' values where it is built, leniently, and checks them at open)."""
        for option in self.declared_options or ():
            if option.name in self.options:
                self.option(option.name)

    @property
    def display_name(self) -> str:
        """The name shown in backend status (an instance may refine it)."""
        return self.name

    @abc.abstractmethod
    def probe(self) -> ProbeResult:
        """Cheaply tell whether this vendor is present. Never raises.

        Must not hold per-device resources afterwards (a process-wide library
        such as NVML may stay initialised, since it is initialised once per
        process). Returns ``available=False`` with a
        human reason ("libnvidia-ml.so.1 not found", "hl-smi not on PATH") when
        the vendor is absent.
        """

    def quick_probe(self) -> ProbeResult | None:
        """:meth:`probe`'s answer where the vendor is certainly absent, found from files and
        ``PATH`` alone (no vendor library loaded, no tool run: it never blocks); ``None`` where
        the vendor may be present, and :meth:`probe` must decide. Never raises.

        The collector asks it on its own thread before it gives the backend a worker thread:
        a machine without the vendor's hardware then runs no thread for that backend (a thread
        holds ~80 KiB of resident memory), and asks again every ``REPROBE_SECONDS``. The
        default, ``None``, always leaves the question to :meth:`probe`.
        """
        return None

    @abc.abstractmethod
    def open(self) -> None:
        """Initialise the vendor interface and read static facts once.

        Called once before the first :meth:`sample`. Raises
        :class:`BackendUnavailable` if the vendor turns out to be absent, or
        :class:`BackendError` if it is present but broken.
        """

    @property
    def sample_isolated(self) -> bool:
        """Whether :meth:`sample` (once opened) returns within :attr:`timeout_seconds` however
        the vendor behaves, because it makes its vendor calls on threads of its own and waits
        for them with that deadline (the NVIDIA backend's reader pool). The collector then
        calls it on its own thread rather than waking the backend's worker for it: one
        hand-off fewer each cycle. ``False`` (the default): every call goes to the worker."""
        return False

    @abc.abstractmethod
    def sample(self) -> Sequence[DeviceSample]:
        """One batched pass over all devices; returns one sample per device.

        Partitions come after their parent with ``parent`` set. Raises
        :class:`BackendError` only when nothing at all could be read; partial
        failures mark devices or add to :attr:`warnings`.
        """

    def close(self) -> None:
        """Release the vendor interface (children, handles). Idempotent; never raises."""
        return None
