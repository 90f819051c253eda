"""The audit line's parameters (``om.observe.audit.parameters``) are exactly what
protobuf's reflection lists, for every request body, whatever fields are set.

``parameters`` reads each message type's fields from a plan computed once (no
reflection per line); the reference here is the reflective form it replaced."""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from om.executor.registry import KINDS
from om.observe.audit import parameters
from om.protocol import om_pb2

BODY_FIELDS = sorted({kind.body_field for kind in KINDS.values()})


def reflective(message: Message) -> str:
    return "{" + ", ".join(_fields(message)) + "}"


def _fields(message: Message) -> list[str]:
    fields: list[str] = []
    for field, value in message.ListFields():
        if field.is_repeated:
            fields.append(f"{field.name}=[{', '.join(_value(field, v) for v in value)}]")
        elif field.message_type is not None:
            fields.extend(_fields(value))
        elif not isinstance(value, bytes):
            fields.append(f"{field.name}={_value(field, value)}")
    return fields


def _value(field: FieldDescriptor, value: Any) -> str:
    if field.message_type is not None:
        return "{" + ", ".join(_fields(value)) + "}"
    if field.enum_type is not None:
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else str(value)
    return str(value)


def _scalar(draw: st.DrawFn, field: Any) -> Any:
    if field.enum_type is not None:
        return draw(st.sampled_from([v.number for v in field.enum_type.values]))
    kinds: dict[int, st.SearchStrategy[Any]] = {
        FieldDescriptor.TYPE_STRING: st.text(max_size=6),
        FieldDescriptor.TYPE_BYTES: st.binary(max_size=6),
        FieldDescriptor.TYPE_BOOL: st.booleans(),
        FieldDescriptor.TYPE_DOUBLE: st.floats(allow_nan=False, width=32),
        FieldDescriptor.TYPE_FLOAT: st.floats(allow_nan=False, width=32),
    }
    unsigned = field.type in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_UINT64,
                              FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_FIXED64)
    return draw(kinds.get(field.type, st.integers(0 if unsigned else -1000, 1000)))


@st.composite
def filled(draw: st.DrawFn, message: Message, depth: int = 0) -> Message:
    """``message`` with a random subset of its fields set (messages to depth 2)."""
    descriptor = message.DESCRIPTOR
    for field in descriptor.fields:
        if not draw(st.booleans()):
            continue
        if field.message_type is not None:
            if depth >= 2:
                continue
            if field.is_repeated:
                for _ in range(draw(st.integers(0, 2))):
                    draw(filled(getattr(message, field.name).add(), depth + 1))
            else:
                draw(filled(getattr(message, field.name), depth + 1))
                getattr(message, field.name).SetInParent()
        elif field.is_repeated:
            getattr(message, field.name).extend(
                [_scalar(draw, field) for _ in range(draw(st.integers(0, 2)))])
        else:
            setattr(message, field.name, _scalar(draw, field))
    return message


@st.composite
def bodies(draw: st.DrawFn) -> Message:
    request = om_pb2.OMRequest()
    body = getattr(request, draw(st.sampled_from(BODY_FIELDS)))
    return draw(filled(body))


@settings(max_examples=400, deadline=None)
@given(bodies())
def test_parameters_list_what_reflection_lists(body: Message) -> None:
    assert parameters(body) == reflective(body)


def test_an_empty_body_and_no_body() -> None:
    assert parameters(om_pb2.CommitKeyRequest()) == "{}"
    assert parameters(None) == "{}"
