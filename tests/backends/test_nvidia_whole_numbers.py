"""NVML's ECC counts arrive in a field-value union whose member the value type picks: a count
read from a double or a signed member that holds a fraction or a negative number is unknown,
never truncated by ``int()`` into a count."""

from __future__ import annotations

from typing import Any

import pytest

from allsmi.backends.nvidia import NvidiaBackend, nvml

from .nvml_fake import FakeGpu, FakeNvml


def test_ecc_counts_that_are_no_whole_number_are_unknown(monkeypatch: pytest.MonkeyPatch,
                                                         backends: list[NvidiaBackend]) -> None:
    odd = {3: 2.7,   # a double member: old 2 (truncated)
           4: -4,    # a signed member: old -4
           5: 7.0}   # a double member holding a whole count: a count
    unpacked = nvml.FieldValueBatch.answers

    def answers(batch: nvml.FieldValueBatch) -> list[tuple[int, Any]]:
        return [(code, odd.get(fid, value)) for fid, (code, value) in zip(batch.ids, unpacked(batch))]

    monkeypatch.setattr(nvml.FieldValueBatch, "answers", answers)
    fake = FakeNvml([FakeGpu.from_profile("rtx-6000-ada", 0)])
    fake.install(monkeypatch)
    backend = NvidiaBackend(process_owner=lambda pid: (None, None))
    backends.append(backend)
    backend.open()
    [dev] = backend.sample()
    assert "ecc_corrected_volatile" not in dev.details and "ecc_uncorrected_volatile" not in dev.details
    assert dev.details["ecc_uncorrected_aggregate"] == 0  # the unsigned counts stand
    assert dev.details["ecc_corrected_aggregate"] == 7 and type(dev.details["ecc_corrected_aggregate"]) is int
