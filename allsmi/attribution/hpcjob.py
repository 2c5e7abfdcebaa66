"""Batch jobs from a job-mapping directory, compatible with dcgm-exporter's HPC job mapping.

A scheduler's prolog writes one file per device it gives a job, named after
the device, holding the ids of the jobs using it, one per line; the epilog
removes the id (or the file). A file may be named by the device's uuid, its
PCI bus id, ``<backend or vendor><index>`` (``amd3``, ``gaudi0``), or, as
dcgm-exporter names them, a bare NVIDIA index (``3``) or ``N.M`` for the MIG
instance with GPU instance id ``M`` on GPU ``N``. ``contrib/slurm/`` ships a
prolog and an epilog that do this for Slurm.

A line may carry, after the job id and whitespace, the share of the device the job was given
(``1234 0.25`` or ``1234 25%``): a backwards-compatible extension (dcgm-exporter reads only
job ids, and a line without a share means what it always did). A declared share is what the
job is billed of the device's allocated time (:mod:`allsmi.fairshare`, method ``declared``).
"""

from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path
from typing import NamedTuple, Sequence

from allsmi.schema import DeviceSample
from allsmi.schema.numbers import number_in_text

from .matching import DeviceIndex
from .model import (BAD_SHARE_REASONS, SourceError, SourceResult, SourceTimeout,
                    SourceUnavailable, Workload)
from .runner import AttributionSource

#: More files than this in the directory is not a job mapping.
MAX_FILES = 4096
#: Only the files that name a device of this node are read, and all of them within this many
#: seconds (a directory of thousands of files on a slow file system): beyond it the source
#: times out (its last answer is carried, docs/attribution.md).
MAX_READ_SECONDS = 2.0
#: A job file lists a few ids; a larger file is not one (it is reported, and not read).
MAX_FILE_BYTES = 64 * 1024
#: A device shared by more jobs than this is not a job mapping: the ids beyond it are
#: reported, not read (64 KiB holds up to 16,384 short ids).
MAX_JOBS_PER_FILE = 1024
#: Job ids as schedulers write them: 1234, 1234_7 (array), 1234+0 (heterogeneous), names.
_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+:@-]{0,127}\Z")


def parse_share(text: str) -> float | None:
    """A declared share: a fraction in (0, 1] (``0.25``) or a percentage (``25%``), written in
    the ASCII decimal forms every number given as text is
    (:func:`~allsmi.schema.numbers.number_in_text`: never ``0.2_5``, ``０.５`` or ``nan``); ``None``
    when ``text`` is neither."""
    percent = text.endswith("%")
    try:
        value = number_in_text(text[:-1] if percent else text, 0.0, 100.0 if percent else 1.0,
                               low_open=True)
    except ValueError:
        return None
    return value / 100.0 if percent else value


class JobFileError(OSError):
    """A job-mapping file that is not one (too large); the message says why."""


class JobFile(NamedTuple):
    """What one mapping file says."""

    jobs: list[str]
    #: lines that are neither a job id nor a job id and a share
    bad: int
    #: declared shares by job id
    shares: dict[str, float]
    #: ``job id share`` lines whose share is not a fraction in (0, 1] nor a percentage: the
    #: job is kept without a share, the share named (``1234 NaN``)
    bad_shares: list[str]


def read_job_file(path: Path) -> JobFile:
    """What one mapping file says (:class:`JobFile`). Raises ``OSError``.

    Linear in the file's size, which is bounded (:data:`MAX_FILE_BYTES`); at most
    :data:`MAX_JOBS_PER_FILE` distinct ids are kept, in file order, the lines beyond them
    counted as not job ids. A job id listed twice counts once (its last declared share holds).
    A bad share (``NaN``, ``2``, ``-1``) ignores the share, not the job."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path.name}: not a regular file")
        data = os.read(fd, MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise JobFileError(f"{path.name}: larger than {MAX_FILE_BYTES // 1024} KiB; not a job file")
    jobs: dict[str, None] = {}  # insertion-ordered set: one lookup per line
    shares: dict[str, float] = {}
    bad = 0
    bad_shares: list[str] = []
    for line in data.decode("utf-8", "replace").splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        share = parse_share(words[1]) if len(words) == 2 else None
        if not _JOB_ID.match(words[0]) or len(words) > 2:
            bad += 1
            continue
        job = words[0]
        if len(words) == 2 and share is None:
            bad_shares.append(f"{job} {words[1][:20]}")
        if job not in jobs:
            if len(jobs) >= MAX_JOBS_PER_FILE:
                bad += 1
                continue
            jobs[job] = None
        if share is not None:
            shares[job] = share
    return JobFile(list(jobs), bad, shares, bad_shares)


class HpcJobSource(AttributionSource):
    """Reads the job-mapping directory once per snapshot."""

    name = "hpc-job"

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        #: The directory was read once: gone since, it is a failure (an NFS mount not answering
        #: for a moment, removed by hand), not a node without jobs: its jobs' devices are not
        #: taken for free (the last answer carried, then unknown), as a kubelet restarting.
        self._answered = False

    def collect(self, devices: Sequence[DeviceSample], now: float) -> SourceResult:
        try:
            entries = []
            with os.scandir(self.directory) as it:
                for entry in it:
                    if entry.name.startswith("."):
                        continue  # editors' and atomic writers' temporary files
                    entries.append(entry.name)
                    if len(entries) > MAX_FILES:
                        raise SourceError(f"{self.directory}: more than {MAX_FILES} files; "
                                          "not a job-mapping directory")
        except FileNotFoundError:
            if self._answered:
                raise SourceError(f"{self.directory} not found (it was read before: removed, or "
                                  "its file system not answering?)") from None
            raise SourceUnavailable(f"{self.directory} not found") from None
        except NotADirectoryError:
            raise SourceError(f"{self.directory} is not a directory") from None
        except OSError as exc:  # permissions; an NFS mount's ESTALE, EIO
            raise SourceError(f"{self.directory}: {exc.strerror or exc}") from None
        self._answered = True
        index = DeviceIndex(devices)
        found: dict[str, dict[str, Workload]] = {}
        unmatched: list[str] = []
        problems: list[str] = []
        deadline = time.monotonic() + MAX_READ_SECONDS
        ignored = dict.fromkeys(BAD_SHARE_REASONS, 0)
        for name in sorted(entries):
            targets = index.match_hpc_name(name)
            if not targets:
                unmatched.append(name)  # names no device of this node: not read
                continue
            if time.monotonic() > deadline:
                raise SourceTimeout(f"{self.directory}: the files naming this node's devices "
                                    f"were not read within {MAX_READ_SECONDS:g} s")
            try:
                jobs, bad, shares, bad_shares = read_job_file(self.directory / name)
            except FileNotFoundError:
                continue  # removed by an epilog between the listing and the read
            except OSError as exc:
                problems.append(f"{name}: {exc.strerror or exc}")
                continue
            if bad:
                problems.append(f"{name}: {bad} line(s) that are not a job id (and a share)")
            if bad_shares:
                ignored["not_a_share"] += len(bad_shares)
                problems.append(f"{name}: {len(bad_shares)} share(s) not a fraction in (0, 1] "
                                f"nor a percentage, ignored (the jobs kept): "
                                f"{', '.join(bad_shares[:5])}")
            for dev in targets:
                slot = found.setdefault(dev.id, {})
                for job in jobs:
                    slot.setdefault(job, Workload("hpc-job", job_id=job, share=shares.get(job)))
        for dev_id, jobs_on in sorted(found.items()):
            declared = sum(w.share for w in jobs_on.values() if w.share is not None)
            if declared > 1.0 + 1e-9:
                ignored["above_device"] += 1
                problems.append(f"{dev_id}: declared shares add up to {declared:g}, more than the "
                                f"device: scaled down to it ({', '.join(sorted(jobs_on))})")
        messages = []
        if unmatched:
            messages.append(f"{len(unmatched)} file(s) name no device: {', '.join(unmatched[:5])}")
        messages.extend(problems[:5])
        return SourceResult({dev: tuple(jobs.values()) for dev, jobs in found.items()}, {},
                            "; ".join(messages), bad_shares=ignored)
