"""Records that parse as JSON but hold what no reader can keep as sent, so `parse_records`
fails them (`_lh_error`, then the `parsable` rule: quarantine with the raw text) instead of
storing a guess: a field given two different values, and a lone surrogate escape."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

_HIGH = r"\\u[dD][89abAB][0-9a-fA-F]{2}"
_LOW = r"\\u[dD][c-fC-F][0-9a-fA-F]{2}"
# Every surrogate escape after an even number of backslashes (`\\ud800` is a backslash and
# text), left to right: a pair is one match, so its low half is never taken alone; a high one
# not followed by a low one, or a low one not taken by a pair, is lone (group 1). A look-behind
# for the high half would take `\\ud800\udc00` (a backslash, text, a low half) for a pair.
_SURROGATE = rf"(?<!\\)(?:\\\\)*(?:{_HIGH}{_LOW}|({_HIGH}|{_LOW}))"


def duplicate_keys(raw: Column) -> Column:
    """`duplicate_key: <names>` for an object (`raw`, its map) that gives a field two
    different values, else null. JSON leaves the meaning to the reader (Spark's struct takes
    the last value, the map keeps both and a lookup finds the first), so the record goes to
    quarantine whole instead of keeping either value silently; the same value twice is no
    question. The entries and names (a lambda, interpreted) only for a record that repeats a
    key: the keys alone cost 0.42 s per million 7-field records, the entries on every record
    0.91 s (bench/README)."""
    from pyspark.sql import functions as F

    keys = F.size(F.array_distinct(F.map_keys(raw)))
    pairs = F.array_distinct(F.map_entries(raw))
    twice = F.filter(pairs, lambda p: F.size(F.filter(pairs, lambda o: o["key"] == p["key"])) > 1)
    names = F.array_join(F.array_distinct(F.transform(twice, lambda p: p["key"])), ", ")
    differ = F.size(pairs) > keys
    return F.when(keys < F.size(raw), F.when(differ, F.concat(F.lit("duplicate_key: "), names)))


def lone_surrogate(text: Column) -> Column:
    """`invalid_unicode: lone surrogate <escape>` for a record text holding a surrogate escape
    that is half of no pair, else null: it is no character, and Spark's reader stored `?` in
    its place. The regex runs only on a text with a `\\u` escape in it."""
    from pyspark.sql import functions as F

    # Group 1 is empty for a pair: the lone escapes joined, the first one's six characters.
    lone = F.array_join(F.regexp_extract_all(text, F.lit(_SURROGATE), 1), "")
    found = F.nullif(F.substring(lone, 1, 6), F.lit(""))
    prefix = F.lit("invalid_unicode: lone surrogate ")
    return F.when(text.contains("\\u"), F.concat(prefix, found))
