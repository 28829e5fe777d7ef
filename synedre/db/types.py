"""The connection type the SQL modules take: psycopg with `dict_row`, as `synedre.db` opens them.

A bare `psycopg.Connection` means `Connection[TupleRow]` to a type checker, so every
`row["column"]` would look like indexing a tuple with a string.
"""
from __future__ import annotations

from typing import Any, TypeAlias

import psycopg

Row: TypeAlias = dict[str, Any]
Conn: TypeAlias = psycopg.Connection[Row]


class FencedOut(RuntimeError):
    """A newer claim owns this message (the sweep re-offered it, an operator retried it, a
    second launch claimed it): this execution must not write its result."""
