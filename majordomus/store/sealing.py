"""What Redis holds of a secret: sealed, when keys are configured (`MAJORDOMUS_ENCRYPTION_KEYS`).

The worker-only input of an execution (its input with the values its schema marks
sensitive, kept until its terminal event) and a schedule's definition (its input is every
execution's) are the two things the store writes that hold secrets in the clear. With keys
configured they are sealed before they are sent to Redis, so Redis, its AOF, its RDB
snapshots and its replicas hold ciphertext, and opened where they are read (the take, the
sweeper's retry of a lost attempt, the ticker).

The cipher is AES-SIV (RFC 5297, `cryptography`'s `AESSIV`), authenticated: a sealed value
altered in Redis, or opened with the wrong key, fails to open rather than yielding garbage.
An execution's input is sealed with a random nonce (two equal inputs do not look equal); a
schedule's definition without one, so that a worker declaring the same schedule again
writes the same bytes and the store sees nothing changed (`schedule_put.lua`).

A sealed value is `MAGIC`, the 4-byte id of its key, the nonce's length and the nonce, then
the ciphertext. Keys are 64 random bytes each, urlsafe-base64; the first seals, every one
opens: to rotate, put a new key first and keep the old ones until nothing sealed with them
is left (an execution's input lives until it ends; a schedule's definition is sealed again
with the new key when its worker declares it, or when it is updated). A value written
before keys were configured is read as it is (it is plain JSON, never `MAGIC`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Sequence
from typing import Any

from majordomus.errors import MajordomusError

MAGIC = b"\x00mds1"
"""How a sealed value begins (plain JSON never does)."""
NONCE_BYTES = 16
KEY_BYTES = 64


class SealError(MajordomusError):
    def __init__(self, message: str, suggestion: str) -> None:
        super().__init__("internal", message, suggestion)


def new_key() -> str:
    """A fresh key, as `MAJORDOMUS_ENCRYPTION_KEYS` takes it."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode()


def _key_id(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()[:4]


class Sealer:
    """Seals and opens with the configured keys; with none, passes values through."""

    def __init__(self, keys: Sequence[str] = ()) -> None:
        self._ciphers: dict[bytes, Any] = {}
        self._seal_id: bytes | None = None
        if not keys:
            return
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESSIV
        except ImportError:  # pragma: no cover - an install without the server extra
            raise SealError(
                "MAJORDOMUS_ENCRYPTION_KEYS is set but the cryptography package is not installed",
                'install it: pip install "majordomus[server]" (or pip install cryptography)',
            ) from None
        for i, text in enumerate(keys):
            try:
                key = base64.urlsafe_b64decode(text.strip().encode())
            except (binascii.Error, ValueError):
                key = b""
            if len(key) != KEY_BYTES:
                raise SealError(
                    f"key {i + 1} of MAJORDOMUS_ENCRYPTION_KEYS is not {KEY_BYTES} bytes in "
                    "urlsafe base64",
                    "make one with: python -c 'from majordomus.store.sealing import new_key; "
                    "print(new_key())'",
                )
            key_id = _key_id(key)
            self._ciphers.setdefault(key_id, AESSIV(key))
            if self._seal_id is None:
                self._seal_id = key_id

    @property
    def active(self) -> bool:
        return self._seal_id is not None

    def seal(self, data: bytes, *, deterministic: bool = False) -> bytes:
        """`data` sealed with the first key (as it is, without keys)."""
        if self._seal_id is None:
            return data
        nonce = b"" if deterministic else os.urandom(NONCE_BYTES)
        sealed = self._ciphers[self._seal_id].encrypt(data, [nonce] if nonce else None)
        return b"".join((MAGIC, self._seal_id, bytes((len(nonce),)), nonce, sealed))

    def open(self, data: bytes) -> bytes:
        """A value as the store wrote it, opened (a plain one as it is)."""
        if not data.startswith(MAGIC):
            return data
        at = len(MAGIC)
        key_id, size = data[at : at + 4], data[at + 4]
        nonce = data[at + 5 : at + 5 + size]
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise SealError(
                "a value in Redis is sealed with a key this process does not have",
                "give every API process and worker the same MAJORDOMUS_ENCRYPTION_KEYS, "
                "keeping old keys after a new one until nothing sealed with them is left",
            )
        from cryptography.exceptions import InvalidTag

        try:
            opened: bytes = cipher.decrypt(data[at + 5 + size :], [nonce] if nonce else None)
        except InvalidTag:
            raise SealError(
                "a sealed value in Redis does not open: it was altered, or its key changed",
                "check that MAJORDOMUS_ENCRYPTION_KEYS holds the key it was sealed with",
            ) from None
        return opened
