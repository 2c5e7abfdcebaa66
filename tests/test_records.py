"""allsmi.schema.records: frozen records answer ``==``, ``hash`` and ``repr`` exactly as the methods
``@dataclass(frozen=True)`` generates, without compiling them for each class."""

from __future__ import annotations

import dataclasses
import math
import pickle
from dataclasses import dataclass, field

import pytest

from allsmi.schema.records import Record, record


def _pair(slots: bool):  # type: ignore[no-untyped-def]
    """The same declaration as a record and as a generated dataclass."""
    def body(base: type) -> dict:  # type: ignore[type-arg]
        return {"__doc__": "A thing.", "__annotations__": {"a": "int", "b": "float | None", "c": "str", "d": "tuple", "e": "int"},
                "b": None, "c": field(default="x", repr=False), "d": field(default=(), compare=False),
                "e": field(default=0, hash=False)}
    made = record(type("Thing", (Record,), body(Record)), slots=slots)
    plain = dataclass(frozen=True, slots=slots)(type("Thing", (), body(object)))
    return made, plain


@pytest.mark.parametrize("slots", [False, True])
def test_records_compare_hash_and_show_as_generated_dataclasses(slots: bool) -> None:
    made, plain = _pair(slots)
    nan = math.nan
    cases = [dict(a=1), dict(a=1, b=2.5), dict(a=1, b=nan), dict(a=1, d=(1,)), dict(a=1, e=3),
             dict(a=2, c="y")]
    for left in cases:
        for right in cases:
            assert (made(**left) == made(**right)) == (plain(**left) == plain(**right)), (left, right)
        assert hash(made(**left)) == hash(plain(**left))
        assert repr(made(**left)) == repr(plain(**left))
    shared = made(a=1, b=nan)
    assert shared == dataclasses.replace(shared, d=(2,))  # the same NaN object: equal, as tuples are
    assert made(a=1).__eq__(plain(a=1)) is NotImplemented and made(a=1) != 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        made(a=1).a = 2  # type: ignore[misc]
    assert [f.name for f in dataclasses.fields(made)] == ["a", "b", "c", "d", "e"]
    if slots:
        assert not hasattr(made(a=1), "__dict__")


def test_one_and_no_compared_field() -> None:
    @record
    class One(Record):
        """One field."""

        x: float

    @dataclass(frozen=True)
    class PlainOne:
        x: float

    @record
    class Nothing(Record):
        """No field."""

    nan = math.nan
    assert One(nan) == One(nan) and PlainOne(nan) == PlainOne(nan)  # one NaN object: equal, as in tuples
    assert One(nan) != One(float("nan")) and PlainOne(nan) != PlainOne(float("nan"))
    assert hash(One(2.0)) == hash(PlainOne(2.0)) and repr(One(2.0)) == "test_one_and_no_compared_field.<locals>.One(x=2.0)"
    assert Nothing() == Nothing() and hash(Nothing()) == hash(()) and repr(Nothing()).endswith("Nothing()")


def test_schema_records_survive_pickling() -> None:
    from allsmi.schema import BackendStatus
    status = BackendStatus("nvidia", "ok", "", 0.25)
    assert pickle.loads(pickle.dumps(status)) == status


def test_a_class_outside_records_is_refused() -> None:
    with pytest.raises(TypeError, match="subclass allsmi.schema.records.Record"):
        record(type("Loose", (), {"__doc__": "Loose."}))
    with pytest.raises(TypeError, match="needs a docstring"):
        record(type("Undocumented", (Record,), {}))


def test_the_snapshot_records_compile_no_comparison_or_repr_of_their_own() -> None:
    """The invariant the one-shot snapshot's start-up relies on (issue 36): the schema's, the
    config's and the attribution's records take ==, hash and repr from Record."""
    from allsmi import config, schema
    from allsmi.collection import backendrunner
    from allsmi.schema import declarations, fields
    from allsmi.attribution import model, runner, settings
    from allsmi.backend_api import ProbeResult
    from allsmi.backends._common.toolpath import VendorTool
    classes = [schema.Workload, schema.ProcessSample, schema.HolderWaiting, schema.DeviceSample,
               schema.HostSample, schema.BackendStatus, schema.Snapshot, config.ResourceGroup,
               config.GroupRule, config.Config, declarations.KubernetesResource,
               declarations.VendorDeclaration, ProbeResult, model.ProcessAttribution,
               model.SourceResult, model.Attribution, settings.ResourceRule, settings.AttributionSettings,
               fields.Measurement, VendorTool]
    # and every record the backend and attribution runners define (their private outcomes)
    classes += [v for m in (backendrunner, runner) for v in vars(m).values()
                if isinstance(v, type) and issubclass(v, Record) and v is not Record
                and v.__module__ == m.__name__]
    assert len(classes) >= 22
    for cls in classes:
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]
        for name in ("__eq__", "__hash__", "__repr__"):
            assert getattr(cls, name) is getattr(Record, name), (cls, name)


def _outcome(action) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    try:
        action()
    except Exception as exc:  # noqa: BLE001 - what is compared is the exception itself
        return type(exc).__name__, str(exc)
    return "", ""


@pytest.mark.parametrize("slots", [False, True])
def test_frozen_methods_answer_as_generated_ones(slots: bool) -> None:
    made, plain = _pair(slots)
    classes = [made, plain]
    if not slots:  # a plain subclass may set and delete names that are not fields
        classes += [type("Sub", (made,), {}), type("Sub", (plain,), {})]
    outcomes = []
    for cls in classes:
        thing = cls(a=1)
        outcomes.append([_outcome(lambda: setattr(thing, name, 2)) for name in ("a", "zz")] +
                        [_outcome(lambda: delattr(thing, name)) for name in ("a", "zz")])
        assert cls.__setattr__.__qualname__ == "Thing.__setattr__"
    assert outcomes[0] == outcomes[1] and outcomes[0][0] == (
        "FrozenInstanceError", "cannot assign to field 'a'")
    if not slots:
        assert outcomes[2] == outcomes[3] == [("FrozenInstanceError", "cannot assign to field 'a'"),
                                              ("", ""), ("FrozenInstanceError", "cannot delete field 'a'"),
                                              ("", "")]


def test_records_share_their_frozen_methods_code() -> None:
    """Up to Python 3.12 a record's ``__setattr__`` and ``__delattr__`` are not compiled for each
    class (two of the three methods dataclass compiled: over half of a record's import cost)."""
    import sys

    from allsmi.schema.records import SHARED_FROZEN_METHODS
    from allsmi.schema import BackendStatus, DeviceSample
    if sys.version_info >= (3, 13):
        assert not SHARED_FROZEN_METHODS
        return
    assert SHARED_FROZEN_METHODS
    assert DeviceSample.__setattr__.__code__ is BackendStatus.__setattr__.__code__
    assert DeviceSample.__delattr__.__code__ is BackendStatus.__delattr__.__code__
    # dataclass's own helper is back in place for every other frozen dataclass
    made = dataclass(frozen=True)(type("Plain", (), {"__annotations__": {"x": "int"}}))
    assert made.__setattr__.__code__ is not BackendStatus.__setattr__.__code__
