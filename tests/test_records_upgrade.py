"""Records evolve: every record shape ever written (tests/records/, one file per shape) loads
through the upgrade table, and the report shows what it holds (an OOM written with
``metrics: null`` stays an OOM cell)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mxbench.records.codec import HISTORY, UPGRADES, BadRecord, decode, encode, upgrade
from mxbench.records.record import SCHEMA, Record
from mxbench.report import load, tables, text

CORPUS = Path(__file__).parent / "records"
EXAMPLES = Path(__file__).parents[1] / "examples"
FILES = sorted(CORPUS.glob("*.jsonl"))

# file -> the statuses of its lines, in order (what each line must read back as)
EXPECTED = {
    "v1-bench-nonfinite.jsonl": ["ok", "ok"],
    "v1-bench-untyped.jsonl": ["ok", "oom", "ok"],
    "v1-contract-minimum.jsonl": ["ok", "oom", "error", "oom"],
    "v1-first-report-cc-forms.jsonl": ["ok", "ok", "ok"],
    "v1-first-report-tolerated.jsonl": ["ok", "ok", "oom"],
    "v1-published-2020.jsonl": ["ok"] * 7 + ["oom"] * 3,
    "v1-store-skeleton.jsonl": ["timeout", "error"],
    "v1-typed-cpu.jsonl": ["ok", "ok"],
    "v1-typed-failures.jsonl": ["oom", "timeout"],
    "v1-typed-h100-jax.jsonl": ["ok"],
    "v2-current.jsonl": ["ok", "oom"],
}


def _read(name: str) -> list[Record]:
    return [decode(line) for line in (CORPUS / name).read_bytes().splitlines()]


def test_the_corpus_is_the_list_above() -> None:
    assert [f.name for f in FILES] == sorted(EXPECTED)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_old_shape_loads_as_the_current_version(path: Path) -> None:
    lines = path.read_bytes().splitlines()
    recs = [decode(line) for line in lines]
    assert [r.status for r in recs] == EXPECTED[path.name]
    for line, rec in zip(lines, recs, strict=True):
        assert rec.schema == SCHEMA and rec.problem() is None
        raw = json.loads(line)
        assert rec.cell == raw["cell"] and rec.params.batch_size == raw["params"]["batch_size"]
        # written again, it reads back the same (the upgrade is complete)
        assert decode(encode(rec)) == rec


def test_used_by_tf_is_retired_into_used_gpu() -> None:
    untyped = _read("v1-bench-untyped.jsonl")
    assert [r.device.used_gpu for r in untyped] == [True, True, False]
    assert decode((CORPUS / "v1-typed-h100-jax.jsonl").read_bytes()).device.used_gpu is True
    new = encode(untyped[0]).decode()
    assert '"used_gpu":true' in new and "used_by_tf" not in new


def test_a_non_finite_loss_the_untyped_bench_wrote_as_nan_reads_as_null() -> None:
    """The bench before the typed record wrote its line with json.dumps (NaN / Infinity for a
    loss that was not finite) and that mxbench read it back: it loads, the non-finite values
    null as today's writer writes them, and the report still shows the cells."""
    first, second = _read("v1-bench-nonfinite.jsonl")
    assert (first.metrics.loss_first, first.metrics.loss_last) == (None, None)
    assert (second.metrics.loss_first, second.metrics.loss_last) == (2.31, None)
    assert first.step is not None and first.step.median == 97.1
    assert b"NaN" not in encode(first) and b"Infinity" not in encode(second)
    loaded = load.load([CORPUS / "v1-bench-nonfinite.jsonl"])
    assert loaded.bad == [] and len(loaded.winners) == 2
    line = (CORPUS / "v1-bench-nonfinite.jsonl").read_text().splitlines()[0]
    # the same line with a value the type refuses before the NaN (an older shape to mend)
    older = decode(line.replace('"compute_capability": "7.0"', '"compute_capability": 7.0'))
    assert older.device.compute_capability == "7.0" and older.metrics.loss_first is None
    # the current version never wrote them: such a line is still refused, saying why
    with pytest.raises(BadRecord, match="NaN / Infinity"):
        decode(line.replace('"mxbench.result/1"', f'"{SCHEMA}"'))


def test_compute_capability_written_as_a_number_or_a_pair_reads_as_text() -> None:
    recs = _read("v1-first-report-tolerated.jsonl")
    assert [r.device.compute_capability for r in recs] == ["8.0", "8.0", "8.0"]
    assert recs[1].device.present_gpus[0].compute_capability == "8.0"
    assert recs[0].metrics.step_ms is not None and recs[0].metrics.step_ms.samples == []


def test_every_compute_capability_the_first_report_read_reads_as_text() -> None:
    """The first report's parse_cc read 'sm_86', 'compute_86', a pair of numbers or of
    numerals, and text with spaces as 8.6: each is '8.6' now, in the record and the frame."""
    import warnings

    import mxbench

    recs = _read("v1-first-report-cc-forms.jsonl")
    assert [r.device.compute_capability for r in recs] == ["8.6"] * 3
    assert [r.device.present_gpus[0].compute_capability for r in recs] == ["8.6"] * 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        frame = mxbench.load_results(CORPUS / "v1-first-report-cc-forms.jsonl")
    assert frame["compute_capability"].tolist() == ["8.6"] * 3
    # the current version writes '8.6' itself: its text is taken as written
    line = (CORPUS / "v1-first-report-cc-forms.jsonl").read_text().splitlines()[0]
    assert decode(line.replace('"mxbench.result/1"', f'"{SCHEMA}"').replace(
        '["8", "6"]', '"8.6"')).device.compute_capability == "sm_86"  # fmt: skip


def test_metrics_null_oom_and_error_are_cells_of_the_report() -> None:
    loaded = load.load([CORPUS / "v1-contract-minimum.jsonl"])
    assert loaded.bad == [] and len(loaded.winners) == 4
    (t,) = tables.build(loaded.winners)
    _, rows = text.table_rows(t)
    by_batch = {row[0]: row for row in rows}
    assert by_batch["512"][1] == "OOM" and by_batch["512"][3] == "error"
    assert by_batch["32"][3] == "OOM" and by_batch["32"][1].startswith("120")


def test_the_whole_corpus_and_every_example_load_without_a_skipped_line() -> None:
    for where in (CORPUS, *sorted(p for p in EXAMPLES.iterdir() if p.is_dir())):
        loaded = load.load([where])
        assert loaded.read > 0 and loaded.bad == [], (where, loaded.bad[:3])


def test_every_version_but_the_current_has_an_upgrade_step_and_a_corpus_file() -> None:
    versions = list(HISTORY)
    assert versions[-1] == SCHEMA
    assert set(UPGRADES) == set(versions[:-1])
    for v in versions:
        n = re.fullmatch(r"mxbench\.result/(\d+)", v)
        assert n is not None and list(CORPUS.glob(f"v{n.group(1)}-*.jsonl")), v


def test_an_unknown_version_is_left_as_it_is_and_named_by_the_report() -> None:
    line = json.dumps({"schema": "mxbench.result/99", "cell": "x", "host": "h", "status": "ok",
                       "params": {"batch_size": 8}, "metrics": {"novel": 1}})  # fmt: skip
    assert upgrade(json.loads(line))["schema"] == "mxbench.result/99"
    why = decode(line).problem()
    assert why is not None and "unknown schema 'mxbench.result/99'" in why


_NEWER = {"schema": "mxbench.result/3", "cell": "x", "host": "h", "status": "ok",
          "params": {"batch_size": 8}}  # fmt: skip


@pytest.mark.parametrize(
    "raw",
    [_NEWER | {"metrics": None}, _NEWER | {"status": "skipped"},
     _NEWER | {"params": {"batch_size": "auto"}}, {"schema": "pyperf/1.0", "benchmarks": []}],
    ids=["metrics-null", "new-status", "new-param-shape", "another-tool"],
)  # fmt: skip
def test_a_line_of_an_unknown_version_the_type_refuses_says_its_version(
    tmp_path: Path, raw: dict[str, object]
) -> None:
    """A newer mxbench (or another tool) may write what this one's type refuses: the warning
    names the version (the reason to upgrade mxbench), not the first field the type tripped
    on."""
    why = f"unknown schema {raw['schema']!r} (this mxbench reads {SCHEMA})"
    with pytest.raises(BadRecord) as err:
        decode(json.dumps(raw))
    assert str(err.value) == why
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps(raw) + "\n")
    loaded = load.load([path])
    assert [(b.lineno, b.reason) for b in loaded.bad] == [(1, why)]


def test_an_old_line_the_upgrade_cannot_mend_is_still_a_bad_record() -> None:
    line = json.dumps({"schema": "mxbench.result/1", "cell": "x", "host": "h", "status": "ok",
                       "params": {"batch_size": "many"}})  # fmt: skip
    with pytest.raises(BadRecord, match="batch_size"):
        decode(line)
    with pytest.raises(BadRecord, match="Expected `object`, got `array`"):
        decode("[1, 2]")


@pytest.mark.parametrize("schema", ["mxbench.result/1", SCHEMA, None])
def test_a_failure_written_with_null_parts_loads_in_any_version(schema: str | None) -> None:
    """`metrics: null` (and null device, image, software) on an oom or error: allowed by the
    first contract, and read the same way in a hand-written current or schema-less line."""
    raw: dict[str, object] = {"cell": "c", "host": "h", "status": "oom"}
    raw["params"] = {"batch_size": 8}
    raw |= dict.fromkeys(("metrics", "device", "image", "software", "error"))
    if schema is not None:
        raw["schema"] = schema
    rec = decode(json.dumps(raw))
    assert rec.schema == SCHEMA and rec.problem() is None and rec.status == "oom"
    assert rec.metrics.step_ms is None and rec.step is None
    # a null where the type holds a number is still a bad record, not silently dropped
    with pytest.raises(BadRecord, match="batch_size"):
        decode(json.dumps({**raw, "params": {"batch_size": None}}))


def test_a_field_a_newer_mxbench_adds_inside_search_is_ignored(tmp_path: Path) -> None:
    """Within a version fields are only added, and a reader ignores the ones it does not know:
    in ``search`` too (a batch-search trial written by a newer mxbench), for the report and
    for --resume; the matrix still refuses a misspelt ``batch_search`` key."""
    from mxbench.matrix.schema import settings_struct
    from mxbench.matrix.search import BatchSearch
    from mxbench.records.store import ResultStore

    raw = json.loads((CORPUS / "v2-current.jsonl").read_text().splitlines()[0])
    raw["search"] = {"start": 8, "cap": 4096, "max_trials": 16, "precision": 0.05, "growth": 3}
    rec = decode(json.dumps(raw))
    assert rec.search == BatchSearch() and rec.status == "ok"
    (tmp_path / "h.jsonl").write_text(json.dumps(raw) + "\n")
    loaded = load.load([tmp_path])
    assert loaded.bad == [] and len(loaded.winners) == 1
    assert ResultStore(tmp_path).done_cells() == {raw["cell"]}
    with pytest.raises(ValueError, match="unknown field `growth`"):
        settings_struct({"growth": 3}, BatchSearch)


@pytest.mark.parametrize("schema", ["mxbench.result/1", SCHEMA])
def test_a_null_for_a_list_or_default_reads_as_not_recorded_at_any_depth(
    tmp_path: Path, schema: str
) -> None:
    """The lenient rule (a null where the type holds a list, an object or a default is that
    default) holds in every part of the record, not only in its first levels: the profile,
    its oneDNN evidence and top operations, a training run's points, the model's facts."""
    raw = json.loads((CORPUS / "v2-current.jsonl").read_text().splitlines()[0])
    raw["schema"] = schema
    raw["profile"] = {
        "tool": "tf.profiler",
        "breakdown_ms": None,
        "top_ops": None,
        "onednn": {"gemm_isas": None, "kernels": None, "gemm_ms": 1.5},
    }
    raw["train"] = {"metric": None, "points": [{"epoch": None, "val_metric": 0.5}]}
    raw["model"] = {"name": "blog-cnn", "off_multiple_of_8": [{"layer": "d", "value": 10}],
                    "policy_overrides": None, "inputs": None}  # fmt: skip
    rec = decode(json.dumps(raw))
    assert rec.profile is not None and rec.profile.top_ops == [] and rec.profile.breakdown_ms == {}
    assert rec.profile.onednn is not None and rec.profile.onednn.gemm_isas == {}
    assert rec.profile.onednn.gemm_ms == 1.5
    assert rec.train is not None and rec.train.metric == "accuracy"
    assert rec.train.points[0].epoch == 0 and rec.train.points[0].val_metric == 0.5
    assert rec.model is not None and rec.model.policy_overrides == []
    assert rec.model.off_multiple_of_8[0].value == 10
    (tmp_path / "h.jsonl").write_text(json.dumps(raw) + "\n")
    assert load.load([tmp_path]).bad == []


def test_an_old_line_is_read_about_as_fast_as_it_is_parsed() -> None:
    """A results folder of an older version is read line by line through the upgrade: the
    walk over the type is worked out once, not per line (it had cost 2.5 ms a line, four
    minutes for 100,000 records). About 20 us a line; 20x that still passes."""
    import time

    lines = [line for path in FILES for line in path.read_bytes().splitlines()] * 20
    began = time.process_time()
    for line in lines:
        decode(line)
    assert (time.process_time() - began) / len(lines) < 400e-6


def test_the_version_history_is_in_the_record_documentation() -> None:
    """docs/record.md says which versions there were, what each wrote and that every one of
    them loads (the file is generated: test_results checks it is up to date)."""
    doc = (Path(__file__).parents[1] / "docs" / "record.md").read_text(encoding="utf-8")
    section = doc[doc.index("## Versions") :]
    for version, what in HISTORY.items():
        assert f"`{version}`" in section and " ".join(what.split()) in section, version
    assert "UPGRADES" in section and "tests/records/" in section


def _nulls_left(obj: object, kind: type) -> list[str]:
    """Fields of ``obj`` (a ``kind``, and the parts below it) that are null where the type
    holds a default other than null."""
    import msgspec

    from mxbench.records.record import Part

    if not isinstance(obj, dict):
        return []
    out = []
    for f in msgspec.structs.fields(kind):
        value = obj.get(f.encode_name)
        has_default = f.default not in (None, msgspec.NODEFAULT) or (
            f.default_factory is not msgspec.NODEFAULT
        )
        if f.encode_name in obj and value is None and has_default:
            out.append(f.encode_name)
        hint = str(f.type)
        for part in Part.__subclasses__():
            if part.__name__ in hint.split("[")[-1] or hint.endswith(part.__name__):
                items = value if isinstance(value, list) else [value]
                out += [f"{f.encode_name}.{n}" for i in items for n in _nulls_left(i, part)]
    return out


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_an_upgrade_step_leaves_no_null_where_the_type_holds_a_default(path: Path) -> None:
    # codec.upgraded drops nulls of a line of this version only: a line of an older
    # version has had them dropped by its steps (and a fleet of them is read twice as fast)
    from mxbench.records.codec import upgraded

    for line in path.read_bytes().splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            obj = json.loads(line, parse_constant=lambda _: None)
        assert _nulls_left(upgraded(obj), Record) == [], line[:80]


def test_nulls_are_dropped_only_where_the_type_refuses_them() -> None:
    """The reader converts a file of an older version with its nulls kept, and drops them
    only when the conversion refuses one: the same records while every field whose default
    is not null refuses a null (a field that took one would keep it instead of its
    default)."""
    import msgspec

    from mxbench.records.codec import nulls_refused

    class Lenient(msgspec.Struct):
        x: int | None = 5

    assert nulls_refused() and not nulls_refused(Lenient)


@pytest.mark.parametrize(
    "path", [*FILES, *sorted((EXAMPLES / "published").glob("*.jsonl"))], ids=lambda p: p.name
)
def test_a_file_read_at_once_reads_as_its_lines_one_by_one(path: Path) -> None:
    """An older file decoded at once (its nulls dropped only where refused) holds the records
    its lines make one by one through the upgrade."""
    whole, single = load.Reader(), load.Reader()
    at_once = whole.decode_all(path.read_bytes())
    if at_once is None:
        pytest.skip("a line the file-at-once path leaves to the line-by-line one")
    lines = [single.decode(line) for line in path.read_bytes().splitlines() if line.strip()]
    whole.flush()
    single.flush()
    assert at_once == lines
