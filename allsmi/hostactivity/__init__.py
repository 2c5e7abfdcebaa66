"""The host side of "what was each holder waiting on" (docs/activity.md): per holder process
CPU, threads, I/O wait and I/O rates, cgroup CPU throttling; per node I/O wait, pressure stall
information, network and InfiniBand/RoCE traffic. Linux ``/proc`` and ``/sys`` (psutil
elsewhere), read only for the processes that hold devices, once per collection cycle."""
