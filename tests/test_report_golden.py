"""The report's bytes for committed record sets stay the same (tests/golden/): a change
made for speed (issue 49) must not change a character of any format. The sets are the
record shapes users have: the experiment's published tables (schema /1), full bench
records, paired records; and a fleet of published copies large enough (more than
fanout.MIN_ITEMS tables) that its sections are made in worker processes.

After a change that is meant to change the report: MXBENCH_GOLDEN=write pytest this file,
then read the diff of tests/golden/."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from mxbench.report import document, load, tables

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).resolve().parent / "golden"
RECORDS = "benchmarks/records"
SETS = {
    "published": ["examples/published"],
    "bench": ["examples/measured", f"{RECORDS}/h100-process-gpu.jsonl",
              f"{RECORDS}/cpu-torch-independent"],
    "paired": [f"{RECORDS}/cpu-step18-series", f"{RECORDS}/h100-paired-gpu.jsonl",
               f"{RECORDS}/h200-paired-energy.jsonl", f"{RECORDS}/h200-paired-profile.jsonl",
               f"{RECORDS}/cpu-jax-resnet50-map"],
}  # fmt: skip
FORMATS = {"markdown": "md", "json": "json", "html": "html", "csv": "csv"}
# copies of the published tables: 3 tables each, more than fanout.MIN_ITEMS in all
COPIES = 100


def _render(sources: list[str], fmt: str) -> str:
    with load.collector_paused():
        loaded = load.load(sources)
        doc = document.build(loaded, tables.build(loaded.winners))
        return document.render(doc, fmt)


def _check(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("MXBENCH_GOLDEN") == "write":
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{name}: the report's bytes changed"


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("shape", sorted(SETS))
def test_a_committed_record_set_renders_as_before(
    shape: str, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # the report names the folders as given: relative here
    text = _render(SETS[shape], fmt)
    if fmt == "html":  # (its plots make it large: held as its digest)
        _check(f"{shape}.html.sha256", hashlib.sha256(text.encode()).hexdigest() + "\n")
    else:
        _check(f"{shape}.{FORMATS[fmt]}", text)


def _copies(root: Path) -> None:
    """The published records, ``COPIES`` times, each copy a host (and cell) of its own."""
    for path in sorted((ROOT / "examples" / "published").glob("*.jsonl")):
        recs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        for copy in range(COPIES):
            lines = []
            for r in recs:
                cell = hashlib.sha256(f"{r['cell']}/{copy}".encode()).hexdigest()[:16]
                lines.append(json.dumps({**r, "host": f"{r['host']}-{copy}", "cell": cell}))
            (root / f"{copy:03d}-{path.name}").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("fmt", ["markdown", "json"])
def test_a_fleet_of_published_copies_renders_as_before(
    fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    _copies(fleet)
    monkeypatch.chdir(tmp_path)
    text = _render(["fleet"], fmt)
    assert text.count("blog-v100-") >= COPIES
    _check(f"published-{COPIES}-copies.{FORMATS[fmt]}.sha256",
           hashlib.sha256(text.encode()).hexdigest() + "\n")  # fmt: skip
