"""The views reference is ordered by topic as the guides are: every SQL file of the
library has a topic, and the topics follow the guides' order in mkdocs.yml."""

from __future__ import annotations

import dataclasses
import re

import pytest

from kvtrace.sql.catalog import library
from tests.test_docs import ROOT, _script


def test_every_sql_file_has_one_topic():
    reference = _script("docs_reference")
    grouped = reference.by_topic(library())
    placed = [sql_file.name for _, files in grouped for sql_file in files]
    assert sorted(placed) == sorted(sql_file.name for sql_file in library())
    assert len(placed) == len(set(placed))


def test_a_new_sql_file_without_a_topic_stops_the_page():
    reference = _script("docs_reference")
    new = dataclasses.replace(library()[0], name="kv_newcomer.sql")
    with pytest.raises(SystemExit, match=r"no topic in .*TOPICS for kv_newcomer\.sql"):
        reference.by_topic([*library(), new])
    without = [f for f in library() if f.name != "pool.sql"]
    with pytest.raises(SystemExit, match="files the SQL library lacks: pool"):
        reference.by_topic(without)


def test_the_topics_follow_the_guides_and_the_page_follows_the_topics():
    reference = _script("docs_reference")
    nav = (ROOT / "mkdocs.yml").read_text()
    guides = re.findall(r"^\s+- [^:\n]+: guides/([\w-]+\.md)$", nav, re.MULTILINE)
    places = [guides.index(topic.guide) for topic in reference.TOPICS]
    assert places == sorted(places)
    headings = re.findall(r"^## (.+)$", reference.views_page(), re.MULTILINE)
    assert headings == [topic.title for topic in reference.TOPICS]
    assert headings[:2] == ["DSA traces", "KV tier what-if"]
