"""The one reader of numbers and page tokens (shared.params) and an instance's
request slots (shared.http.capacity), pure: what each accepts, refuses and decides."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pytest

from shared import params
from shared.errors import InvalidInput
from shared.http import capacity, waiting
from shared.http.capacity import Capacity, Parked


@pytest.mark.parametrize("text", ["0", "7", "200", "0007"])
def test_an_integer_is_ascii_digits_within_bounds(text: str) -> None:
    assert params.integer(text, "n", low=0, high=200) == int(text)


@pytest.mark.parametrize(
    "text",
    ["", "²", "٣", "\uff11", "-1", "+1", " 1", "1 ", "1_0", "1.0", "201", "9" * 400, "\ud800"],
)
def test_anything_else_is_invalid_input_naming_the_parameter(text: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        params.integer(text, "page_size", low=1, high=200)
    assert refused.value.what == "page_size"
    refused.value.reason.encode()  # quotable in a JSON answer, a surrogate too


@pytest.mark.parametrize(("text", "seconds"), [("0", 0.0), ("2.5", 2.5), (".25", 0.25), ("60", 60)])
def test_seconds_take_a_decimal_part(text: str, seconds: float) -> None:
    assert params.seconds(text, "wait", high=60) == seconds


@pytest.mark.parametrize("text", ["٣", "nan", "inf", "1e1", "60.5", "-0", " 2", "2_0", "."])
def test_seconds_refuse_what_float_would_take(text: str) -> None:
    with pytest.raises(InvalidInput):
        params.seconds(text, "wait", high=60)


def test_a_page_token_is_bound_to_its_query() -> None:
    one, two = params.binding(["b1", None]), params.binding(["b2", None])
    token = params.encode_token(["batch", "job-7"], one)
    assert params.decode_token(token, "page_token", bound_to=one, size=2) == ["batch", "job-7"]
    for bad in (token, token[:-2], "²", "x" * 601, token + "="):
        with pytest.raises(InvalidInput, match="not one this query gave"):
            params.decode_token(bad, "page_token", bound_to=two, size=2)


def test_the_waits_get_three_quarters_of_the_slots_at_most() -> None:
    assert [capacity.reserve_for(n) for n in (1, 2, 4, 8, 80)] == [1, 1, 1, 2, 20]
    assert capacity.threads({"THREADS": "8"}) == 8
    assert capacity.threads({"THREADS": "²"}) >= 4  # functions-framework's own default
    slots = Capacity(4)
    assert slots.room == 3
    with contextlib.ExitStack() as held:
        waits = [held.enter_context(park(slots, wait=True)) for _ in range(4)]
        assert None not in waits[:3] and waits[3] is None  # no room left: answer at once
        assert not any(w.cut for w in waits[:3] if w is not None)  # a wait cuts no wait
    assert slots.stats() == {"capacity": 4, "reserve": 1, "in_flight": 0, "parked": 0}


@contextlib.contextmanager
def park(slots: Capacity, *, wait: bool) -> Iterator[Parked | None]:
    """One request in flight that asks to park (what a waiting read does)."""
    with slots.request(wait=wait), slots.parking() as parked:
        yield parked


def test_a_request_taking_the_last_slot_cuts_the_oldest_parked_wait() -> None:
    slots = Capacity(4)
    with (
        park(slots, wait=True) as oldest,
        park(slots, wait=True) as newer,
        slots.request(),
        slots.request(),  # two submits: the second takes the last slot
    ):
        assert oldest is not None and newer is not None
        assert oldest.cut and not newer.cut
        assert oldest.sleep(30) is False  # it answers now
    assert Capacity(1).room == 0  # one slot: waits never park


def test_a_cut_wait_answers_at_once_with_retry_after() -> None:
    from datetime import UTC, datetime

    from shared import records
    from shared.config import Settings
    from shared.queue import Queue
    from shared.stores.memory import MemoryStore
    from tests.unit.unit_support import Bell

    store = MemoryStore()
    queue = Queue(store, Bell(), Settings.from_env({}))
    store.create(records.new_record("w1", "demo", {}, datetime.now(UTC)))
    slots = Capacity(2)  # room for one wait
    parked = threading.Event()
    answers: list[waiting.Answer] = []

    def wait() -> None:
        with slots.request(wait=True):
            answers.append(waiting.answer_after_change(queue, "w1", 60, None, room=slots))

    waiter = threading.Thread(target=wait)
    waiter.start()
    while slots.stats()["parked"] == 0:
        parked.wait(0.01)
    busy = waiting.answer_after_change(queue, "w1", 60, None, room=slots)
    assert busy.retry_after_s == waiting.BUSY_RETRY_AFTER_S  # no room: at once
    with slots.request():  # takes the last slot: the parked wait is cut short
        waiter.join(timeout=30)
    assert answers and answers[0].retry_after_s == waiting.BUSY_RETRY_AFTER_S
    assert answers[0].view.record["status"] == "queued"
