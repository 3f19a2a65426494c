"""The paid path's records (``svc_gateway.records.record``): frozen to the type checker, plain
dataclasses at run time (a frozen dataclass's ``__init__`` costs several hundred instructions a
field), compared and hashed by their fields as frozen dataclasses are."""

from __future__ import annotations

import dataclasses

import pytest

from svc_gateway.records import record
from svc_gateway.selling.flow.calls import PaidCall, SettleOutcome
from svc_gateway.selling.flow.replay import Paid
from svc_gateway.selling.handlers import Answer
from svc_gateway.selling.state.book import Admission, Refusal
from svc_gateway.selling.types import PaidOutcome, PaidRequest

RECORDS = [PaidRequest, PaidOutcome, PaidCall, SettleOutcome, Answer, Admission, Refusal, Paid]


def test_a_record_is_frozen_to_the_type_checker() -> None:
    """``mypy --strict`` (CI) refuses an assignment to a record's field: the decorator tells it
    so through ``dataclass_transform``'s ``frozen_default``."""
    transform = getattr(record, "__dataclass_transform__", None)
    assert transform is not None
    assert transform["kwargs"].get("frozen_default") is True
    assert dataclasses.field in transform["field_specifiers"]


@pytest.mark.parametrize("kind", RECORDS, ids=lambda kind: kind.__name__)
def test_the_paid_paths_records_are_plain_dataclasses_at_run_time(kind: type) -> None:
    params = getattr(kind, "__dataclass_params__", None)
    assert params is not None and params.frozen is False  # no object.__setattr__ per field
    assert kind.__hash__ is not None  # hashable, as a frozen dataclass is


def test_records_compare_and_hash_by_their_fields() -> None:
    one, same, other = Answer(200, b"{}"), Answer(200, b"{}"), Answer(402, b"{}")
    assert one == same and hash(one) == hash(same)
    assert one != other
    assert len({one, same, other}) == 2
    assert dataclasses.replace(one, status=402) == other
