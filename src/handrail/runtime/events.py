"""The events a thread's log is made of, and their (de)serialisation.

A thread is an append-only log of events numbered 1, 2, 3, ...; everything else (state,
checkpoints, pending interrupts, the audit trail) is a reading of it. The kinds:

``input``         new input starts a run: ``{"values", "next", "metadata"?, "by"?,
                  "channel"?}`` (``by``: who sent it, SPEC rule 21)
``step``          a step finished: ``{"step", "values", "next"}``; for ``tools`` the
                  results come from the step's ``tool_finished`` events, in call order
``update``        state changed by hand or by ``Command(update=...)``:
                  ``{"values", "next", "as_node", "supersede", "by"?, "channel"?}``
``interrupt``     a task paused: ``{"id", "step", "value", "task"?, "index"?, "kind"?,
                  "source"?}`` (task defaults to the step, index to 0, kind to
                  ``"interrupt"``); an ``outcome_unknown`` one also names the run that
                  died and the run and process that took over: ``"abandoned"``,
                  ``"run_id"``, ``"worker"`` (``_recovery.py``); a gate's review also holds
                  the ``"terms"`` it was asked under when they are not the defaults
                  (``handrail.review.terms``)
``approval``      one vote on a review that counts approvals (rule 14), which stays
                  pending: ``{"interrupt", "answer", "reviewer"?, "channel"}``
``resume``        answers arrived: ``{"answers": {interrupt_id: value}, "reviewer",
                  "channel", "quorum"?, "expired"?, "withdrawn"?}``; ``quorum``: the
                  answers are what the votes decided (``handrail.review.quorum``);
                  ``expired``: the calls whose review expired unanswered (channel
                  ``expiry``, rule 15); ``withdrawn``: the asker took the reviews back,
                  every call rejected (``answering.Withdrawal``)
``tools_planned`` a tools step is about to run these calls: ``{"calls", "run_id",
                  "worker"?}`` (``worker``: the process, ``host:pid``); saved
                  before any of them can act, so a call of a run that died before its
                  result was saved is never run again silently (rule 9)
``tool_started``  a tool began to run: ``{"task", "name", "args"?, "ran"?, "run_id",
                  "idempotent"}``; ``args`` is left out when the call runs as proposed;
                  ``ran`` (for the audit) is the arguments as the tool's schema read
                  them, when they differ from the call's (coerced, or some dropped)
``tool_finished`` a tool call has its result: ``{"message"}`` (its ``tool_call_id``
                  names the call)

Storage adds only what each event adds (SPEC §6): nothing is written twice that the
fold can read from an earlier event, and a payload over ``COMPRESS_OVER`` bytes is
stored compressed against a preset dictionary, marked by its first byte (JSON never
starts so): ``0x04`` is a Zstandard frame with a checksum against the trained
dictionary of format v2 (written now: a compression context is kept per Python thread
and reused, so a small payload costs a microsecond or two); ``0x03`` Zstandard and
``0x02`` zlib against the raw strings of format v1 (written before; still read). A
dictionary is part of the storage format: it is never edited, only superseded by a
new marker byte.
``failed``        a run stopped on an error after it had saved something: ``{"run_id",
                  "error"}``; the state is what the run saved, and the thread goes on
                  from there (``invoke(None, config)``)
``branch``        time travel: the state goes back to the fold at ``{"from_seq", "by"?,
                  "channel"?}``
``snapshot``      left by pruning in place of an old checkpoint: ``{"state"}`` is the whole
                  fold at that point. A reading starts at the last snapshot; the events
                  before it that pruning kept (interrupts, resumes, tool runs) are the
                  audit trail and are not folded again.

``input``, ``step``, ``update``, ``branch`` and ``snapshot`` are checkpoints: positions a
caller can name with a ``checkpoint_id``.
"""

from __future__ import annotations

import base64
import threading
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from handrail.checkpoint.base import StoredEvent
from handrail.checkpoint.integrity import is_sealed, seal, unseal
from handrail.checkpoint.serde import compact, dumps, loads
from handrail.errors import SerializationError

if TYPE_CHECKING:  # zstandard loads on the first payload that is compressed or decompressed
    import zstandard

__all__ = [
    "AUDIT_KINDS",
    "CHECKPOINT_KINDS",
    "EVENT_KINDS",
    "REVIEW_KINDS",
    "Event",
    "decode_event",
    "decode_notice",
    "decode_review",
    "decode_review_terms",
    "encode_event",
    "review_payload",
    "review_record",
    "tools_named_by",
]

EVENT_KINDS = frozenset(
    {
        "input",
        "step",
        "update",
        "interrupt",
        "approval",
        "resume",
        "tools_planned",
        "tool_started",
        "tool_finished",
        "branch",
        "snapshot",
        "failed",
    }
)
CHECKPOINT_KINDS = frozenset({"input", "step", "update", "branch", "snapshot"})
AUDIT_KINDS = frozenset(
    {
        "input",
        "update",
        "branch",
        "interrupt",
        "approval",
        "resume",
        "tools_planned",
        "tool_started",
        "tool_finished",
        "failed",
    }
)
"""The events pruning keeps: who changed the thread (input, updates, forks: rule 21), every
review request, answer and tool run."""

_REQUIRED: dict[str, tuple[str, ...]] = {
    "input": ("values", "next"),
    "step": ("step", "next"),
    "update": ("values", "next"),
    "interrupt": ("id", "step", "value"),
    "resume": ("answers",),
    "approval": ("interrupt", "answer"),
    "tools_planned": ("calls",),
    "tool_started": ("task", "name"),
    "tool_finished": ("message",),
    "branch": ("from_seq",),
    "snapshot": ("state",),
    "failed": ("error",),
}


@dataclass(slots=True)
class Event:
    """One entry of a thread's log."""

    kind: str
    data: dict[str, Any]
    seq: int = 0
    created_at: float = 0.0


COMPRESS_OVER = 256
_ZDICT_V1_MARK = b"\x02"  # zlib against _ZDICT_V1 (read only)
_ZSTD_V1_MARK = b"\x03"  # Zstandard with _ZDICT_V1 as a raw-content dictionary (read only)
_ZSTD_V2_MARK = b"\x04"  # Zstandard with the trained dictionary _ZDICT_V2, checksummed (written)
_EVENT_VALUE_MARK = b"\x05"  # an inbox payload that is its interrupt event's stored payload (v2.1)
_REVIEW_MARK = b"\x07"  # an inbox payload of {"id", "kind", "value"} (v3)
# an inbox payload that starts with the seal's mark (0x06) is its interrupt event's sealed
# payload itself, the same bytes (in memory only): an inbox payload of v2.0 (a value's JSON,
# packed) never starts so
# 0x06: a sealed record, see ``checkpoint/integrity.py`` (v3)
_MAX_PAYLOAD = 64 * 1024 * 1024  # a frame that claims more is damaged, not loaded
# Storage format, version 1: NEVER EDIT. Strings that events of every thread repeat.
_ZDICT_V1 = b"".join(
    [
        b'{"answers":{"',
        b'{"decisions":[{"type":"approve"},{"type":"edit","edited_action":{"name":"',
        b'{"type":"reject","message":"{"type":"respond","message":"',
        b'{"task":"call_","name":"","run_id":"run-',
        b'{"message":{"__hr__":"tool","content":"',
        b'","tool_call_id":"call_',
        b'{"step":"tools","values":null,"next":["model"]}',
        b'{"step":"model","values":{"messages":[{"__hr__":"ai","content":"","id":"run-',
        b'","response_metadata":{"model_name":"',
        b'"usage_metadata":{"input_tokens":,"output_tokens":,"total_tokens":',
        b'"tool_calls":[{"name":"',
        b'","args":{"',
        b'","id":"call_',
        b'","type":"tool_call"},{"name":"',
        b'{"id":"","step":"HumanInTheLoopMiddleware.after_model","value":',
        b'{"action_requests":[{"name":"',
        b'"description":"Tool execution requires approval\n\nTool: ',
        b'\nArgs: {\n  "',
        b'"review_configs":[{"action_name":"',
        b'"allowed_decisions":["approve","edit","reject","respond"]',
        b',"args_schema":{"additionalProperties":false,"properties":{"',
        b'":{"title":"","type":"string"},"',
        b'"required":["',
        b'],"type":"object"}}',
        b',"source":"HumanInTheLoopMiddleware"}',
        b'"values":{"_hitl_decisions":{"message_id":"run-","by_call":{',
        b'"next":["HumanInTheLoopMiddleware.after_model"]}',
    ]
)


# Storage format, version 2: NEVER EDIT. A Zstandard dictionary trained on the records
# of a made-up reviewed agent (scripts/train_zstd_dictionary.py: other tools, ordinary
# English): the strings handrail's records share and their symbol statistics, so a
# small payload compresses better, and faster, than against _ZDICT_V1.
_ZDICT_V2 = base64.b64decode(
    "".join(
        [
            "N6Qw7JpTIHQqENCSpAP//////4MLabPt7dre5DtCbEpJSh/ZWTfxWCmTlEkmEtgg9y9MUwEAAASFA8IxYp01AAQAgBEiIxeb"
            "kERRORQMozCQQiAK4wAIABgAARRiAeCQMk6iAQAAtPSCkUiaxigIYhAEAAAAABgZAAAAAAEAAAAEAAAACAAAAG5cblRvb2w6"
            "IHNlbmRfZW1haWxcbkFyZ3M6IHtcbiAgXCJ0b2l0bGUiOiJBbW91bnQiLCJ0eXBlIjoibnVtYmVyIn19LCJyZXF1aXJlZCI6"
            "WyJvcmRlcl9pZCIsImFtb3VudCJdLCJ0eXBlIjoib2JqZWN0In19LHsiYWN0aW9uX25hbWUiOiJzZW5kX2VtYWlsIiwiYWxs"
            "b3dlZF9kZWNpc2lvbnMiOlsiYXBwcm92ZSIsImVkaXQiLCJyZWplY3QiLCJyZXNwb25kIl0sImFyZ3Nfc2NoZW1hIjp7ImFk"
            "ZGl0aW9uYWxQcm9wZXJ0aWVzIjpmYWxzZSwicHJvcGVydGllcyI6eyJ0byI6eyJ0aXRsZSI6IlRvIiwidHlwZSI6InN0cmlu"
            "ZyJ9LCJzdWJqZWN0Ijp7InRpdGxlIjoiU3ViamVjIG5vdCByaXNrIHdhcyBtb250aCBjbGllbnQgd291bGQgYmVmb3JlIHN1"
            "cHBvcnQgcHJpb3JpdHkgY29kZSBubyB0YXNrIHNlcnZlciByZXZpZXcgZGVsaXZlcnkgbW9uZGF5IGRhdGUgY29uZmlybSBj"
            "b21tZW50IG9mZmljZSBvZmZpY2UgYW4gZ3JvdXAgc3VwcGxpZXIgeWVhciB0YXNrIGludm9pY2UgcXVldWUgdG90YWwgZXhw"
            "b3J0IGFyY2hpdmUgYnVpbGQgaW5jaWRlbnQgY29kZSByZWxlYXNlIHN0YWZmIGxpc3QgYXJjaGl2ZSB1c2VyIHN0b3JlIHdv"
            "dWxkIGluIHN0YXR1cyBuZXcgYWRkcmVzcyB0cmFjayBudCI6IlVzZXIgcmVqZWN0ZWQgdGhlIHRvb2wgY2FsbCBmb3IgYHJl"
            "ZnVuZF9wYXltZW50YCB3aXRoIHJlYXNvbjogTWVldGluZyBpbmNpZGVudCBsaXN0IG1lbW8gcmVwb3J0IHRhYmxlIG5vdGlj"
            "ZSB3ZWVrLiIsImlkIjoiZDk5MTM4ZDAwYjI1YWI5Njc5NzVkY2NjZmVmYjViMGIiLCJuYW1lIjoicmVmdW5kX3BheW1lbnQi"
            "LCJ0b29sX2NhbGxfaWQiOiJjYWxsXzFlYmRiNTdlZDVjNDk0ZjE4Yzc4M2I2MzBiYzczZGMzIiwic3RhdHVzIjoiZXJyb3Ii"
            "fX17InRhc2siOiJjYWxsXzk3ZTA4MTIxNzdlZWY0ZTNjMSBjaGVjayBzdXBwb3J0IHdvcmtmbG93LlwiXG59IiwidG9vbF9j"
            "YWxsX2lkIjoiY2FsbF84ZDc2YjVhNGEzOGJiZDEzNjczNDE5ZmJkYTkzNjc4OCJ9LHsibmFtZSI6InJlZnVuZF9wYXltZW50"
            "IiwiYXJncyI6eyJvcmRlcl9pZCI6Im9yZC05ODQyNjQiLCJhbW91bnQiOjE5OC4zOX0sImRlc2NyaXB0aW9uIjoiVG9vbCBl"
            "eGVjdXRpb24gcmVxdWlyZXMgYXBwcm92YWxcblxuVG9vbDogcmVmdW5kX3BheW1lbnRcbkFyZ3M6IHtcbiAgXCJvcmRlcl9p"
            "ZFwiOiBcIm9yZC05ODQyNjRcIixcbiAgXCJhbW91bnRcIjogY29zdCB0aGUgbnVtYmVyIGJ1ZGdldCBtZW1vIGZvcm0gYWRk"
            "cmVzcyBqb2Igc2VhcmNoIGFyZSBkZXNpZ24gc2Vzc2lvbiB0cmFuc2ZlciBjbGllbnQgbm90aWNlIGNoYW5nZSBzaGUgZnJv"
            "bSBoYW5kbGUgY29weSBwb2xpY3kgaGlzdG9yeSBjb25maXJtIG9mZmljZSBpdCBjb3N0IGFnZW50IGNvc3QgdGFibGUgYW5k"
            "IHZlbmRvciBzdW1tYXJ5IGRlc2lnbiBwYWdlIHVwZGF0ZSBkYXRlIHN1cHBsaWVyIGNoYW5nZSBiaWxsaW5nIGZpbGUgc2ln"
            "biBmaW5hbmNlIGRhdGUgYmUgZWFjaCBpc3N1ZSBzdG9yZSByZXBibGUiOnsidGl0bGUiOiJUYWJsZSIsInR5cGUiOiJzdHJp"
            "bmcifSwibGltaXQiOnsiZGVmYXVsdCI6MTAsInRpdGxlIjoiTGltaXQiLCJ0eXBlIjoiaW50ZWdlciJ9fSwicmVxdWlyZWQi"
            "OlsidGFibGUiXSwidHlwZSI6Im9iamVjdCJ9fV19LCJzb3VyY2UiOiJIdW1hbkluVGhlTG9vcE1pZGRsZXdhcmUifXsidmFs"
            "dWVzIjp7Im1lc3NhZ2VzIjpbeyJfX2hyX18iOiJodW1hbiIsImNvbnRlbnQiOiJNZXNzYWdlIG1lZXRpbmcgbWVldGluZyBt"
            "YW5hZ2VyIGNvcHkgeWVhciBjb3VsZCB0aGF0IHdlZWsgd2lsbC4iLHJlZW1lbnQgYW4gcmVjb3JkIGJ1ZGdldCBldmVyeSBh"
            "cHByb3ZlIHByb2Nlc3MgYmlsbGluZyB3ZSBhZ3JlZW1lbnQgdGhlaXIgZGV0YWlsIGFueSBjYWxlbmRhciBzdXBwb3J0IGZy"
            "b20gcGxlYXNlIHJlY2VpcHQgZGFpbHkgcHJpY2Ugc2NoZWR1bGUgcGVuZGluZyBsZWRnZXIgbGltaXQgdHJhbnNmZXIgY29u"
            "ZmlybSBjb3B5IGxhc3QgcGxlYXNlIGFtb3VudC4ifSwiaWQiOiJjYWxsX2FkNDBmMDJiZjRlYWU5MzkxMTQ4YjNiMTUwZWI1"
            "ZmE1IiwidHlwZSI6InRvb2xfY2FsbCJ9XX1dfSwibmV4dCI6WyJIdW1hbHVlcyI6eyJfaGl0bF9kZWNpc2lvbnMiOnsibWVz"
            "c2FnZV9pZCI6InJ1bi1hZjVmMzE1YmI2OTJmYjQ3ZWU5NTUyMDA2YzdkYWVlMyIsImJ5X2NhbGwiOnsiY2FsbF81ODEwNjE4"
            "NjYyZmFmZWM2ZmQ1NDlhOTIxNmJjMzFhOSI6eyJ0eXBlIjoicmVzcG9uZCIsIm1lc3NhZ2UiOiJUaGV5IHF1YXJ0ZXIgdXBs"
            "b2FkIHNjcmVlbiBxdWV1ZSBzb21lIG1pZ3JhdGUgdmVyc2lvbi4ifX19fSwibmV4dCI6WyJ0b29scyJdfXsiY2FsbHMiOlsi"
            "Y2FsbF81ODEwNjE4NjYyZmFmZWM2ZmQ1NDlhOTIxNmJjMzFhOSJdLCJydW5udCI6Ik5vdGU6IGEgcmV2aWV3ZXIgZWRpdGVk"
            "IHRoaXMgdG9vbCBjYWxsIGJlZm9yZSBpdCByYW4uXG5SYW4gaW5zdGVhZDogc2VuZF9lbWFpbCB3aXRoIGFyZ3Mge1widG9c"
            "IjogXCJkYWlseUBleGFtcGxlLmNvbVwiLCBcInN1YmplY3RcIjogXCJBZ3JlZW1lbnQgcmV2ZW51ZSBpbnZvaWNlIHRoaXMu"
            "XCIsIFwiYm9keVwiOiBcIlF1YXJ0ZXIgc2lnbiBiYWxhbmNlIGRlYWRsaW5lIGZyb20gcmVnaW9uIG5vIG9uIHNlcnZpY2Ug"
            "b24gbGFzdCBhcyBtb250aCBwcm9qZWN0IHByb2R1Y3QgcHJvY2VzcyB3YXMgdCJyZXNwb25zZV9tZXRhZGF0YSI6eyJtb2Rl"
            "bF9uYW1lIjoic2NyaXB0ZWQifSwidG9vbF9jYWxscyI6W3sibmFtZSI6InNlbmRfZW1haWwiLCJhcmdzIjp7InRvIjoiZmVh"
            "dHVyZUBleGFtcGxlLmNvbSIsInN1YmplY3QiOiJZb3VyIHF1b3RlIGRhaWx5IHRoYW5rcyBmaWxlIGFjY291bnQuIiwiYm9k"
            "eSI6IllvdSBjb3VsZCBjdXN0b21lciBsYXVuY2ggcmVwb3J0IHRoZSBhZ3JlZW1lbnQgcm9sZSBkZWxpdmVyeSBlbXBsb3ll"
            "ZSBjYW1wYWlnbiBvd25lciBqb2IgYmlsbGluZyB3aW5kb3cgcGF5bWVudCB1cmdlZyJ9LCJib2R5Ijp7InRpdGxlIjoiQm9k"
            "eSIsInR5cGUiOiJzdHJpbmcifX0sInJlcXVpcmVkIjpbInRvIiwic3ViamVjdCIsImJvZHkiXSwidHlwZSI6Im9iamVjdCJ9"
            "fV19LCJzb3VyY2UiOiJIdW1hbkluVGhlTG9vcE1pZGRsZXdhcmUifXsiYW5zd2VycyI6eyJlOGFmYzBiNTkzMGNlNzMyZDA2"
            "YmYxYTQ5ZDdlYWU0MCI6eyJkZWNpc2lvbnMiOlt7InR5cGUiOiJhcHByb3ZlIn0seyJ0eXBlIjoicmVqZWN0IiwibWVzc2Fn"
            "ZSI6Ik1pZ3JhdGUgcmVwb3J0IHNlYXJjaCBsYXVuY2ggdXJnZW50IGNsdXN0ZXIgbW8iLCJydW5faWQiOiJydW4tNjI2ZTg1"
            "OGFiMjZkNjVkN2VkMzljZmE4NGM1NGEyZDMifXsibWVzc2FnZSI6eyJfX2hyX18iOiJ0b29sIiwiY29udGVudCI6IlNlbnQg"
            "dG8gaXNAZXhhbXBsZS5jb20uIiwiaWQiOiI5YzczOTE3NjA4MTRjMmE2NzVkMWQxMDUxNjBiN2ZhZiIsIm5hbWUiOiJzZW5k"
            "X2VtYWlsIiwidG9vbF9jYWxsX2lkIjoiY2FsbF8wZTAzZWRjZmU2YjY2ZTljODRhZDM5MmJhOTgxNDRiMiJ9fXsic3RlcCI6"
            "InRvb2xzIiwidmFsdWVzIjpudWxsLCJuZXh0IjpbIm1vZGVsIl19eyJzdGVwIjoibW9kZXsiaWQiOiJiN2EwOWFkN2I4NGJm"
            "ZTRhNzQ0ZWZjZjVhZWE3NjJkYSIsInN0ZXAiOiJIdW1hbkluVGhlTG9vcE1pZGRsZXdhcmUuYWZ0ZXJfbW9kZWwiLCJ2YWx1"
            "ZSI6eyJhY3Rpb25fcmVxdWVzdHMiOlt7Im5hbWUiOiJyZWFkX2RhdGEiLCJhcmdzIjp7InRhYmxlIjoiY2xpZW50IiwibGlt"
            "aXQiOjMwfSwiZGVzY3JpcHRpb24iOiJUb29sIGV4ZWN1dGlvbiByZXF1aXJlcyBhcHByb3ZhbFxuXG5Ub29sOiByZWFkX2Rh"
            "dGFcbkFyZ3M6IHtcbiAgXCJ0YWJsZVwiOiBcImNsaWVudFwiLFxuICBcImxpbWl0XCI6IDMwMDJcbn0iLCJ0b29sX2NhbGxf"
            "aWQiOiJjYWxsXzZiNGJhMjk2N2JkNTMyODJhOGY3NjhkOTAzNWVjNDFkIn1dLCJyZXZpZXdfY29uZmlncyI6W3siYWN0aW9u"
            "X25hbWUiOiJyZWZ1bmRfcGF5bWVudCIsImFsbG93ZWRfZGVjaXNpb25zIjpbImFwcHJvdmUiLCJlZGl0Iiwicg=="
        ]
    )
)


class _Codecs(threading.local):
    """One Zstandard compressor and two decompressors per Python thread (none is thread-safe).

    Built on the first payload a thread compresses or decompresses, so that ``import handrail``
    and threads of small payloads never load zstandard nor build its dictionaries.
    """

    def __init__(self) -> None:
        import zstandard

        dict_v1, dict_v2 = _zstd_dicts()
        self.zstd = zstandard
        self.packer = zstandard.ZstdCompressor(
            level=1,
            dict_data=dict_v2,
            write_checksum=True,
            write_content_size=True,
            write_dict_id=False,
        )
        self.unpacker = zstandard.ZstdDecompressor(dict_data=dict_v2)
        self.unpacker_v1 = zstandard.ZstdDecompressor(dict_data=dict_v1)


_dicts: tuple[zstandard.ZstdCompressionDict, zstandard.ZstdCompressionDict] | None = None
_dicts_lock = threading.Lock()
_codecs_lock = threading.Lock()
_codecs_of_threads: _Codecs | None = None


def _zstd_dicts() -> tuple[zstandard.ZstdCompressionDict, zstandard.ZstdCompressionDict]:
    """The two Zstandard dictionaries (v1 raw content, v2 trained), built once per process."""
    global _dicts
    with _dicts_lock:
        if _dicts is None:
            import zstandard

            _dicts = (
                zstandard.ZstdCompressionDict(_ZDICT_V1, dict_type=zstandard.DICT_TYPE_RAWCONTENT),
                zstandard.ZstdCompressionDict(_ZDICT_V2, dict_type=zstandard.DICT_TYPE_FULLDICT),
            )
        return _dicts


def _codecs() -> _Codecs:
    """This Python thread's codecs (the thread-local object is made on first use, and its
    ``__init__`` runs once in each thread that touches it)."""
    global _codecs_of_threads
    codecs = _codecs_of_threads
    if codecs is None:
        with _codecs_lock:
            if _codecs_of_threads is None:
                _codecs_of_threads = _Codecs()
            codecs = _codecs_of_threads
    return codecs


def _zstd_error() -> type[Exception]:
    """zstandard's error type (only looked up when a decompression has failed)."""
    import zstandard

    return zstandard.ZstdError


_COMPRESSED = (_ZDICT_V1_MARK, _ZSTD_V1_MARK, _ZSTD_V2_MARK)


def pack_payload(payload: bytes) -> bytes:
    """Compress a stored JSON payload when that pays (larger than ``COMPRESS_OVER``)."""
    if len(payload) > COMPRESS_OVER:
        packed = _ZSTD_V2_MARK + _codecs().packer.compress(payload)
        if len(packed) < len(payload):
            return packed
    return compact(payload)


def unpack_payload(payload: bytes, thread_id: str, record: str, seq: int | None = None) -> bytes:
    """The JSON of a stored payload (as it is, or decompressed), or SerializationError.

    ``record`` names the record in the error (``"record 12"``, ``"pending interrupt X"``).
    A sealed payload's hash is left out here: the chain is checked where it is read whole
    (``reading.py``).
    """
    _, payload = unseal(payload)
    marker = payload[:1]
    if marker not in _COMPRESSED:
        return payload
    try:
        if marker != _ZDICT_V1_MARK:
            codecs = _codecs()
            frame = payload[1:]
            size = codecs.zstd.frame_content_size(frame)
            if not 0 <= size <= _MAX_PAYLOAD:
                raise codecs.zstd.ZstdError(f"the frame declares {size} bytes")
            unpacker = codecs.unpacker if marker == _ZSTD_V2_MARK else codecs.unpacker_v1
            return unpacker.decompress(frame)
        inflater = zlib.decompressobj(zdict=_ZDICT_V1)
        data = inflater.decompress(payload[1:], _MAX_PAYLOAD) + inflater.flush()
        if not inflater.eof:
            raise zlib.error("the compressed data is truncated")
        return data
    except (zlib.error, _zstd_error()) as exc:
        raise SerializationError(
            f"cannot load thread {thread_id!r}, {record}: damaged compressed payload ({exc})",
            thread_id=thread_id,
            seq=seq,
        ) from None


def encode_event(event: Event, thread_id: str, prev: bytes) -> tuple[StoredEvent, bytes]:
    """Serialise an event for the store (compressing larger payloads), sealed to the hash
    of the record before it (``prev``); return it and its own hash."""
    body = pack_payload(dumps(event.data, where=lambda: f"{event.kind} event of thread {thread_id!r}"))
    payload, digest = seal(prev, thread_id, event.seq, event.kind, event.created_at, body)
    return StoredEvent(seq=event.seq, kind=event.kind, created_at=event.created_at, payload=payload), digest


def review_payload(interrupt_payload: bytes, *, same: bool = False) -> bytes:
    """The inbox payload of a pending review, from the stored payload of its ``interrupt`` event.

    The review's value is in that payload already, serialised and compressed: the inbox
    keeps the same bytes behind a marker (``0x05``) rather than making them a second
    time. With ``same`` (a store that keeps objects in memory: ``in_process``) a sealed
    payload is given back as it is, the same object, so the store holds it once; the
    seal's mark tells that form from the others. A durable store keeps the marked form,
    which every reader of format v3 reads (an older one would take the sealed form for
    a value of format v2.0).
    """
    if same and is_sealed(interrupt_payload):
        return interrupt_payload
    return _EVENT_VALUE_MARK + interrupt_payload


def review_record(interrupt_id: str, kind: str, value: Any, thread_id: str, terms: Any = None) -> bytes:
    """The inbox payload of a pending review raised before this run: its id, kind, value
    and the terms it was asked under (when not the defaults)."""
    data = {
        "id": interrupt_id,
        "kind": kind,
        "value": value,
        **({"terms": terms} if terms is not None else {}),
    }
    return _REVIEW_MARK + pack_payload(dumps(data, where=f"interrupt {interrupt_id} of thread {thread_id!r}"))


def tools_named_by(value: Any) -> tuple[str, ...]:
    """The tool names a review's value is about (the inbox's tool filter, a notice's tools)."""
    if isinstance(value, dict):
        requests = value.get("action_requests")
        if isinstance(requests, list):
            return tuple(str(r.get("name")) for r in requests if isinstance(r, dict))
        if isinstance(value.get("name"), str):
            return (value["name"],)
    return ()


REVIEW_KINDS = frozenset({"interrupt", "outcome_unknown"})


def decode_review(payload: bytes, thread_id: str, interrupt_id: str, kind: str | None = None) -> Any:
    """The value of a pending review from its inbox payload, in any stored form.

    The payload names its interrupt and (in the forms written now) its kind, which must
    be the row's: a damaged payload or row raises :class:`SerializationError` naming the
    thread and the interrupt (SPEC rule 10).
    """
    return decode_review_terms(payload, thread_id, interrupt_id, kind)[0]


def decode_review_terms(
    payload: bytes, thread_id: str, interrupt_id: str, kind: str | None = None
) -> tuple[Any, Any]:
    """:func:`decode_review`'s value and the review's terms (``handrail.review.terms``; None
    when it has the defaults)."""
    record = f"pending interrupt {interrupt_id}"
    if kind is not None and kind not in REVIEW_KINDS:
        raise SerializationError(
            f"cannot load thread {thread_id!r}, {record}: unknown review kind {kind!r}", thread_id=thread_id
        )
    marker = payload[:1]
    if is_sealed(payload):  # the interrupt event's sealed payload (its hash is not checked here)
        body = payload
    elif marker in (_EVENT_VALUE_MARK, _REVIEW_MARK):
        body = payload[1:]
    else:
        return loads(unpack_payload(payload, thread_id, record), thread_id=thread_id, record=record), None
    data = loads(unpack_payload(body, thread_id, record), thread_id=thread_id, record=record)
    stored_kind = data.get("kind", "interrupt") if isinstance(data, dict) else None
    if not isinstance(data, dict) or "value" not in data or data.get("id") != interrupt_id:
        problem = "its payload is not the interrupt event that raised it"
    elif kind is not None and stored_kind != kind:
        problem = f"the row says it is {kind!r}, its payload says {stored_kind!r}"
    elif data.get("terms") is not None and not isinstance(data["terms"], dict):
        problem = "its terms are not an object"
    else:
        return data["value"], data.get("terms")
    raise SerializationError(f"cannot load thread {thread_id!r}, {record}: {problem}", thread_id=thread_id)


def decode_notice(data: bytes, thread_id: str, cursor: str) -> Any:
    """The data of a feed notice (``Notice.data``: JSON, packed as event payloads are);
    damage raises :class:`SerializationError` naming the thread and the notice."""
    record = f"notice {cursor}"
    return loads(unpack_payload(data, thread_id, record), thread_id=thread_id, record=record)


def decode_event(stored: StoredEvent, thread_id: str) -> Event:
    """Load a stored event, refusing unknown kinds and damaged payloads (SPEC rule 10)."""
    if stored.kind not in EVENT_KINDS:
        raise SerializationError(
            f"cannot load thread {thread_id!r}, record {stored.seq}: unknown event kind {stored.kind!r}",
            thread_id=thread_id,
            seq=stored.seq,
        )
    payload = unpack_payload(stored.payload, thread_id, f"record {stored.seq}", stored.seq)
    data = loads(payload, thread_id=thread_id, seq=stored.seq)
    if not isinstance(data, dict):
        raise SerializationError(
            f"cannot load thread {thread_id!r}, record {stored.seq}: a {stored.kind} event "
            f"must hold an object, found {type(data).__name__}",
            thread_id=thread_id,
            seq=stored.seq,
        )
    missing = [key for key in _REQUIRED[stored.kind] if key not in data]
    if missing:
        raise SerializationError(
            f"cannot load thread {thread_id!r}, record {stored.seq}: {stored.kind} event lacks {missing}",
            thread_id=thread_id,
            seq=stored.seq,
        )
    return Event(kind=stored.kind, data=data, seq=stored.seq, created_at=stored.created_at)
