"""The paid path's records are the standard library's frozen, slotted dataclasses (issue 42:
no home-made record decorator), compared and hashed by their fields."""

from __future__ import annotations

import dataclasses

import pytest

from svc_gateway.selling.flow.calls import PaidCall, SettleOutcome
from svc_gateway.selling.flow.replay import Paid
from svc_gateway.selling.handlers import Answer
from svc_gateway.selling.state.book import Admission, Refusal
from svc_gateway.selling.types import PaidOutcome, PaidRequest

RECORDS = [PaidRequest, PaidOutcome, PaidCall, SettleOutcome, Answer, Admission, Refusal, Paid]


@pytest.mark.parametrize("kind", RECORDS, ids=lambda kind: kind.__name__)
def test_the_paid_paths_records_are_frozen_slotted_dataclasses(kind: type) -> None:
    params = getattr(kind, "__dataclass_params__", None)
    assert params is not None and params.frozen is True
    assert "__slots__" in vars(kind)
    assert kind.__hash__ is not None  # hashable, as a frozen dataclass is


def test_records_compare_and_hash_by_their_fields() -> None:
    one, same, other = Answer(200, b"{}"), Answer(200, b"{}"), Answer(402, b"{}")
    assert one == same and hash(one) == hash(same)
    assert one != other
    assert len({one, same, other}) == 2
    assert dataclasses.replace(one, status=402) == other
