"""Sandbox.list with the sync SDK (GET /v2/sandboxes, docs/wire/e2b-api.md §2.4).

Other tests create sandboxes concurrently, so every query filters on a
metadata tag unique to the test.
"""

import datetime

from e2b import Sandbox, SandboxQuery, SandboxState

from helpers import SUITE_KEY, uniq


def list_all(**kwargs):
    paginator = Sandbox.list(**kwargs)
    items = []
    pages = 0
    while paginator.has_next:
        items.extend(paginator.next_items())
        pages += 1
        assert pages < 50, "paginator never ends"
    return items


def ids(items):
    return [s.sandbox_id for s in items]


def test_metadata_filter_with_special_characters(sandbox_factory):
    tag = uniq("tag")
    a = sandbox_factory(metadata={"tag": tag, "which": "a", "k y": "v&1"})
    b = sandbox_factory(metadata={"tag": tag, "which": "b", "k y": "other"})

    both = list_all(query=SandboxQuery(metadata={"tag": tag}))
    assert sorted(ids(both)) == sorted([a.sandbox_id, b.sandbox_id])

    special = list_all(query=SandboxQuery(metadata={"tag": tag, "k y": "v&1"}))
    assert ids(special) == [a.sandbox_id]
    assert special[0].metadata == {SUITE_KEY: "py", "tag": tag, "which": "a", "k y": "v&1"}

    assert list_all(query=SandboxQuery(metadata={"tag": tag, "which": "a", "k y": "other"})) == []
    assert ids(list_all(query=SandboxQuery(metadata={"tag": tag, "which": "b"}))) == [b.sandbox_id]


def test_listed_fields_and_exact_metadata(sandbox_factory):
    tag = uniq("tag")
    metadata = {"tag": tag, "unicode": "héllo wörld", "eq": "a=b&c=d"}
    sbx = sandbox_factory(metadata=metadata, timeout=90)
    [item] = list_all(query=SandboxQuery(metadata={"tag": tag}))
    assert item.sandbox_id == sbx.sandbox_id
    assert item.metadata == {**metadata, SUITE_KEY: "py"}
    assert item.state == SandboxState.RUNNING
    assert item.template_id
    assert item.cpu_count >= 1
    assert item.memory_mb >= 1
    assert item.envd_version
    assert isinstance(item.started_at, datetime.datetime)
    assert isinstance(item.end_at, datetime.datetime)
    ttl = (item.end_at - item.started_at).total_seconds()
    assert abs(ttl - 90) <= 3, f"end_at - started_at = {ttl}s"


def test_state_filter(sandbox_factory):
    tag = uniq("tag")
    sbx = sandbox_factory(metadata={"tag": tag})
    running = list_all(query=SandboxQuery(metadata={"tag": tag}, state=[SandboxState.RUNNING]))
    assert ids(running) == [sbx.sandbox_id]
    paused = list_all(query=SandboxQuery(metadata={"tag": tag}, state=[SandboxState.PAUSED]))
    assert paused == []
    both = list_all(
        query=SandboxQuery(metadata={"tag": tag}, state=[SandboxState.RUNNING, SandboxState.PAUSED])
    )
    assert ids(both) == [sbx.sandbox_id]


def test_pagination_limit_one(sandbox_factory):
    tag = uniq("tag")
    older = sandbox_factory(metadata={"tag": tag, "n": "1"})
    newer = sandbox_factory(metadata={"tag": tag, "n": "2"})

    paginator = Sandbox.list(query=SandboxQuery(metadata={"tag": tag}), limit=1)
    assert paginator.has_next
    page1 = paginator.next_items()
    assert ids(page1) == [newer.sandbox_id], "the first page must hold the newest sandbox"
    assert paginator.has_next, "no X-Next-Token after the first of two pages"
    assert paginator.next_token
    page2 = paginator.next_items()
    assert ids(page2) == [older.sandbox_id]
    assert not paginator.has_next, "X-Next-Token set on the last page"

    first = Sandbox.list(query=SandboxQuery(metadata={"tag": tag}), limit=1)
    first.next_items()
    resumed = Sandbox.list(
        query=SandboxQuery(metadata={"tag": tag}), limit=1, next_token=first.next_token
    )
    assert ids(resumed.next_items()) == [older.sandbox_id]

    asc = list_all(query=SandboxQuery(metadata={"tag": tag}), limit=1, order="asc")
    assert ids(asc) == [older.sandbox_id, newer.sandbox_id]


def test_started_after_and_template_filters(sandbox_factory):
    tag = uniq("tag")
    sbx = sandbox_factory(metadata={"tag": tag})
    info = sbx.get_info()

    # Inclusive at the sandbox's own startedAt; +1 s excludes it.
    incl = list_all(query=SandboxQuery(metadata={"tag": tag}, started_after=info.started_at))
    assert ids(incl) == [sbx.sandbox_id]
    excl = list_all(
        query=SandboxQuery(
            metadata={"tag": tag}, started_after=info.started_at + datetime.timedelta(seconds=1)
        )
    )
    assert excl == []

    assert ids(list_all(query=SandboxQuery(metadata={"tag": tag}, template=info.template_id))) == [
        sbx.sandbox_id
    ]
    assert list_all(query=SandboxQuery(metadata={"tag": tag}, template=uniq("notemplate"))) == []


def test_killed_sandbox_leaves_the_list(sandbox_factory):
    tag = uniq("tag")
    sbx = sandbox_factory(metadata={"tag": tag})
    assert len(list_all(query=SandboxQuery(metadata={"tag": tag}))) == 1
    assert sbx.kill()
    assert list_all(query=SandboxQuery(metadata={"tag": tag})) == []
