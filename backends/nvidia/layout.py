"""Following a GPU's MIG layout while the backend runs.

MIG instances are created and destroyed at any time (``nvidia-smi mig``, NVIDIA's MIG manager in
Kubernetes), and MIG mode is switched on or off (in effect after a GPU reset), while the backend
stays open. On a GPU that answered ``nvmlDeviceGetMigMode`` when the backend opened, the mode is
read and the instances listed again (:func:`allsmi.backends.nvidia.mig.list_migs`):

* every :data:`RELIST_SECONDS`: an instance created is listed within that time, and a mode
  switched takes its effect then;
* at the next cycle after a read on a MIG handle found it stale (NotFound, InvalidArgument,
  GpuIsLost: :data:`~allsmi.backends.nvidia.mig.GONE_CODES`; NVML invalidates the handle of a
  destroyed instance). That instance is left out of the cycle whose read found it, so a
  destroyed instance is gone at once; the listing finds what replaced it, if anything.

A listing costs ``nvmlDeviceGetMigMode``, one ``nvmlDeviceGetMigDeviceHandleByIndex`` per slot
and one ``nvmlDeviceGetUUID`` per instance (an instance keeps its uuid for its life, and no other
instance gets it), plus the static facts of each new instance. Between listings a cycle makes no
call of its own for this: a GPU without MIG support is never asked, a GPU with MIG mode off is
asked its mode every :data:`RELIST_SECONDS`.
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import TYPE_CHECKING

from allsmi.backends.nvidia.devices import NVML_DEVICE_MIG_ENABLE, Gpu, Reader
from allsmi.backends.nvidia.mig import list_migs
from allsmi.backends.nvidia.static import batch_fields

if TYPE_CHECKING:
    from allsmi.backends.nvidia.calls import Calls
    from allsmi.backends.nvidia.gpm import GpmReader

#: How often a GPU with MIG support has its mode and instances listed again (seconds).
RELIST_SECONDS = 30.0
#: The clock listings are timed by (tests move it).
clock = time.monotonic


def follow(pynvml: ModuleType, gpu: Gpu, reader: Reader, gpm: GpmReader | None,
           calls: Calls) -> None:
    """List the MIG instances of ``gpu`` (a GPU with MIG support) again when it is time, or
    when a read asked for it; the instances gone and new are said in the warnings. Raises
    :class:`~allsmi.backends.nvidia.devices.DeviceFault` as any read does."""
    now = clock()
    if gpu.mig_listed_at is None:  # the first cycle: listed at open, just now
        gpu.mig_listed_at = now
    if not gpu.mig_relist and now - gpu.mig_listed_at < RELIST_SECONDS:
        return
    gpu.mig_listed_at, gpu.mig_relist = now, False
    mode = reader.call(gpu.skip, "mig_mode", pynvml.nvmlDeviceGetMigMode, gpu.handle)
    if mode is None:  # (a failure is warned about: asked again at the next listing)
        return
    enabled = mode[0] == NVML_DEVICE_MIG_ENABLE
    if enabled != gpu.mig_enabled:  # switched, and the GPU reset since: asked afresh
        reader.warnings.append(f"{gpu.label}: MIG mode is now {'on' if enabled else 'off'}")
        gpu.mig_enabled, gpu.mig_slots, gpu.mig_total_slices = enabled, None, None
        gpu.skip.clear()  # (what MIG mode refused, e.g. utilization, may answer now)
        gpu.fields = batch_fields(gpu)
    old = [(mig, mig.handle) for mig in gpu.migs]
    migs = list_migs(pynvml, gpu, reader, gpu.migs) if enabled else []
    gone = [mig for mig, _ in old if not any(m is mig for m in migs)]
    for mig, handle in old:
        if mig.handle is not handle or mig in gone:
            calls.forget(handle)
    new = [m for m in migs if not any(m is mig for mig, _ in old)]
    gpu.migs = migs  # replaced whole: a sample of the GPU not answering may read the old one
    if gone or new:
        reader.warnings.append(
            f"{gpu.label}: MIG instances changed: {len(gone)} gone, {len(new)} new "
            f"({len(migs)} now)")
    if gpm is not None:
        kept = {m.gpu_instance_id for m in migs if m not in new}
        gpm.follow(gpu, {gi for gi in kept if gi is not None},
                   {m.gpu_instance_id for m in migs if m.gpu_instance_id is not None},
                   reader.warnings)
