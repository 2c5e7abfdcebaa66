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
* Subprocesses go through :mod:`allsmi.backends._subprocess` (argument lists,
  timeouts, output caps, always reaped).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

from allsmi.schema import DeviceSample


@dataclass(frozen=True)
class ProbeResult:
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

    @abc.abstractmethod
    def open(self) -> None:
        """Initialise the vendor interface and read static facts once.

        Called once before the first :meth:`sample`. Raises
        :class:`BackendUnavailable` if the vendor turns out to be absent, or
        :class:`BackendError` if it is present but broken.
        """

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
