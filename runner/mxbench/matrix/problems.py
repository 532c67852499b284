"""A matrix's validation errors in the user's words: the key path (``hosts[1].gpus``), the
line or the command-line flag it came from (:class:`mxbench.matrix.document.Located`), and
messages that name what is expected instead of pydantic's."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from mxbench.matrix import document, params
from mxbench.matrix.hosts import HOSTS
from mxbench.matrix.schema import PathError, echo, not_a_bool

MAX_PROBLEMS_SHOWN = 20


def explain(exc: ValidationError, at: document.Located) -> str:
    """pydantic's errors of a matrix in the user's words: one line per problem (at most
    :data:`MAX_PROBLEMS_SHOWN`), each naming the key path and, where the YAML gives one, the
    line or the flag it came from."""
    lines = []
    errors = exc.errors(include_url=False)
    for err in errors[:MAX_PROBLEMS_SHOWN]:
        loc = tuple(err["loc"])
        ctx_err = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_err, PathError):
            lines.append(_format_one(ctx_err.loc, ctx_err.msg, at))
            continue
        loc = _strip_union_tags(loc)
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key (not in matrix schema v1; a typo?)"
        elif err["type"] == "union_tag_invalid":
            msg = f"unknown engine: expected one of {', '.join(HOSTS)}"
        elif err["type"] == "union_tag_not_found":
            msg = f"missing 'engine' (one of {', '.join(HOSTS)})"
        elif isinstance(err.get("input"), bool) and err["type"] in _NUMBER_ERRORS:
            msg = not_a_bool(err["input"])
        elif err["type"] == "literal_error" and (named := _param_in(loc)) is not None:
            choices = ", ".join(named.choices or ())
            msg = f"unknown {named.name} {echo(err.get('input'))}: expected one of {choices}"
        msg = msg.removeprefix("Value error, ")
        lines.append(_format_one(loc, msg, at))
    if len(errors) > len(lines):
        lines.append(f"... and {len(errors) - len(lines)} more")
    head = f"{at.source}: invalid matrix ({len(errors)} problem{'s' if len(errors) > 1 else ''})"
    return head + "\n" + "\n".join(f"  {line}" for line in lines)


_NUMBER_ERRORS = frozenset({"int_type", "float_type", "int_parsing", "float_parsing"})


def _param_in(loc: tuple[Any, ...]) -> params.Field | None:
    """The parameter a benchmark / axes error location is about."""
    if len(loc) >= 2 and loc[0] in ("benchmark", "axes", "measure"):
        return next((f for f in params.swept() if f.name == loc[1]), None)
    return None


def _strip_union_tags(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    # pydantic inserts the discriminator value ("docker") after the list index.
    out: list[Any] = []
    for i, part in enumerate(loc):
        if part in HOSTS and i >= 2 and loc[i - 2] == "hosts" and isinstance(loc[i - 1], int):
            continue
        out.append(part)
    return tuple(out)


def format_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _format_one(loc: tuple[Any, ...], msg: str, at: document.Located) -> str:
    return f"{at.where(loc)}: {format_path(loc)}: {msg}"
