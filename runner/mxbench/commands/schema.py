"""``mxbench schema``: the matrix's JSON Schema, for editors."""

from __future__ import annotations

import json
import warnings
from typing import Any


def matrix_schema() -> dict[str, Any]:
    """The JSON Schema of a matrix file (pydantic's, from the same models that validate it).
    Defaults that are not JSON (the settings structs) are left out of it."""
    from mxbench.matrix.file import Matrix

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "default ... is not JSON serializable; excluding"
        schema = Matrix.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "mxbench matrix (schema v1)",
        **schema,
    }


def schema() -> None:
    """Print the JSON Schema of a matrix file, for an editor's completion and checks.

    With VS Code's YAML extension, for instance: `mxbench schema > matrix.schema.json`, then
    `# yaml-language-server: $schema=matrix.schema.json` as the matrix's first line.
    """
    print(json.dumps(matrix_schema(), indent=2))
