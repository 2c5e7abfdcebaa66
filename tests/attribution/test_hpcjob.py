"""The job-mapping directory: files appearing and disappearing, every naming, garbage."""

from __future__ import annotations

import os
import itertools
import shutil
import string
import time
from pathlib import Path

import pytest

from allsmi.attribution import Attributor, HpcJobSource

from .helpers import find, mixed_devices

DEVICES = mixed_devices()
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "attribution" / "hpc-jobs"


def _jobs(result, dev) -> list[str]:
    return [w.job_id for w in result.device_workloads(dev.id) or ()]


def test_files_appear_and_disappear(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    h2, amd5 = find(DEVICES, "nvidia", 2), find(DEVICES, "amd", 5)
    with Attributor([HpcJobSource(jobs)], 5) as attributor:
        absent = attributor.resolve(DEVICES)
        assert absent.statuses[0].status == "unavailable" and absent.workloads is None
        jobs.mkdir()
        empty = attributor.resolve(DEVICES)
        assert empty.statuses[0].status == "ok" and _jobs(empty, h2) == []
        (jobs / "2").write_text("1001\n")                 # dcgm-exporter's bare NVIDIA index
        (jobs / "amd5").write_text("1002\n1003\n")        # <vendor><index>, two jobs sharing
        one = attributor.resolve(DEVICES)
        assert _jobs(one, h2) == ["1001"] and _jobs(one, amd5) == ["1002", "1003"]
        assert all(w.source == "hpc-job" and w.user is None for w in one.device_workloads(amd5.id) or ())
        (jobs / "amd5").write_text("1003\n")              # an epilog removed job 1002
        os.remove(jobs / "2")                             # and the last job of GPU 2
        two = attributor.resolve(DEVICES)
        assert _jobs(two, h2) == [] and _jobs(two, amd5) == ["1003"]
        shutil.rmtree(jobs)                               # gone after it was read: carried
        gone = attributor.resolve(DEVICES)
        assert gone.statuses[0].status == "error" and _jobs(gone, amd5) == ["1003"]


def test_a_directory_gone_after_it_was_read_is_a_failure_not_a_node_without_jobs(
        tmp_path: Path) -> None:
    """The directory answered, then is gone (an NFS mount not answering for a cycle, removed by
    hand): its jobs' devices are not free meanwhile (its last answer carried, then unknown,
    and said), as for a kubelet restarting; it is read again as soon as it is back."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "2").write_text("1001\n")
    h2 = find(DEVICES, "nvidia", 2)
    with Attributor([HpcJobSource(jobs)], 5) as attributor:
        assert _jobs(attributor.resolve(DEVICES), h2) == ["1001"]
        shutil.rmtree(jobs)
        gone = attributor.resolve(DEVICES)
        status = gone.statuses[0]
        assert status.status == "error", status
        assert f"{jobs} not found (it was read before" in status.message
        assert "holders as it last answered" in status.message
        assert _jobs(gone, h2) == ["1001"] and not gone.unknown
        attributor.carry_seconds = 0  # its last answer too old to stand in: unknown
        stale = attributor.resolve(DEVICES)
        assert stale.statuses[0].status == "error" and h2.id in stale.unknown
        jobs.mkdir()
        (jobs / "2").write_text("1002\n")
        back = attributor.resolve(DEVICES)
        assert back.statuses[0].status == "ok" and _jobs(back, h2) == ["1002"]
        assert not back.unknown


def test_every_naming_uuid_bus_id_vendor_index_and_mig(tmp_path: Path) -> None:
    h1, mig = find(DEVICES, "nvidia", 1), find(DEVICES, "nvidia", 7, part=1)
    gaudi, rngd, tt = find(DEVICES, "gaudi", 3), find(DEVICES, "furiosa", 0), find(DEVICES, "tenstorrent", 0)
    assert gaudi.bus_id and tt.bus_id and mig.uuid
    (tmp_path / h1.id).write_text("11\n")
    (tmp_path / mig.uuid).write_text("12\n")
    (tmp_path / gaudi.bus_id.upper()).write_text("13\n")
    (tmp_path / rngd.id).write_text("14_3\n")             # an array job
    (tmp_path / "tenstorrent0").write_text("15+1\n")      # a heterogeneous job component
    (tmp_path / "7.13").write_text("16\n")                # MIG instance by GPU instance id
    result = Attributor([HpcJobSource(tmp_path)], 5).resolve(DEVICES)
    assert result.statuses[0].message == ""
    assert _jobs(result, h1) == ["11"] and _jobs(result, mig) == ["12"]
    assert _jobs(result, gaudi) == ["13"] and _jobs(result, rngd) == ["14_3"]
    assert _jobs(result, tt) == ["15+1"]
    # the simulation's GPU instances are 1, 5 and 13, as nvidia-smi numbers a 3g, a 2g and a 1g
    assert _jobs(result, find(DEVICES, "nvidia", 7, part=2)) == ["16"]
    assert _jobs(result, find(DEVICES, "nvidia", 7)) == []


def test_shipped_fixture_directory() -> None:
    result = Attributor([HpcJobSource(FIXTURE)], 5).resolve(DEVICES)
    assert _jobs(result, find(DEVICES, "nvidia", 0)) == ["7001"]
    assert _jobs(result, find(DEVICES, "nvidia", 1)) == ["7001"]
    assert _jobs(result, find(DEVICES, "nvidia", 7, part=1)) == ["7002", "7003"]
    assert _jobs(result, find(DEVICES, "amd", 3)) == ["7004"]


def test_garbage_is_reported_and_skipped(tmp_path: Path) -> None:
    (tmp_path / "3").write_bytes(b"2001\n\x00\xff\xfe binary junk\n# a comment\n\n")
    (tmp_path / "nvidia99").write_text("2002\n")
    (tmp_path / ".amd0.tmp").write_text("2003\n")         # a prolog's temporary file: ignored
    (tmp_path / "subdir").mkdir()
    os.symlink("/etc/passwd", tmp_path / "amd1")          # never followed
    result = Attributor([HpcJobSource(tmp_path)], 5).resolve(DEVICES)
    status = result.statuses[0]
    assert status.status == "ok"
    assert _jobs(result, find(DEVICES, "nvidia", 3)) == ["2001"]
    assert "1 line(s) that are not a job id (and a share)" in status.message
    assert "name no device: nvidia99" in status.message
    assert _jobs(result, find(DEVICES, "amd", 0)) == [] and _jobs(result, find(DEVICES, "amd", 1)) == []
    assert "amd1" in status.message and "subdir" in status.message


def test_a_file_instead_of_a_directory_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "jobs").write_text("x")
    result = Attributor([HpcJobSource(tmp_path / "jobs")], 5).resolve(DEVICES)
    assert result.statuses[0].status == "error" and "not a directory" in result.statuses[0].message


def test_a_job_file_may_declare_each_jobs_share(tmp_path: Path) -> None:
    (tmp_path / "nvidia3").write_text("3001 0.25\n3002 50%\n3003\n3004 1.5\n3005 a b\n")
    result = Attributor([HpcJobSource(tmp_path)], 5).resolve(DEVICES)
    works = {w.job_id: w.share for w in result.device_workloads(find(DEVICES, "nvidia", 3).id) or ()}
    # a bad share ignores the share, not the job (issue 32, item 9)
    assert works == {"3001": 0.25, "3002": 0.5, "3003": None, "3004": None}
    message = result.statuses[0].message
    assert "1 line(s) that are not a job id (and a share)" in message
    assert "1 share(s) not a fraction in (0, 1] nor a percentage, ignored (the jobs kept): " \
        "3004 1.5" in message


def test_a_full_file_of_distinct_ids_is_read_in_linear_time(tmp_path: Path) -> None:
    """16,384 distinct ids in 64 KiB (issue 19 item 13): was 1.4 s of CPU per read."""
    from allsmi.attribution.hpcjob import MAX_FILE_BYTES, MAX_JOBS_PER_FILE, read_job_file

    alphabet = string.digits + string.ascii_letters
    ids = ["".join(t) for t in itertools.islice(itertools.product(alphabet, repeat=3),
                                                 MAX_FILE_BYTES // 4)]
    path = tmp_path / "3"
    path.write_text("".join(f"{i}\n" for i in ids))
    assert path.stat().st_size == MAX_FILE_BYTES
    started = time.process_time()
    for _ in range(5):
        jobs, bad, shares, _ = read_job_file(path)
    per_read = (time.process_time() - started) / 5
    assert jobs == ids[:MAX_JOBS_PER_FILE] and bad == len(ids) - MAX_JOBS_PER_FILE
    assert shares == {}
    assert per_read < 0.1, f"{per_read:.3f} s of CPU per read"
    # repeated ids cost one lookup each and are kept once, in order
    path.write_text("7\n5\n7\n" * 5000)
    assert read_job_file(path) == (["7", "5"], 0, {}, [])
    # with declared shares: still one lookup a line, the last declared share holds
    path.write_text("7 0.25\n5\n7 50%\n" * 3000)
    assert read_job_file(path) == (["7", "5"], 0, {"7": 0.5}, [])
    # the id bound counts ids with a share like bare ones
    path.write_text("".join(f"{i} 10%\n" for i in ids[:MAX_JOBS_PER_FILE + 3]))
    jobs, bad, shares, _ = read_job_file(path)
    assert jobs == ids[:MAX_JOBS_PER_FILE] and bad == 3 and len(shares) == MAX_JOBS_PER_FILE


def test_a_file_over_the_bound_is_reported_not_read(tmp_path: Path) -> None:
    from allsmi.attribution.hpcjob import MAX_FILE_BYTES

    (tmp_path / "3").write_text("2001\n" * (MAX_FILE_BYTES // 5 + 1))
    result = Attributor([HpcJobSource(tmp_path)], 5).resolve(DEVICES)
    assert _jobs(result, find(DEVICES, "nvidia", 3)) == []
    assert "larger than 64 KiB" in result.statuses[0].message


@pytest.mark.parametrize("share", ["NaN", "2", "-1", "inf", "0",
                                   # Python's other number forms, read as 0.25 or 0.5 by float():
                                   # a share is written in ASCII decimal forms only
                                   "0.2_5", "2_5%", "\u0660.\u0662\u0665", "\uff10.\uff15",
                                   "0x1p-2"])
def test_a_bad_share_ignores_the_share_not_the_job(tmp_path: Path, share: str) -> None:
    """``1234 NaN`` (or 2, -1, ``0.2_5``, full-width ``０.５``): job 1234 still holds the device,
    without a share, and the share is named in the status (issue 32, item 9); the other jobs'
    shares hold."""
    (tmp_path / "nvidia3").write_text(f"1234 {share}\n1235 0.25\n")
    result = Attributor([HpcJobSource(tmp_path)], 5).resolve(DEVICES)
    works = {w.job_id: w.share for w in result.device_workloads(find(DEVICES, "nvidia", 3).id) or ()}
    assert works == {"1234": None, "1235": 0.25}
    assert f"ignored (the jobs kept): 1234 {share}" in result.statuses[0].message
    assert "not a job id" not in result.statuses[0].message
    # counted (allsmi_attribution_bad_shares_total)
    assert result.bad_shares == (("hpc-job", "not_a_share", 1), ("hpc-job", "above_device", 0))


def test_a_carried_answer_does_not_count_its_bad_shares_again(tmp_path: Path) -> None:
    """A source that fails has its last answer carried (its holders kept), but its bad shares
    were not read again: they count only in the cycle that read them."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "nvidia3").write_text("1234 NaN\n1235 2\n")
    with Attributor([HpcJobSource(jobs)], 5) as attributor:
        first = attributor.resolve(DEVICES)
        (jobs / "nvidia3").unlink()
        jobs.rmdir()
        jobs.write_text("not a directory\n")
        carried = attributor.resolve(DEVICES)
    assert first.bad_shares == (("hpc-job", "not_a_share", 2), ("hpc-job", "above_device", 0))
    assert carried.statuses[0].status == "error" and "last answered" in carried.statuses[0].message
    assert _jobs(carried, find(DEVICES, "nvidia", 3)) == ["1234", "1235"]
    assert carried.bad_shares == ()


def test_declared_shares_above_the_device_are_said(tmp_path: Path) -> None:
    (tmp_path / "nvidia3").write_text("1 0.75\n2 0.5\n")
    result = Attributor([HpcJobSource(tmp_path)], 5).resolve(DEVICES)
    dev = find(DEVICES, "nvidia", 3)
    assert f"{dev.id}: declared shares add up to 1.25, more than the device: scaled down to " \
        "it (1, 2)" in result.statuses[0].message
    assert result.bad_shares == (("hpc-job", "not_a_share", 0), ("hpc-job", "above_device", 1))


def test_only_files_naming_a_device_of_this_node_are_read(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Thousands of files naming other nodes' devices (issue 32, item 11): none of them is
    read, the one naming this node's GPU is, and the others are reported."""
    from allsmi.attribution import hpcjob

    for i in range(2000):
        (tmp_path / f"GPU-00000000-0000-0000-0000-{i:012d}").write_text("9\n")
    (tmp_path / "nvidia3").write_text("42\n")
    read: list[str] = []
    real = hpcjob.read_job_file
    monkeypatch.setattr(hpcjob, "read_job_file", lambda p: (read.append(p.name), real(p))[1])
    result = Attributor([HpcJobSource(tmp_path)], 5).resolve(DEVICES)
    assert read == ["nvidia3"]
    assert _jobs(result, find(DEVICES, "nvidia", 3)) == ["42"]
    assert "2000 file(s) name no device" in result.statuses[0].message


def test_reading_the_files_is_bounded_in_time(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A file system slow enough that this node's files take longer than the bound: the source
    times out, loudly, instead of holding the cycle."""
    from allsmi.attribution import hpcjob

    for i in range(8):
        (tmp_path / f"nvidia{i}").write_text("42\n")
    real = hpcjob.read_job_file
    monkeypatch.setattr(hpcjob, "MAX_READ_SECONDS", 0.2)
    monkeypatch.setattr(hpcjob, "read_job_file", lambda p: (time.sleep(0.1), real(p))[1])
    result = Attributor([HpcJobSource(tmp_path)], 5).resolve(DEVICES)
    status = result.statuses[0]
    assert status.status == "timeout", status
    assert "were not read within 0.2 s" in status.message


def test_a_file_that_only_starts_with_a_device_id_names_no_device(tmp_path: Path) -> None:
    """``sed -i.bak`` and editors leave ``GPU-....bak`` / ``GPU-...~`` beside the real file,
    holding the jobs the epilog just removed: they name no device (they were read as the
    device's file, so an ended job held the device for as long as the backup stayed)."""
    gpu = find(DEVICES, "nvidia", 0)
    assert gpu.uuid
    (tmp_path / gpu.uuid).write_text("5002\n")
    (tmp_path / f"{gpu.uuid}.bak").write_text("5001\n5002\n")
    (tmp_path / f"{gpu.uuid.lower()}~").write_text("5003\n")
    result = Attributor([HpcJobSource(tmp_path)], 5).resolve(DEVICES)
    assert _jobs(result, gpu) == ["5002"]
    assert "2 file(s) name no device" in result.statuses[0].message


def test_a_uuid_without_nvmls_prefix_names_its_device(tmp_path: Path) -> None:
    """CUDA and some tools write a GPU's or MIG instance's uuid without ``GPU-``/``MIG-``:
    the same device (it named none)."""
    from allsmi.attribution import DeviceIndex

    gpu, mig = find(DEVICES, "nvidia", 0), find(DEVICES, "nvidia", 7, part=1)
    assert gpu.uuid and mig.uuid
    (tmp_path / gpu.uuid[4:]).write_text("6001\n")
    (tmp_path / mig.uuid[4:].upper()).write_text("6002\n")
    result = Attributor([HpcJobSource(tmp_path)], 5).resolve(DEVICES)
    assert _jobs(result, gpu) == ["6001"] and _jobs(result, mig) == ["6002"]
    assert result.statuses[0].message == ""
    assert DeviceIndex(DEVICES).match(gpu.uuid[4:] + "::2", "nvidia") == [gpu]
