"""Finding backends through the ``allsmi.backends`` entry-point group.

Built-in and third-party backends register the same way (see
``pyproject.toml``). Listing names imports nothing; loading a backend imports
only its module, and that module imports its vendor library lazily. The
group is read by :mod:`allsmi.distinfo` (``importlib.metadata``'s rules without
its import cost, which would dominate ``allsmi snapshot``'s start-up), and by
``importlib.metadata`` where that module cannot tell or a caller needs the
distribution (``allsmi backends``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from allsmi import distinfo
from allsmi.backend_api import Backend, BackendError, ProbeResult
from allsmi.declarations import VendorDeclaration
from allsmi.schema import DeviceSample

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

GROUP = "allsmi.backends"

#: Backends that stand in for hardware rather than read it; not probed by default.
SIMULATION_BACKENDS = frozenset({"simulated"})


class UnknownBackend(LookupError):
    """No backend of that name is installed."""


def _entry_points(*, full: bool = False) -> "dict[str, Any]":
    """name -> entry point; ``full``: ``importlib.metadata``'s own (they carry ``.dist``)."""
    eps: Any = None if full else distinfo.entry_points(GROUP)
    if eps is None:
        # Imported here: importlib.metadata is costly.
        from importlib.metadata import entry_points
        eps = entry_points(group=GROUP)
    found: dict[str, Any] = {}
    for ep in eps:
        found.setdefault(ep.name, ep)  # first distribution wins on a clash
    return found


def _pick(eps: "dict[str, Any]", name: str) -> Any:
    if name not in eps:
        raise UnknownBackend(f"unknown backend {name!r}; installed: {', '.join(sorted(eps)) or 'none'}")
    return eps[name]


def names() -> list[str]:
    """Every registered backend name, sorted, without importing any of them."""
    return sorted(_entry_points())


def hardware_names() -> list[str]:
    """Registered backends that read real hardware."""
    return [n for n in names() if n not in SIMULATION_BACKENDS]


def entry_point(name: str) -> "EntryPoint":
    """The entry point of ``name`` (``importlib.metadata``'s, with its ``dist``);
    :class:`UnknownBackend` lists what is installed."""
    return _pick(_entry_points(full=True), name)  # type: ignore[no-any-return]


def load(name: str, _eps: "dict[str, Any] | None" = None) -> type[Backend]:
    """Import and return the backend class registered as ``name`` (``_eps``: the group, if read)."""
    cls = _pick(_entry_points() if _eps is None else _eps, name).load()
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise TypeError(f"entry point {name!r} does not name a Backend subclass")
    return cls


def impersonated(name: str, _eps: "dict[str, Any] | None" = None) -> type[Backend] | None:
    """The backend class a simulation of ``name`` takes its declarations from; ``None`` when no
    backend of that name is installed or it cannot be imported (the simulation then says so)."""
    try:
        return load(name, _eps)
    except Exception:
        return None


def declarations(_eps: "dict[str, Any] | None" = None) -> tuple[VendorDeclaration, ...]:
    """What every installed hardware backend declares about its vendor, in name order (each
    backend's module is imported, none of its vendor libraries). A backend that cannot be
    imported declares nothing; ``allsmi doctor`` and the collector report it."""
    eps = _entry_points() if _eps is None else _eps
    found = []
    for name in sorted(eps):
        if name in SIMULATION_BACKENDS:
            continue
        try:
            cls = load(name, eps)
        except Exception:  # a broken plug-in: reported where it runs
            continue
        found.append(cls.declaration())
    return tuple(found)


def instantiate(enabled: "list[str] | tuple[str, ...] | None" = None, *, timeout_seconds: float = 5.0,
                options: "dict[str, Any] | None" = None,
                simulate: "Any | None" = None,
                clock: "Callable[[], float] | None" = None) -> list[Backend]:
    """Construct the backends to run.

    With ``simulate`` (a built-in scenario name, a scenario file path or a loaded
    scenario) the hardware backends are replaced by the simulated ones the scenario
    describes (those ``enabled`` names, when it is given). Otherwise every enabled hardware backend is constructed (not
    opened). Backend tool timeouts are set a little below ``timeout_seconds``
    so tools are killed before the collector gives up on them.
    """
    tool_timeout = max(0.05, timeout_seconds * 0.8)
    eps = _entry_points()  # read once for every backend below
    if simulate is not None:
        from allsmi.backends.simulated import simulated_backends
        # Each simulated backend follows the declarations of the installed backend it impersonates,
        # and ``[backends] enabled`` picks among them as it picks among the hardware backends.
        return enabled_only(simulated_backends(simulate, timeout_seconds=tool_timeout,
                                               impersonate=lambda name: impersonated(name, eps),
                                               **({"clock": clock} if clock else {})), enabled)
    opts = options or {}
    out: list[Backend] = []
    for name in (enabled if enabled is not None else
                 [n for n in sorted(eps) if n not in SIMULATION_BACKENDS]):
        try:
            cls = load(name, eps)
        except UnknownBackend:
            raise
        except Exception as exc:  # a broken plug-in must not take the others down
            out.append(BrokenBackend(name, f"cannot load backend: {type(exc).__name__}: {exc}"))
            continue
        out.append(cls(timeout_seconds=tool_timeout, options=opts.get(name)))
    return out


def enabled_only(backends: "Any", enabled: "list[str] | tuple[str, ...] | None") -> list[Backend]:
    """``backends`` whose name ``enabled`` lists (all of them when ``enabled`` is ``None``); a
    simulated backend goes by the name of the backend it stands for (``display_name``)."""
    return [b for b in backends if enabled is None or b.display_name in enabled]


class BrokenBackend(Backend):
    """Stands in for a backend whose module failed to import; reports the error each cycle."""

    name = "broken"

    def __init__(self, registered_name: str, message: str) -> None:
        super().__init__()
        self._registered_name = registered_name
        self._message = message

    @property
    def display_name(self) -> str:
        return self._registered_name

    def probe(self) -> ProbeResult:
        return ProbeResult(True, "", {"error": self._message})

    def open(self) -> None:
        raise BackendError(self._message)

    def sample(self) -> list[DeviceSample]:
        raise BackendError(self._message)
