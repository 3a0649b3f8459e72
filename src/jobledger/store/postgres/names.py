"""Names an operator types: the schema name (validated) and the URL (redacted before it is shown).

Kept apart from the pool (``connection.py``), which re-exports both.
"""

from __future__ import annotations

import re
import urllib.parse

from ...errors import InvalidArgument

__all__ = ["redact_url", "validate_schema_name"]

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,47}$")
# PostgreSQL's reserved key words (``pg_get_keywords()`` categories R and T, PostgreSQL 15):
# unquoted, each is a syntax error where a schema name goes. Generated SQL quotes the schema
# anyway, but a reserved name would still trap every operator who types it unquoted.
_RESERVED_WORDS = """
all analyse analyze and any array as asc asymmetric authorization binary both case cast
check collate collation column concurrently constraint create cross current_catalog
current_date current_role current_schema current_time current_timestamp current_user default
deferrable desc distinct do else end except false fetch for foreign freeze from full grant
group having ilike in initially inner intersect into is isnull join lateral leading left like
limit localtime localtimestamp natural not notnull null offset on only or order outer
overlaps placing primary references returning right select session_user similar some
symmetric table tablesample then to trailing true union unique user using variadic verbose
when where window with"""
_RESERVED = frozenset(_RESERVED_WORDS.split()) | {"public", "information_schema", "pg_catalog"}


def validate_schema_name(schema: object) -> str:
    """A plain lower-case identifier (≤48 characters, so the NOTIFY channel name fits in 63).

    ``public`` and the system schemas are refused: jobledger verifies that its schema holds
    nothing but its own tables, which a shared schema never does.
    """
    if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema) or schema in _RESERVED:
        raise InvalidArgument(
            "schema must be a plain lower-case identifier (letters, digits, _; at most 48 "
            "characters; not a reserved word or a system schema)"
        )
    if schema.startswith("pg_"):
        raise InvalidArgument("schema must not start with pg_ (reserved for the system)")
    return schema


def redact_url(url: str) -> str:
    """The URL with any password replaced by ``***`` (user info and ``password=`` parameters).

    Deliberately more eager than libpq's parser: a malformed URL (a ``/`` inside an unencoded
    password, a query string without a path) still must not show its password.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "postgresql://***"
    # libpq takes user info up to an "@" before the first "/"; also treat an "@" later in the
    # path as ending user info, in case the password itself contained an unencoded "/".
    authority = rest.partition("/")[0]
    if "@" not in authority:
        authority = rest.partition("?")[0]
    userinfo, at, _ = authority.rpartition("@")
    if at:
        user, colon, _password = userinfo.partition(":")
        rest = f"{user}:***@" + rest[len(userinfo) + 1 :] if colon else rest
    head, question, query = rest.partition("?")
    if question:
        query = "&".join(_redact_parameter(part) for part in query.split("&"))
    return f"{scheme}://{head}{question}{query}"


def _redact_parameter(part: str) -> str:
    key, equals, _value = part.partition("=")
    # libpq percent-decodes parameter names too: pass%77ord= is a password.
    if equals and urllib.parse.unquote(key).strip().lower() == "password":
        return f"{key}=***"
    return part
