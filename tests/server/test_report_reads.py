"""GET /v1/report's answer: a user's report holds their own jobs only, and a bad time is
an error naming it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rota.core.report import report_time
from rota.core.tiers import CRUCIBLE
from rota.core.usage import UsageRecord
from rota.errors import InvalidSpec
from rota.server.api.report_reads import report_answer, tiers_answer
from rota.server.api.usage import _TIME_PATTERN

DAY = 86400.0


class Usage:
    def __init__(self, records: list[UsageRecord]) -> None:
        self.records, self.asked = records, None

    def usage(self, since: float, until: float) -> list[UsageRecord]:
        self.asked = (since, until)
        return self.records


RECORDS = [UsageRecord(1, 1, "ann", None, None, "local", 1.0, 10 * DAY, 10 * DAY + 3600,
                       "t", 2.0),
           UsageRecord(2, 1, "bob", None, None, "local", 2.0, 10 * DAY, 10 * DAY + 1800,
                       None, None)]


def test_a_user_sees_their_own_usage_and_an_admin_everyones():
    store = Usage(RECORDS)
    mine = report_answer(store, user="ann", by="user", period="day", since="0",  # type: ignore[arg-type]
                         until=None, now=20 * DAY)
    assert [(t["group"], t["gpu_hours"], t["cost"]) for t in mine["totals"]] == [
        ("ann", 1.0, 2.0)]
    assert mine["user"] == "ann"
    everyone = report_answer(store, user=None, by="user", period="day", since=None,  # type: ignore[arg-type]
                             until=None, now=20 * DAY)
    assert [t["group"] for t in everyone["totals"]] == ["ann", "bob"]
    # no since: 30 days back from now, from that day's midnight
    assert store.asked == (0.0, 20 * DAY)  # never before 1970


def test_times_are_dates_iso_times_or_epoch_seconds():
    assert report_time("1970-01-02", "since") == DAY
    assert report_time("1970-01-01T01:00", "until") == 3600.0
    assert report_time("1970-01-01T02:00+01:00", "until") == 3600.0
    assert report_time("7200", "since") == 7200.0
    for bad in ("yesterday", "nan", "inf", "1e20", "0001-01-01", "9999-12-31"):
        with pytest.raises(InvalidSpec, match="since: ") as e:
            report_time(bad, "since")
        assert e.value.field == "since"
    with pytest.raises(InvalidSpec, match=r"since \(1970-01-03T00:00:00\+00:00\) is after "
                                          r"until"):
        report_answer(Usage([]), user=None, by="user", period="day",  # type: ignore[arg-type]
                      since="1970-01-03", until="1970-01-02", now=DAY)
    # no since, and until at the epoch: an empty window, not an error (since was not given)
    empty = report_answer(Usage(RECORDS), user=None, by="user", period="day",  # type: ignore[arg-type]
                          since=None, until="0", now=DAY)
    assert (empty["since"], empty["until"], empty["rows"], empty["totals"]) == (0.0, 0.0, [], [])
    same = report_answer(Usage(RECORDS), user=None, by="user", period="day",  # type: ignore[arg-type]
                         since="0", until="0", now=DAY)
    assert same["rows"] == []


@settings(max_examples=800, deadline=None)
@given(st.from_regex(_TIME_PATTERN, fullmatch=True))
def test_every_time_the_api_document_admits_is_read(text: str) -> None:
    """The pattern GET /v1/report documents for since/until and the parser agree: what the
    pattern admits is read, but February 29th of a common year (no pattern says that) and
    the first hours of 1970 in a zone east of UTC (before the epoch)."""
    try:
        report_time(text, "since")
    except InvalidSpec:
        assert "-02-29" in text or text.startswith("1970-01-01"), text


def test_tiers_are_listed_cheapest_first():
    names = [t["name"] for t in tiers_answer(CRUCIBLE)["tiers"]]
    assert names == ["cpu-small", "cpu-large", "gpu-small", "gpu-medium", "gpu-large"]
