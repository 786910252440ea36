"""The alerts' outbox: a key is stored once; due and pending ones are found."""

from __future__ import annotations

from rota.store.repo import Store


def test_add_alert_is_idempotent_on_key(store: Store) -> None:
    assert store.add_alert("quota:7:2026-W48:80", {"text": "a"}, now=10, user="ann")
    assert not store.add_alert("quota:7:2026-W48:80", {"text": "b"}, now=11, user="ann")
    rows = store.alerts()
    assert len(rows) == 1 and rows[0].payload == {"text": "a"}
    assert (rows[0].state, rows[0].attempts, rows[0].next_try_at) == ("pending", 0, 10)


def test_a_sent_key_is_not_stored_again(store: Store) -> None:
    store.add_alert("k", {"text": "a"}, now=10)
    store.update_alert(store.alerts()[0].id, state="sent", sent_at=11)
    assert not store.add_alert("k", {"text": "a"}, now=12)
    assert store.due_alerts(100) == []


def test_due_alerts_are_pending_and_due(store: Store) -> None:
    store.add_alert("a", {"text": "a"}, now=10)
    store.add_alert("b", {"text": "b"}, now=20)
    store.add_alert("c", {"text": "c"}, now=5)
    store.update_alert(store.alerts()[0].id, state="failed")  # c
    assert [r.key for r in store.due_alerts(15)] == ["a"]
    assert [r.key for r in store.due_alerts(25)] == ["a", "b"]
    assert store.next_alert_at() == 10


def test_alerts_by_user_newest_first(store: Store) -> None:
    store.add_alert("a", {"text": "a"}, now=1, user="ann")
    store.add_alert("b", {"text": "b"}, now=2, user="bob")
    store.add_alert("c", {"text": "c"}, now=3, user="ann")
    assert [r.key for r in store.alerts(user="ann")] == ["c", "a"]
    assert [r.key for r in store.alerts(limit=2)] == ["c", "b"]
