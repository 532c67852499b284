"""What every part of the result record is made of (:mod:`mxbench.records.record`): the part
type, the field description, the bounded numbers."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from mxbench.matrix.params import MAX_INT

# A measured time or rate: positive and finite (JSON has no NaN; 1e999 decodes as inf).
Positive = Annotated[float, Meta(gt=0, lt=1e15)]
Count = Annotated[int, Meta(ge=0, le=MAX_INT)]


def Doc(text: str) -> Meta:
    """A field's description: it goes into docs/record.md (:mod:`mxbench.records.doc`)."""
    return Meta(description=text)


class Part(msgspec.Struct, kw_only=True, gc=False):
    """A sub-object of the record. Every field is written (null when unknown); a line that
    lacks one (an older mxbench, a hand-made record) reads it back as its default.

    ``gc=False`` (here and on :class:`Record`): a record is a tree, never a cycle, so the
    garbage collector need not track its structs; a report holding 100,000 of them otherwise
    spends much of its time in collections that find nothing (msgspec's documented option)."""
