"""Tokens (text): tokenizer backends and the count cache.

Nothing is downloaded: tiktoken names its cache files by the sha1 of the blob URL, and
litellm ships exactly those files for cl100k_base and o200k_base. An encoding is loaded
once per process (tiktoken keeps it), on first use, never at import.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import tiktoken
from tokenizers import Tokenizer as HFTokenizer

from proxy.tokens.windows import litellm_dir

T = TypeVar("T")

_BLOB = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
# tiktoken's expected hashes (tiktoken_ext/openai_public.py): checked first, because on a
# mismatch tiktoken would delete the file and download it again.
_SHA256 = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
Prefixes = Callable[[int], str]


def tiktoken_files_dir() -> Path:
    """litellm's copy of tiktoken's encoding files (named as tiktoken names its cache)."""
    folder = litellm_dir()
    if folder is None:
        raise RuntimeError("litellm is not installed: tiktoken's encoding files are missing")
    return folder / "litellm_core_utils" / "tokenizers"


def load_encoding(name: str) -> tiktoken.Encoding:
    """A tiktoken encoding from litellm's files; refuses rather than downloading."""
    folder = tiktoken_files_dir()
    cached = folder / hashlib.sha1(_BLOB.format(name).encode()).hexdigest()
    if name not in _SHA256 or not cached.is_file():
        raise RuntimeError(f"no offline copy of {name} at {cached}")
    if hashlib.sha256(cached.read_bytes()).hexdigest() != _SHA256[name]:
        raise RuntimeError(f"the offline copy of {name} at {cached} is corrupt")
    # tiktoken reads TIKTOKEN_CACHE_DIR when it loads; point it at litellm's folder only
    # for that call, so a user's own setting is left as it was.
    previous = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
    try:
        encoding = tiktoken.get_encoding(name)
    finally:
        if previous is None:
            os.environ.pop("TIKTOKEN_CACHE_DIR", None)
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = previous
    # The encoding keeps a Python copy of its merge ranks (200k bytes -> int for o200k,
    # ~29 MB resident) that only pickling reads: the Rust core that encodes and decodes
    # holds its own. We never pickle an encoding, so the copy goes (tests check that
    # counting, cutting and decoding still work).
    encoding._mergeable_ranks = {}
    return encoding


class CountCache:
    """A bounded cache of token counts keyed by a 64-bit content hash.

    Two generations of plain dicts instead of an LRU list: a hit costs one dict lookup
    (no reordering), and each entry about half the memory of an OrderedDict's. New and
    recently used entries are in the young generation; when it is full it becomes the old
    one and the old one is dropped, so whatever was used since the last turnover stays.
    At most `max_entries` in all.
    """

    def __init__(self, max_entries: int) -> None:
        self._half = max(0, max_entries) // 2
        self._young: dict[int, int] = {}
        self._old: dict[int, int] = {}

    def get(self, key: int) -> int | None:
        count = self._young.get(key)
        if count is None:
            count = self._old.pop(key, None)
            if count is not None:
                self.put(key, count)
        return count

    def put(self, key: int, count: int) -> None:
        if not self._half:
            return
        young = self._young
        if len(young) >= self._half:
            # Swapped whole: another thread reading the old dicts meanwhile is harmless.
            self._old, self._young = young, {}
            young = self._young
        young[key] = count

    def __len__(self) -> int:
        return len(self._young) + len(self._old)


# count_many joins texts from this many on (below, a call per text is as quick), with
# this special token between them.
_JOINED_FROM = 8
_EOT = "<|endoftext|>"

# tiktoken's pre-tokenizer (fancy-regex) overflows its stack, and panics, on a run of
# whitespace somewhere under a million characters long: longer texts are encoded in pieces.
_PIECE_CHARS = 100_000
# A space between two ASCII letters: both regexes (cl100k, o200k) end a piece before it and
# start the next with it (" word"), so encoding on both sides of it gives the same tokens.
_EXACT_CUT = re.compile(r"(?<=[A-Za-z]) (?=[A-Za-z])")


# What a cut inside a piece may save against encoding it whole (BPE merges across the
# cut): added back per such cut, so that a hostile text is counted over, never under.
_CUT_MARGIN = 2


def pieces(text: str) -> tuple[list[str], int]:
    """`text` cut into pieces of about _PIECE_CHARS, at exact cuts where there are any, and
    how many cuts are not exact: a text with none for that long (a hostile run of spaces)
    is cut where it stands."""
    out: list[str] = []
    start, n, inexact = 0, len(text), 0
    while n - start > _PIECE_CHARS:
        found = _EXACT_CUT.search(text, start + _PIECE_CHARS // 2, start + _PIECE_CHARS)
        if found is None:
            inexact += 1
        end = found.start() if found else start + _PIECE_CHARS
        out.append(text[start:end])
        start = end
    out.append(text[start:])
    return out, inexact


class TiktokenText:
    """Text counting with a tiktoken encoding (special tokens are plain text, as in prompts)."""

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self._enc = encoding
        self.name: str = encoding.name
        # tiktoken's core can hand the tokens over as one buffer (what its encode_to_numpy
        # uses) instead of a list of ints: counting 128k tokens takes 1.5 ms less (9%).
        # Called directly: the public wrapper's checks cost 1.7 us a call, and a request
        # is counted message by message. With no special token allowed it encodes as
        # encode_ordinary does (tests/tokens/test_tokens.py holds them equal).
        self._buffer: Callable[[str, set[str]], Any] | None = getattr(
            encoding._core_bpe, "encode_to_tiktoken_buffer", None
        )
        self._specials: dict[str, int] = dict(encoding._special_tokens)

    def count(self, text: str) -> int:
        if len(text) > _PIECE_CHARS:
            cut, inexact = pieces(text)
            return sum(self._count(piece) for piece in cut) + inexact * _CUT_MARGIN
        return self._count(text)

    def _count(self, text: str) -> int:
        if self._buffer is not None:
            try:
                return np.frombuffer(self._buffer(text, set()), np.uint32).size
            except UnicodeEncodeError:  # a lone surrogate: encode_ordinary replaces it
                pass
        return len(self._enc.encode_ordinary(text))

    def count_many(self, texts: list[str]) -> list[int]:
        """`count` of each text, in one call to tiktoken for many.

        The texts are joined with an end-of-text token between them, the one special token
        allowed: tiktoken encodes the text between two specials on its own, so each text
        gets exactly its own tokens, and the separators show where each ends. One call
        instead of hundreds, and one that runs free of the GIL, so that the caller's
        thread can do other work meanwhile (chat_tokens.ChatTokenizer.count_messages).
        """
        if (
            len(texts) < _JOINED_FROM
            or self._buffer is None
            or _EOT not in self._specials
            or any(len(text) > _PIECE_CHARS for text in texts)
        ):
            return [self.count(text) for text in texts]
        try:
            tokens = np.frombuffer(self._buffer(_EOT.join(texts) + _EOT, {_EOT}), np.uint32)
        except UnicodeEncodeError:  # a lone surrogate: counted one by one
            return [self.count(text) for text in texts]
        ends = np.flatnonzero(tokens == self._specials[_EOT])
        if len(ends) != len(texts):  # a text holds the separator itself
            return [self.count(text) for text in texts]
        counts: list[int] = (np.diff(ends, prepend=-1) - 1).tolist()
        return counts

    def prefixes(self, text: str) -> tuple[int, Prefixes]:
        tokens = [t for piece in pieces(text)[0] for t in self._enc.encode_ordinary(piece)]
        decode = self._enc.decode_bytes
        # A cut inside a multi-byte character keeps only the whole characters before it.
        return len(tokens), lambda k: decode(tokens[:k]).decode("utf-8", errors="ignore")


class HFText:
    """Text counting with a Hugging Face `tokenizer.json` (no special tokens added)."""

    def __init__(self, path: Path) -> None:
        self._tok = HFTokenizer.from_file(str(path))
        self.name = f"tokenizer:{path.name}"

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def count_many(self, texts: list[str]) -> list[int]:
        """`count` of each text, in one call (the library's batch, free of the GIL)."""
        if len(texts) < _JOINED_FROM:
            return [self.count(text) for text in texts]
        return [len(e.ids) for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def prefixes(self, text: str) -> tuple[int, Prefixes]:
        offsets = self._tok.encode(text, add_special_tokens=False).offsets
        return len(offsets), lambda k: text[: offsets[k - 1][1]] if k > 0 else ""


def in_thread(work: Callable[[], T]) -> Future[T]:
    """`work` started in a thread of its own; its future holds its value or exception."""
    future: Future[T] = Future()
    future.set_running_or_notify_cancel()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as error:  # handed to the caller, which raises it
            future.set_exception(error)

    threading.Thread(target=run, name="count", daemon=True).start()
    return future
