"""How to measure: the matrix's ``measure:`` key, a preset or the knobs themselves.

What a cell measures (the model, its input, the policy, the batch size) is ``benchmark:`` and
``axes:``; how precisely and how often it is measured is ``measure:``, one of the presets
(:data:`PRESETS`: ``quick``, ``default``, ``rigorous``) or a mapping of the eight knobs
(:data:`KNOBS`), optionally on top of a preset (``measure: {preset: quick, steps: 40}``).
The presets are defined here and nowhere else; the command line's ``--fast`` and
``--rigorous`` are ``measure: quick`` and ``measure: rigorous``.

A matrix written before ``measure:`` existed has the knobs at the top level of
``benchmark:``; :func:`mxbench.matrix.document.upgrade` moves them here before validation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, PlainValidator, create_model, model_validator

from mxbench.cells.repeats import AUTO, AutoRepeats, check_auto
from mxbench.matrix import params
from mxbench.matrix.schema import PathError, Strict, echo, not_a_bool, param_type, settings_struct

MAX_REPEATS = 100
Preset = Literal["quick", "default", "rigorous"]
DEFAULT_PRESET: Preset = "default"
# The measuring knobs: the parameters of role "precision" a matrix gives one value for, and
# the number of processes per cell with its settings.
PARAM_KNOBS = ("warmup_steps", "steps", "timed_s", "pairing", "check", "profile")
KNOBS = (*PARAM_KNOBS, "repeats", "auto_repeats")

# Each preset as the knobs it changes from the defaults (the defaults are Params' and
# AutoRepeats', the published experiment's: default changes nothing, so a matrix that names
# no preset keeps its cells' keys).
PRESETS: dict[str, dict[str, Any]] = {
    # An answer in about a minute on a laptop's CPU: short windows, no profile and no
    # one-step check, at most 3 processes per comparison (a verdict only where it is clear).
    "quick": {
        "warmup_steps": 2,
        "steps": 20,
        "timed_s": 2.0,
        "check": "off",
        "profile": "off",
        "auto_repeats": AutoRepeats(start=2, target=0.05, max=3, budget_s=120.0),
    },
    "default": {},
    # For a result to publish: longer windows, 3 processes to start and up to 10 per policy,
    # until the speedup is known within ±2%.
    "rigorous": {
        "warmup_steps": 10,
        "steps": 200,
        "timed_s": 20.0,
        "auto_repeats": AutoRepeats(start=3, target=0.02, max=10, budget_s=3600.0),
    },
}


def repeats_value(value: Any) -> int | str:
    """``repeats``: a number of processes per cell, or ``auto``."""
    if value == AUTO:
        return AUTO
    if isinstance(value, bool):
        raise ValueError(not_a_bool(value) + f" (1 to {MAX_REPEATS} processes per cell, or auto)")
    if not isinstance(value, int) or not 1 <= value <= MAX_REPEATS:
        raise ValueError(
            f"expected a number of processes per cell from 1 to {MAX_REPEATS}, or {AUTO}; "
            f"got {echo(value)}"
        )
    return value


def auto_repeats_value(value: Any) -> AutoRepeats:
    if isinstance(value, AutoRepeats):
        return value
    return check_auto(settings_struct(value, AutoRepeats))


Repeats = Annotated[
    int | str,
    PlainValidator(repeats_value, json_schema_input_type=int | Literal["auto"]),
]
AutoRepeatsSettings = Annotated[
    AutoRepeats, PlainValidator(auto_repeats_value, json_schema_input_type=dict[str, float])
]


class _MeasureBase(Strict):
    """``measure:``: a preset, and knobs that differ from it (only those given count)."""

    preset: Preset = Field(
        default=DEFAULT_PRESET,
        description="quick (a first answer in a minute), default, or rigorous (to publish); "
        "the knobs given beside it change it",
    )
    repeats: Repeats = Field(
        default=AUTO,
        description="Fresh processes per cell, or auto: as many as the verdict needs "
        "(settings: auto_repeats; docs/measuring.md)",
    )
    auto_repeats: AutoRepeatsSettings = Field(
        default=AutoRepeats(), description="repeats: auto's start, target, max and budget_s"
    )

    @model_validator(mode="before")
    @classmethod
    def _named(cls, value: Any) -> Any:
        """``measure: quick`` is ``measure: {preset: quick}``."""
        if isinstance(value, str):
            if value not in PRESETS:
                raise ValueError(
                    f"unknown preset {echo(value)}: expected one of {', '.join(PRESETS)} "
                    "(or a mapping of the knobs)"
                )
            return {"preset": value}
        return value

    @model_validator(mode="after")
    def _auto_only(self) -> Any:
        if "auto_repeats" in self.model_fields_set and self.knobs().get("repeats", AUTO) != AUTO:
            raise PathError(("measure", "auto_repeats"), "applies to `repeats: auto` only")
        return self

    def knobs(self) -> dict[str, Any]:
        """The knobs this measure sets, as far as they differ from the defaults: its preset's,
        then those given beside it."""
        given = {k: getattr(self, k) for k in KNOBS if k in self.model_fields_set}
        out = {**PRESETS[self.preset], **given}
        if out.get("repeats", AUTO) != AUTO and "auto_repeats" not in given:
            out.pop("auto_repeats", None)  # a preset's auto settings, under a fixed count
        return out


if TYPE_CHECKING:
    Measure = _MeasureBase
else:  # the parameter knobs with the bounds and help Params declares
    Measure = create_model(
        "Measure",
        __base__=_MeasureBase,
        **{
            n: (param_type(f), Field(default=f.default, description=f.spec.help))
            for n in PARAM_KNOBS
            if (f := params.field(n))
        },
    )
