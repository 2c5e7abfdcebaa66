"""Every scenario key has a type, a range and a meaning: out-of-range values, text that could
reach a terminal, keys that do not apply, impossible partitions and unreadable files are all
errors naming the file, the line and the key (exit code 2, nothing on stdout)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from allsmi.backends.simulated import ScenarioError, load_scenario
from allsmi.backends.simulated.units import make_unit

from .test_scenario_files import DEVICE

H100 = (DEVICE.replace('"extra"', '"nvidia"').replace('"acme"', '"nvidia"')
        .replace('"npu"', '"gpu"').replace("Acme X1", "NVIDIA H100 80GB HBM3")
        .replace("1073741824", "85899345920") + 'id_style = "nvidia"\n')


def _mig(*profiles: str, gib: int = 10, model: str = "") -> str:
    text = H100.replace("NVIDIA H100 80GB HBM3", model) if model else H100
    made = ", ".join(f'{{ profile = "{p}", memory_total_bytes = {gib << 30} }}' for p in profiles)
    return text + f'[[partitions]]\ndevice = "nvidia:1"\ninstances = [ {made} ]\n'


ESC = "\\u001b[2J"  # (TOML's escape: the file holds the terminal's "clear screen")
# (file text, key the message names, words it says)
BAD = {
    "model: terminal escape": (DEVICE.replace("Acme X1", f"Acme{ESC} X1"), "devices[1].model", "control"),
    "vendor: newline": (DEVICE.replace('"acme"', '"ac\\nme"'), "devices[1].vendor", "control"),
    "model: bidirectional override": (DEVICE.replace("Acme X1", "Acme \\u202eX1"), "devices[1].model",
                                      "format"),
    "commands: too long": (f'commands = ["{"c" * 4097}"]\n' + DEVICE, "commands[1]", "at most 4096"),
    "name: escape": (f'name = "x{ESC}"\n' + DEVICE, "name", "control"),
    "name: too long": (f'name = "{"n" * 257}"\n' + DEVICE, "name", "at most 256"),
    "model: escape": (DEVICE.replace("Acme X1", f"Acme{ESC}"), "devices[1].model", "control"),
    "vendor: C1 CSI": (DEVICE.replace('"acme"', '"ac\\u009bme"'), "devices[1].vendor", "control"),
    "driver_version: newline": (DEVICE + 'driver_version = "1\\n2"\n', "devices[1].driver_version",
                                "control"),
    "firmware_version: escape": (DEVICE + f'firmware_version = "{ESC}"\n',
                                 "devices[1].firmware_version", "control"),
    "fault message: escape": (DEVICE + f'[[faults]]\ntype = "error"\nbackend = "extra"\nmessage = "x{ESC}"\n',
                              "faults[1].message", "control"),
    "partition profile: escape": (DEVICE + f'[[partitions]]\ndevice = "extra:0"\ninstances = [ {{ profile = '
                                  f'"p{ESC}", memory_total_bytes = 1 }} ]\n',
                                  "partitions[1].instances[1].profile", "control"),
    "backend: not a name": (DEVICE.replace('"extra"', '"ex:tra"'), "devices[1].backend", "backend name"),
    "count: range named": (DEVICE.replace("count = 2", "count = -1"), "devices[1].count",
                           "at least 0 and at most 4096"),
    "memory 0: range named": (DEVICE.replace("1073741824", "0"), "devices[1].memory_total_bytes",
                              "at least 1 and"),
    "every_seconds 0: range named": (DEVICE + '[[faults]]\ntype = "lost"\ndevice = "extra:0"\n'
                                     'every_seconds = 0\nduration_seconds = 0\n',
                                     "faults[1].every_seconds", "more than 0 and at most 315360000"),
    "busy_looking: twice the same": (DEVICE + "busy_looking = [1, 1]\n", "devices[1].busy_looking",
                                     "distinct"),
    "devices: over 4096 in all": (DEVICE.replace("count = 2", "count = 4000") * 2, "devices[2].count",
                                  "at most 4096"),
    "epoch: before 1970": ('epoch = "1900-01-01T00:00:00Z"\n' + DEVICE, "epoch", "1970"),
    "lost fault: backend": (DEVICE + '[[faults]]\ntype = "lost"\ndevice = "extra:0"\nbackend = "extra"\n',
                            "faults[1].backend", "not a key of a fault of type 'lost'"),
    "error fault: seconds": (DEVICE + '[[faults]]\ntype = "error"\nbackend = "extra"\nseconds = 5\n',
                             "faults[1].seconds", "not a key"),
    "fault: window longer than its period": (DEVICE + '[[faults]]\ntype = "lost"\ndevice = "extra:0"\n'
                                             'every_seconds = 60\nduration_seconds = 120\n',
                                             "faults[1].duration_seconds", "at most every_seconds"),
    "partition: more memory than the device": (
        DEVICE + '[[partitions]]\ndevice = "extra:0"\ninstances = [ { memory_total_bytes = 1073741824 },'
        ' { memory_total_bytes = 1073741824 } ]\n', "partitions[1].instances", "more than the device"),
    "partition: an instance bigger than the device": (
        DEVICE + '[[partitions]]\ndevice = "extra:0"\ninstances = [ { memory_total_bytes = 2147483648 } ]\n',
        "partitions[1].instances[1].memory_total_bytes", "at most the device's"),
    "MIG: no such profile": (_mig("9g.90gb"), "partitions[1].instances[1].profile", "MIG profile"),
    "MIG: not a profile": (_mig("half"), "partitions[1].instances[1].profile", "MIG profile"),
    "MIG: too big for the GPU": (_mig("7g.160gb", gib=80), "partitions[1].instances[1].profile",
                                 "does not fit"),
    "MIG: shares above 1": (_mig("4g.40gb", "4g.40gb"), "partitions[1].instances", "8 compute slices"),
    "MIG: no room left": (_mig("3g.40gb", "3g.40gb", "3g.40gb"), "partitions[1].instances[3].profile",
                          "does not fit"),
    "MIG: 8 compute slices of 7": (_mig(*["1g.10gb"] * 8), "partitions[1].instances",
                                   "8 compute slices"),
    "MIG: a GPU without MIG": (_mig("1g.10gb", model="NVIDIA GeForce RTX 4090"),
                               "partitions[1].instances", "has no MIG"),
    "MIG: A30 has no 3g": (_mig("3g.12gb", model="NVIDIA A30"), "partitions[1].instances[1].profile",
                           "1, 2, 4 compute slices"),
    "bus_base: explicit overlap": (DEVICE + "bus_base = 0x10\n"
                                   + DEVICE.replace('"extra"', '"other"') + "bus_base = 0x20\n",
                                   "devices[2].bus_base", "bus 0x20"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_value_names_file_line_key_and_range(tmp_path: Path, case: str) -> None:
    text, key, words = BAD[case]
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert message.startswith(f"{path}, line "), message
    assert f", key '{key}': " in message and words in message, message
    assert "\x1b" not in message and "\n" not in message  # escapes shown escaped


@pytest.mark.parametrize("text", ["", "\n# nothing\n", 'name = "x"\n', "devices = []\n"])
def test_a_scenario_without_a_devices_entry_is_an_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "empty.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=r"key 'devices': the scenario has no \[\[devices\]\] entry"):
        load_scenario(path)
    if "devices" not in text:
        path.write_text(text + DEVICE.replace("count = 2", "count = 0"))  # a node without devices
        assert load_scenario(path).devices[0].count == 0


def test_unreadable_files_are_errors(tmp_path: Path) -> None:
    (tmp_path / "latin1.toml").write_bytes(b'name = "caf\xe9"\n' + DEVICE.encode())
    with pytest.raises(ScenarioError, match=r"line 1, key 'name': not UTF-8 text \(byte 0xe9 at column 12\)"):
        load_scenario(tmp_path / "latin1.toml")
    (tmp_path / "dir.toml").mkdir()
    with pytest.raises(ScenarioError, match="is a directory"):
        load_scenario(tmp_path / "dir.toml")
    (tmp_path / "huge.toml").write_text(DEVICE + "#" * (1 << 20) + "\n")
    with pytest.raises(ScenarioError, match="too large"):
        load_scenario(tmp_path / "huge.toml")
    (tmp_path / "bom.toml").write_bytes(b"\xef\xbb\xbf" + DEVICE.encode())  # as the config reads it
    assert load_scenario(tmp_path / "bom.toml").devices[0].count == 2


def test_include_problems_name_the_including_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    top = tmp_path / "top.toml"
    for include, words in (("missing.toml", "scenario file not found"), ("sub/", "is a directory"),
                           ("nosuch", "unknown scenario 'nosuch'")):
        (tmp_path / "sub").mkdir(exist_ok=True)
        top.write_text(f'name = "t"\ninclude = "{include}"\n')
        with pytest.raises(ScenarioError) as info:
            load_scenario(top)
        assert str(info.value).startswith(f"{top}, line 2, key 'include': {words}"), str(info.value)
    # A built-in name is the built-in scenario, whatever the working directory holds.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mixed").mkdir()
    top.write_text('include = "mixed"\n')
    assert load_scenario(top).devices == load_scenario("mixed").devices


def test_include_depth_is_bounded(tmp_path: Path) -> None:
    (tmp_path / "f0.toml").write_text(DEVICE)
    for n in range(1, 18):
        (tmp_path / f"f{n}.toml").write_text(f'include = "f{n - 1}.toml"\n')
    assert load_scenario(tmp_path / "f16.toml").devices[0].count == 2
    with pytest.raises(ScenarioError, match=r"f1\.toml, line 1, key 'include': includes nest more than 16"):
        load_scenario(tmp_path / "f17.toml")


def _units(path: Path) -> list:
    scenario = load_scenario(path)
    return [make_unit(scenario, spec, n, spec.vendor, spec.model) for spec in scenario.devices
            for n in range(spec.first_index, spec.first_index + spec.count)]


def test_two_entries_of_one_backend_number_on_and_never_share_an_id(tmp_path: Path) -> None:
    path = tmp_path / "two.toml"
    path.write_text(H100 + H100.replace("H100 80GB HBM3", "A100-SXM4-80GB") + "busy_looking = [0]\n"
                    + '[[faults]]\ntype = "lost"\ndevice = "nvidia:3"\n')
    scenario = load_scenario(path)
    assert [d.first_index for d in scenario.devices] == [0, 2]
    assert scenario.devices[1].busy_looking == (2,)
    units = _units(path)
    assert [u.index for u in units] == [0, 1, 2, 3]
    assert len({u.id for u in units}) == len({u.bus_id for u in units}) == 4


def test_bus_ids_are_unique_past_bus_ff(tmp_path: Path) -> None:
    path = tmp_path / "many.toml"
    path.write_text(DEVICE.replace("count = 2", "count = 40") + "bus_base = 0xf0\n"
                    + DEVICE.replace('"extra"', '"other"'))  # (its default bus_base is taken: moved)
    units = _units(path)
    assert len({u.bus_id for u in units}) == 42
    assert units[0].bus_id == "0000:f0:00.0" and units[1].bus_id == "0001:00:00.0"


def test_mixed_keeps_its_bus_ids() -> None:
    units = _units(Path(load_scenario("mixed").source))
    assert units[0].bus_id == "00000000:18:00.0" and len({u.bus_id for u in units}) == len(units)


def test_cli_exits_2_with_nothing_on_stdout_and_no_raw_escape(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(BAD["model: terminal escape"][0])
    result = subprocess.run([sys.executable, "-m", "allsmi", "snapshot", "--simulate", str(path),
                             "--format", "json"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert "key 'devices[1].model'" in result.stderr and "\x1b" not in result.stderr


def test_processes_may_say_anything_and_it_is_cleaned_at_the_schema(tmp_path: Path) -> None:
    """The simulated processes' users and command lines may hold what a real process's may
    (the hostile-name tests need them): cleaned where every tool's text is, never refused."""
    path = tmp_path / "hostile.toml"
    path.write_text(f'users = ["ev{ESC}il", "a\\nb", "evil\\u202egpj.exe"]\n'
                    'commands = ["python \\u001b]8;;http://x\\u0007a.py"]\n'
                    + DEVICE.replace("count = 2", "count = 8"))
    scenario = load_scenario(path)
    assert "ev\x1b[2Jil" in scenario.users and scenario.commands[0].startswith("python \x1b]8")
    result = subprocess.run([sys.executable, "-m", "allsmi", "snapshot", "--simulate", str(path),
                             "--format", "json"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    said = [(p.get("user"), p.get("command")) for d in json.loads(result.stdout)["devices"]
            for p in d["processes"] or ()]
    assert said and not any(ch in str(said) for ch in "\x1b\x07\n\u202e"), said
def test_a_key_or_path_with_an_escape_is_shown_escaped(tmp_path: Path) -> None:
    path = tmp_path / "k\x1b[2J.toml"
    path.write_text('"x\\u001b]0;t\\u0007" = 1\n' + DEVICE)
    with pytest.raises(ScenarioError, match="unknown top-level key") as info:
        load_scenario(path)
    assert "\x1b" not in str(info.value) and "\x07" not in str(info.value)
    assert "k\\x1b[2J.toml" in str(info.value)
