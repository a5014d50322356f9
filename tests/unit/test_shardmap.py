"""Routing vectors: these numbers are a contract. Changing them strands every
job id already issued (it would route to the wrong shard)."""

from __future__ import annotations

import base64
import os
import pickle
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

import shardmap

# (owner, key) -> slot, from the documented hash:
# first 8 bytes of SHA-256(owner ‖ 0x00 ‖ key), big-endian, mod 4096.
KEY_VECTORS = [
    ("svc", "order-98213-auto-cancel", 1650),
    ("billing", "k", 4070),
    ("", "", 2712),
    ("çağrı", "ödeme-1", 65),  # noqa: RUF001 - Turkish on purpose: keys hash as UTF-8
]


@pytest.mark.parametrize(("owner", "key", "slot"), KEY_VECTORS)
def test_key_slot_vectors(owner: str, key: str, slot: int) -> None:
    assert shardmap.key_slot(owner, key) == slot


@pytest.mark.parametrize(
    ("slot", "shards", "shard"), [(1650, 2, 0), (4070, 2, 0), (2712, 3, 0), (65, 2, 1), (65, 7, 2), (4095, 16, 15)]
)
def test_shard_is_slot_mod_n(slot: int, shards: int, shard: int) -> None:
    assert shardmap.ShardMap(shards).shard_of_slot(slot) == shard


def test_id_text_form_vector() -> None:
    value = uuid.UUID("0190f3c2-a1b2-7abc-8123-456789abcdef")
    assert shardmap.slot_of(value) == 0xABC
    assert shardmap.encode_id("job", value) == "job_01J3SW58DJFAY828T5CY4TQKFF"
    assert shardmap.decode_id("job", "job_01J3SW58DJFAY828T5CY4TQKFF") == value
    # Crockford look-alikes and lower case decode to the same id.
    assert shardmap.decode_id("job", "job_01j3sw58djfay828t5cy4tqkff") == value


_RFC4648_TO_CROCKFORD = bytes.maketrans(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", b"0123456789ABCDEFGHJKMNPQRSTVWXYZ"
)


@given(st.integers(0, 2**128 - 1))
def test_id_text_is_the_base32_of_the_128_bits_behind_two_zero_bits(n: int) -> None:
    # 2 zero bits, the 128, then 6 zero bits: 17 bytes whose first 26
    # base32 characters are the ULID text.
    reference = base64.b32encode((n << 6).to_bytes(17, "big"))[:26].translate(_RFC4648_TO_CROCKFORD)
    assert shardmap.encode_id("job", uuid.UUID(int=n)) == "job_" + reference.decode()


@given(st.integers(0, shardmap.SLOTS - 1), st.integers(0, 2**48 - 1))
def test_new_uuid_carries_slot_and_round_trips(slot: int, ms: int) -> None:
    value = shardmap.new_uuid(slot, unix_ms=ms)
    assert value.version == 7 and value.variant == uuid.RFC_4122
    assert shardmap.slot_of(value) == slot
    assert shardmap.decode_id("cron", shardmap.encode_id("cron", value)) == value


def test_random_slots_cover_shards() -> None:
    shards = {shardmap.ShardMap(4).shard_of(shardmap.new_uuid()) for _ in range(400)}
    assert shards == {0, 1, 2, 3}


def test_ids_are_time_ordered() -> None:
    a = shardmap.new_uuid(1, unix_ms=1_000)
    b = shardmap.new_uuid(4000, unix_ms=1_001)
    assert a < b


@pytest.mark.parametrize(
    "text",
    ["", "job_", "cron_01J3SW58DJFAY828T5CY4TQKFF", "job_01J3SW58DJFAY828T5CY4TQKF", "job_01J3SW58DJFAY828T5CY4TQKF!",
     "job_81J3SW58DJFAY828T5CY4TQKFF", "job_00000000000000000000000000", "01J3SW58DJFAY828T5CY4TQKFF"],
)
def test_decode_refuses_malformed(text: str) -> None:
    with pytest.raises(ValueError):
        shardmap.decode_id("job", text)


def test_slot_range_checked() -> None:
    with pytest.raises(ValueError):
        shardmap.new_uuid(4096)
    with pytest.raises(ValueError):
        shardmap.ShardMap(0)


def test_ids_are_uuids_as_the_constructor_makes_them() -> None:
    made = shardmap.new_uuid(7, unix_ms=1_700_000_000_000)
    same = uuid.UUID(int=made.int)
    assert made == same and hash(made) == hash(same) and str(made) == str(same)
    assert made.version == 7 and made.variant == uuid.RFC_4122
    assert pickle.loads(pickle.dumps(made)) == made


def test_ids_stay_unique_across_buffer_refills() -> None:
    # 409 ids use one 4 KiB read of random bytes: 5,000 cross many refills.
    ids = [shardmap.new_uuid(3, unix_ms=1) for _ in range(5_000)]
    assert len(set(ids)) == len(ids)


def test_a_forked_child_draws_other_ids_than_its_parent() -> None:
    shardmap.new_uuid()  # the parent's buffer holds unused random bytes
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.close(read)
        os.write(write, b"".join(shardmap.new_uuid(1, unix_ms=1).bytes for _ in range(50)))
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    child = {data[i : i + 16] for i in range(0, len(data), 16)}
    parent = {shardmap.new_uuid(1, unix_ms=1).bytes for _ in range(50)}
    assert len(child) == 50 and not child & parent
