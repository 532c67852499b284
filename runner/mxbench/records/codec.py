"""Records as JSON lines: making one for an attempt, encoding, decoding with the bounds an
untrusted line gets, the upgrades that keep every record shape ever written loading, and the
records a bench printed.

Schema ``mxbench.result/2``. Records evolve by versions: within one version fields are only
added (with defaults; a field a line does not have takes its default, unknown fields from a
newer mxbench are ignored); a change that is not an addition (a rename, a null that the type
no longer takes) makes a new version, with a step in :data:`UPGRADES` that rewrites a line of
the previous version before it is decoded (pyperf's version map, asv's ``update_to_2``).
Every line written by any version of mxbench, or allowed by a published contract, loads:
``tests/records/`` holds one file per shape ever written.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import json
import re
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from mxbench.matrix.params import DEFAULT_IMAGE_SIZE, Params
from mxbench.records.record import SCHEMA, Image, Part, Record, Status, unknown_schema


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_record(
    *,
    params: Params,
    status: Status,
    error: str | None = None,
    cell: str | None = None,
    host: str | None = None,
    engine: str | None = None,
    image: Image | None = None,
) -> Record:
    """A record of an attempt, stamped with the current time."""
    return Record(
        cell=cell,
        time=now_iso(),
        host=host,
        engine=engine,
        image=image or Image(),
        params=params,
        status=status,
        error=error,
    )


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Record)


def encode(record: Record) -> bytes:
    """One JSON line (with its newline). Non-finite floats are written as null."""
    return _encoder.encode(record) + b"\n"


class BadRecord(ValueError):
    """A line that is not a record; ``str()`` is the reason, in one line."""


def decode(line: bytes | str) -> Record:
    """The record on one line, upgraded to this version, or :class:`BadRecord` saying why
    not. A line of the current version is decoded straight into the type; any other line
    (an older version, or one the type rejects) is read as JSON, upgraded (:func:`upgrade`)
    and then converted. Lines over :data:`MAX_LINE_BYTES` and nesting beyond what a record
    can be are refused, never a crash of the reader."""
    if len(line) > MAX_LINE_BYTES:
        raise BadRecord(f"line of {len(line)} bytes (at most {MAX_LINE_BYTES} are read)")
    try:
        rec = _decoder.decode(line)
        if rec.schema == SCHEMA:
            return _bounded(rec)
        obj = _json_decoder.decode(line)
    except msgspec.ValidationError:
        try:
            obj = _json_decoder.decode(line)
        except msgspec.DecodeError as exc:
            obj = _old_non_finite(line, exc)
        except RecursionError:
            raise BadRecord("nested too deeply to be a record") from None
        except UnicodeDecodeError as exc:
            raise _not_utf8(exc) from None
    except RecursionError:
        raise BadRecord("nested too deeply to be a record") from None
    except msgspec.DecodeError as exc:
        obj = _old_non_finite(line, exc)
    except UnicodeDecodeError as exc:  # msgspec's, for a string that is not UTF-8
        raise _not_utf8(exc) from None
    try:
        if isinstance(obj, dict):
            obj = upgraded(obj)
        rec = msgspec.convert(obj, Record)
    except msgspec.ValidationError as exc:
        schema = obj.get("schema") if isinstance(obj, dict) else None
        if isinstance(schema, str) and schema != SCHEMA:  # upgrade() knows no step for it
            raise BadRecord(unknown_schema(schema)) from None
        raise BadRecord(_reason(str(exc))) from None
    except RecursionError:
        raise BadRecord("nested too deeply to be a record") from None
    return _bounded(rec)


def _bounded(rec: Record) -> Record:
    if too_deep(rec.run):  # the one free-form part: readers copy and render it
        raise BadRecord(f"'run' nested deeper than {MAX_DEPTH} levels")
    return rec


def _not_utf8(exc: UnicodeDecodeError) -> BadRecord:
    return BadRecord(f"not UTF-8 text ({exc.reason})")


def _old_non_finite(line: bytes | str, exc: msgspec.DecodeError) -> Any:
    """A line of an earlier version with NaN / Infinity in it, those read as null (what the
    current writer writes for a value that is not finite): the bench before the typed record
    wrote its line with ``json.dumps`` (a loss that was not finite as NaN), and that mxbench
    read it back. Any other line that is not JSON: :class:`BadRecord` saying why."""
    raw = line.encode("utf-8", "replace") if isinstance(line, str) else line
    try:  # msgspec 0.23 says "Invalid UTF-8" as a DecodeError, 0.22 raised UnicodeDecodeError
        raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        raise _not_utf8(bad) from None
    if _NON_FINITE.search(raw):
        try:
            obj = json.loads(raw, parse_constant=lambda _: None)
        except (ValueError, RecursionError):
            obj = None
        schema = obj.get("schema") if isinstance(obj, dict) else None
        if isinstance(schema, str) and schema in UPGRADES:
            return obj
    raise _not_json(line, exc) from None


def _not_json(line: bytes | str, exc: msgspec.DecodeError) -> BadRecord:
    if isinstance(line, str):
        line = line.encode("utf-8", "replace")
    if _NON_FINITE.search(line):
        return BadRecord("not JSON (NaN / Infinity are not JSON numbers)")
    return BadRecord(f"not JSON ({_reason(str(exc))})")


# ---- Versions: every record shape ever written keeps loading -------------------------------

HISTORY: dict[str, str] = {
    "mxbench.result/1": "Written 2026-11-21 to 2026-11-23: the first contract. Its minimum "
    "(schema, cell, host, status, params) let any other part be null (`metrics: null` on "
    "an oom or error); "
    "the first report read a compute capability written as a number (7.0), a pair ([7, 0]) "
    "or a CUDA target ('sm_70'); "
    "device.used_by_tf said whether the framework used the GPU, whatever the backend; the bench "
    "before the typed record wrote a loss that was not finite as NaN or Infinity (json.dumps).",
    SCHEMA: "Written since 2026-11-23: no nulls where the type holds an object, a list or a "
    "default (read leniently: such a null is the default, as in /1); "
    "compute capabilities are text ('7.0'); device.used_by_tf is device.used_gpu. "
    "Added since 2026-11-29: roofs (how fast the record's device can go per dtype, measured, "
    "by formula and from the datasheet, each with its source) and model.flops_by_source "
    "(every FLOP count the bench found, beside the one it used); pairing.idle_ratios (a "
    "paired arm's rounds with each window given back the CPU other processes took; the "
    "verdict is judged from them where present); a line without them reads them as empty.",
}
_json_decoder = msgspec.json.Decoder()


def _part_of(hint: Any) -> tuple[type[Part], bool] | None:
    """The record part a field holds (through Annotated and ``| None``), and whether a list
    of them; None: not a part."""
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        found = [_part_of(a) for a in typing.get_args(hint) if a is not type(None)]
        return found[0] if len(found) == 1 else None
    if typing.get_origin(hint) is list:
        inner = _part_of(typing.get_args(hint)[0])
        return (inner[0], True) if inner is not None and not inner[1] else None
    return (hint, False) if isinstance(hint, type) and issubclass(hint, Part) else None


@functools.cache
def _null_shape(
    kind: type[msgspec.Struct],
) -> tuple[tuple[str, ...], tuple[tuple[str, type[Part], bool], ...]]:
    """Of a record part's fields: those whose default is not None (a null there means "not
    recorded"), and those that hold parts (a part, or a list of them), to walk into."""
    fields = msgspec.structs.fields(kind)
    defaulted = tuple(
        f.encode_name
        for f in fields
        if (f.default is not None and f.default is not msgspec.NODEFAULT)
        or f.default_factory is not msgspec.NODEFAULT
    )
    parts = tuple(
        (f.encode_name, *p)
        for f in fields
        if (p := _part_of(f.type)) is not None and any(_null_shape(p[0]))
    )  # (a part with no default but null, and none below it, is not walked into)
    return defaulted, parts


def _takes_null(hint: Any) -> bool:
    """Whether a field of this type takes a null as a value (``| None``, Any, object)."""
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    if hint in (Any, object, type(None)):
        return True
    origin = typing.get_origin(hint)
    return origin in (typing.Union, types.UnionType) and any(
        _takes_null(a) for a in typing.get_args(hint)
    )


@functools.cache
def nulls_refused(kind: type[msgspec.Struct] | None = None) -> bool:
    """Whether, in a ``kind`` (the record) and every part below it, each field whose default
    is not null refuses a null by its type. Then a line that converts into the type with its
    nulls kept held no null that :func:`upgrade` drops, and reads the same: a reader may
    convert first and drop the nulls only when the conversion refuses one (walking every
    part of every line for nulls was a fifth of reading the published tables)."""
    kind = Record if kind is None else kind
    return all(
        not _takes_null(f.type)
        for f in msgspec.structs.fields(kind)
        if f.encode_name in _null_shape(kind)[0]
    ) and all(nulls_refused(part) for _, part, _ in _null_shape(kind)[1])


def _nulls_to_defaults(obj: dict[str, Any], kind: type[msgspec.Struct]) -> None:
    """Every null in ``obj`` (a ``kind``) and in the parts below it where the type holds a
    default other than null, removed (read as that default)."""
    defaulted, parts = _null_shape(kind)
    for name in defaulted:
        if name in obj and obj[name] is None:
            del obj[name]
    for name, part, many in parts:
        value = obj.get(name)
        if many and isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    _nulls_to_defaults(item, part)
        elif not many and isinstance(value, dict):
            _nulls_to_defaults(value, part)


def cc_pair(value: object) -> tuple[int, int] | None:
    """(major, minor) of a compute capability as any writer put it: '7.0', 7.0, 7, [7, 0],
    ['7', '0'], 'sm_70', 'compute_70' (what the first report read); anything else: None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (list, tuple)) and len(value) == 2:
        try:
            return int(value[0]), int(value[1])
        except (TypeError, ValueError):
            return None
    text = f"{float(value):.1f}" if isinstance(value, (int, float)) else str(value)
    text = text.strip().lower()
    m = re.fullmatch(r"(?:sm_|compute_)(\d{1,2})(\d)", text) or re.fullmatch(
        r"(\d{1,2})\.(\d)", text
    )
    return (int(m.group(1)), int(m.group(2))) if m else None


def _cc_text(value: Any) -> Any:
    """A compute capability of an older line as text: 7.0, [8, 6], 'sm_86' -> '7.0', '8.6';
    what :func:`cc_pair` cannot read, unchanged."""
    if type(value) in (str, float, int):  # (a fleet's lines repeat a few: read once each)
        return _cc_text_of(value)
    pair = cc_pair(value)
    return value if pair is None else f"{pair[0]}.{pair[1]}"


@functools.lru_cache(maxsize=256, typed=True)
def _cc_text_of(value: str | float) -> str | float:
    pair = cc_pair(value)
    return value if pair is None else f"{pair[0]}.{pair[1]}"


def _drop_nulls(obj: dict[str, Any]) -> dict[str, Any]:
    """A null where the type holds an object, a list or a default is read as "not recorded"
    (the default), in every part of the record: the first contract allowed it (`metrics:
    null` on an oom), and a reader that is lenient here loses nothing a writer meant."""
    _nulls_to_defaults(obj, Record)
    return obj


def _upgrade_1_to_2(obj: dict[str, Any], nulls: bool = True) -> dict[str, Any]:
    """/1 -> /2. Its nulls dropped first (``nulls``); it writes none where the type holds a
    default (used_gpu, compute capabilities: null is their default; params are no part)."""
    if nulls:
        _drop_nulls(obj)
    p = obj.get("params")
    if isinstance(p, dict):  # /1 had no unset image size: the experiment's 256 was the default
        p.setdefault("image_size", DEFAULT_IMAGE_SIZE)
    device = obj.get("device")
    if isinstance(device, dict):
        if "used_by_tf" in device:
            device.setdefault("used_gpu", device.pop("used_by_tf"))
        if "compute_capability" in device:
            device["compute_capability"] = _cc_text(device["compute_capability"])
        gpus = device.get("present_gpus")
        for gpu in gpus if isinstance(gpus, list) else ():
            if isinstance(gpu, dict) and "compute_capability" in gpu:
                gpu["compute_capability"] = _cc_text(gpu["compute_capability"])
    obj["schema"] = "mxbench.result/2"
    return obj


# What _upgrade_1_to_2 rewrites in a /1 line besides its nulls and its schema: lines
# decoded straight into the record type (a reader's fast path) read as the upgrade makes
# them only where neither :func:`renames_in_1` nor :func:`same_as_upgraded_1` says no.
RENAMED_IN_1 = (b'"used_by_tf"',)


def renames_in_1(data: bytes) -> bool:
    """Whether /1 lines hold a name the step renames (looked for before any decoding: a
    record type drops a name it does not know)."""
    return any(word in data for word in RENAMED_IN_1)


def same_as_upgraded_1(recs: Sequence[Record]) -> bool:
    """Whether ``recs``, /1 lines without a renamed name (:func:`renames_in_1`) decoded
    straight into the record type (their nulls kept: :func:`nulls_refused`), read as
    :func:`upgrade` makes the lines, the schema aside: every compute capability in the text
    the step writes, and an image size given (the step gives 256 to a line without one; a
    null stays null)."""
    for rec in recs:
        if rec.schema != "mxbench.result/1" or rec.params.image_size is None:
            return False
        device = rec.device
        if device.compute_capability is not None or device.present_gpus:
            ccs = [device.compute_capability, *(g.compute_capability for g in device.present_gpus)]
            if any(cc is not None and _cc_text_of(cc) != cc for cc in ccs):
                return False
    return True


# schema -> the step that rewrites a line of it as the next version (applied until current).
UPGRADES: dict[str, Callable[[dict[str, Any], bool], dict[str, Any]]] = {
    "mxbench.result/1": _upgrade_1_to_2,
}


def upgraded(obj: dict[str, Any], nulls: bool = True) -> dict[str, Any]:
    """A decoded JSON line, in place, as :func:`decode` converts it into the record type:
    a line of an older version upgraded (:func:`upgrade`; each step drops the nulls its
    version allowed and writes none where the type holds a default), a line of this
    version with its nulls where the type holds a default read as not recorded
    (hand-written lines: nulls read as in /1), a line of an unknown version as it is.
    ``nulls=False``: every null kept (see :func:`nulls_refused`)."""
    schema = obj.get("schema", SCHEMA)
    if schema == SCHEMA:
        return _drop_nulls(obj) if nulls else obj
    return upgrade(obj, nulls)


def upgrade(obj: dict[str, Any], nulls: bool = True) -> dict[str, Any]:
    """A decoded JSON line of any known version, rewritten (in place) as the current one;
    an unknown schema (a newer mxbench, another tool) is returned as it is. ``nulls=False``:
    the nulls the steps drop kept (see :func:`nulls_refused`)."""
    while True:
        schema = obj.get("schema")
        step = UPGRADES.get(schema) if isinstance(schema, str) else None
        if step is None:
            return obj
        obj = step(obj, nulls)


# Bounds on what a line may be (a bench's output, a file from anywhere): a record with a
# million timed steps (params.MAX_STEPS) and their losses is about 40 MB.
MAX_LINE_BYTES = 64 * 2**20
MAX_DEPTH = 16


def too_deep(value: Any) -> bool:
    """Whether ``value`` nests deeper than :data:`MAX_DEPTH` levels (what a record's one
    free-form part, ``run``, may not: readers copy and render it)."""
    return _depth(value) > MAX_DEPTH


def _depth(value: Any, level: int = 0) -> int:
    """How deeply ``value`` nests (0: a scalar), looking no further than :data:`MAX_DEPTH`."""
    if level > MAX_DEPTH or not isinstance(value, dict | list):
        return level
    items = value.values() if isinstance(value, dict) else value
    return max((_depth(v, level + 1) for v in items), default=level + 1)


_NON_FINITE = re.compile(rb"[:\[,]\s*-?(NaN|Infinity)\s*[,}\]]")


def _reason(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


_JSON_LINE = re.compile(rb"^\s*\{.*\}\s*$")


def parse_bench_output(stdout: str | bytes) -> Record | None:
    """The record a bench printed: the last stdout line that decodes as one."""
    return bench_output(stdout)[0]


def bench_output(stdout: str | bytes) -> tuple[Record | None, str | None]:
    """The record a bench printed (the last stdout line that decodes as one), or None and
    why the last line that looked like one is not (None: nothing looked like one).

    Searching from the end tolerates stray prints (a library writing to stdout) before it.
    The output is untrusted: bytes that are not UTF-8 are replaced, lines past
    :data:`MAX_LINE_BYTES` and nesting past :data:`MAX_DEPTH` are not records (engines
    bound how much output they keep).
    """
    if isinstance(stdout, str):
        stdout = stdout.encode("utf-8", "replace")
    why = None
    for line in reversed(stdout.splitlines()):
        if not _JSON_LINE.match(line):
            continue
        try:
            rec = decode(line.decode("utf-8", "replace").encode())
        except BadRecord as exc:
            why = why or str(exc)
            continue
        if rec.schema == SCHEMA:
            return rec, None
        why = why or unknown_schema(rec.schema)
    return None, why


def bench_records(stdout: str | bytes) -> list[Record]:
    """Every record a bench printed, in order (a paired process prints one per arm)."""
    if isinstance(stdout, str):
        stdout = stdout.encode("utf-8", "replace")
    out = []
    for line in stdout.splitlines():
        if _JSON_LINE.match(line):
            with contextlib.suppress(BadRecord):
                rec = decode(line.decode("utf-8", "replace").encode())
                if rec.schema == SCHEMA:
                    out.append(rec)
    return out


def tail(text: str, lines: int = 20, chars: int = 4000) -> str:
    """The first line (the reason: an exception's type and message, the engine's account of
    a kill) and the last lines of a log, for error fields: enough to see why, small enough
    to store. What is left out between them is marked."""
    every = text.strip().splitlines()
    if len(every) <= lines and len(text.strip()) <= chars:
        return text.strip()
    head = every[0][: chars // 4] if every else ""
    room = chars - len(head) - 2
    rest = "\n".join(every[1:][-(lines - 2) :])[-room:] if lines > 2 and room > 0 else ""
    return f"{head}\n…\n{rest}" if rest else head
