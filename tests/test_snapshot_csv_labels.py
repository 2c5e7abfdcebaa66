"""``allsmi snapshot --format csv``: a group label says in the ``labels`` cell what it says in the
JSON, the table and ``allsmi_resource_group_info``: ``Zürich`` as written, not ``Z\\u00fcrich``
(the cell is JSON, UTF-8 as the rest of the file and as the FOCUS export's ``Tags``)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from .conftest import run_allsmi

CONFIG = """\
[groups.training]
labels = { site = "Zürich", team = "ml \\"core\\"", owner = "=cmd" }

[[rules]]
resource_group = "training"
vendor = "nvidia"
"""


def test_csv_labels_cell_holds_the_labels_as_written(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(CONFIG, encoding="utf-8")
    args = ("snapshot", "--simulate", "mixed", "--config", str(config))
    result = run_allsmi(*args, "--format", "csv")
    assert result.returncode == 0, result.stderr
    rows = [r for r in csv.DictReader(io.StringIO(result.stdout)) if r["resource_group"] == "training"]
    assert rows
    want = {"site": "Zürich", "team": 'ml "core"', "owner": "=cmd"}
    for row in rows:
        assert "Zürich" in row["labels"] and "\\u" not in row["labels"], row["labels"]
        assert json.loads(row["labels"]) == want
    doc = run_allsmi(*args, "--format", "json")
    assert doc.returncode == 0, doc.stderr
    assert {d["id"]: d["labels"] for d in json.loads(doc.stdout)["devices"]
            if d["resource_group"] == "training"} == {r["id"]: want for r in rows}
