"""Decode raw bytes to text: UTF-8 (BOM stripped), else detect the encoding."""

from __future__ import annotations

import codecs
import re

__all__ = ["decode_bytes", "decode_text", "check_encoding", "forced_problem", "DecodeFailed"]

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),  # must precede UTF-16 LE (shared prefix)
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


class DecodeFailed(Exception):
    """The bytes cannot be turned into text: binary or in no encoding we could
    detect, or (raised by the PDF/DOCX readers) a corrupt, encrypted or
    text-less PDF/DOCX. The message is the reason a file is skipped."""


# Legacy encodings tried, in this order, when the bytes are not UTF-8. The list
# is deliberately short: charset-normalizer over all ~90 Python codecs picks
# look-alike single-byte pages for Western text (cp1257/iso8859_10/cp1006 for
# French or German Latin-1, e.g. "très" → "trčs"), so it only chooses among
# encodings a document collection plausibly holds. cp1252 is the superset of
# Latin-1's printable range (it is how browsers read "iso-8859-1", per the
# WHATWG Encoding Standard), so it stands for both.
TEXT_CANDIDATES = ("gb18030", "big5", "cp932", "euc_jp", "cp1252")
# Candidates for bytes with NULs: UTF-16/32 without a byte-order mark.
_WIDE_CANDIDATES = ("utf_16_le", "utf_16_be", "utf_32_le", "utf_32_be")


def check_encoding(encoding: str, flag: str = "--encoding") -> str:
    """The codec name Python gives `encoding` (`"GBK"` -> `"gbk"`).

    Raises:
        BadInput: Python has no such codec, or it is not a text encoding
            (base64, rot13, ...); the message names `flag`.
    """
    from rag_cli.errors import BadInput

    try:
        info = codecs.lookup(encoding)
    except (LookupError, TypeError):
        info = None
    if info is None or not getattr(info, "_is_text_encoding", True):
        raise BadInput(f"{flag} {encoding!r}: not a text encoding Python knows; use a codec name such as "
                       "utf-8, gb18030, gbk, big5, shift_jis, euc_jp, cp1252, latin-1 or utf-16")
    return info.name


def decode_text(raw: bytes, encoding: str | None = None) -> tuple[str, str, list[str]]:
    """Decode `raw` as `decode_bytes` does; return `(text, encoding_name,
    others)`, `others` being the other candidate encodings that also decode
    the bytes into plausible but different text (so the choice is a guess:
    a short file, e.g. the 4 bytes of GBK `国标`, which Big5 reads as `弊梓`).
    Among equally plausible candidates the first of `TEXT_CANDIDATES` wins.

    `encoding` forces a codec (checked by `check_encoding`): the bytes are
    decoded with it strictly (a leading U+FEFF is dropped) and `others` is
    empty.

    Raises `DecodeFailed` as `decode_bytes`, or when the bytes do not decode
    with the forced encoding.
    """
    if encoding is not None:
        enc = check_encoding(encoding)
        try:
            return raw.decode(enc).removeprefix("\ufeff"), enc, []
        except UnicodeDecodeError as exc:
            raise DecodeFailed(f"does not decode as {enc} (--encoding): {exc.reason} at byte {exc.start}") from None
    for bom, enc in _BOMS:
        if raw.startswith(bom):
            try:
                return raw.decode(enc), enc, []
            except UnicodeDecodeError as exc:
                raise DecodeFailed(f"starts with a {enc} byte-order mark but does not decode ({exc.reason})") from None
    has_nul = b"\x00" in raw[:8192]
    if not has_nul:
        try:
            return raw.decode("utf-8"), "utf-8", []
        except UnicodeDecodeError:
            pass
    try:
        from charset_normalizer import from_bytes
    except ImportError:  # pragma: no cover - a declared dependency
        raise DecodeFailed("not UTF-8 and charset-normalizer is not installed") from None
    candidates = _WIDE_CANDIDATES if has_nul else TEXT_CANDIDATES
    results = list(from_bytes(raw, cp_isolation=list(candidates)))
    if not results:
        if has_nul:
            raise DecodeFailed("binary file (contains NUL bytes and is not UTF-16/32)")
        raise DecodeFailed("not UTF-8, and no encoding among " + ", ".join(TEXT_CANDIDATES)
                           + " decodes it as plausible text; convert it to UTF-8")
    best = results[0]  # charset-normalizer's pick (least chaos, then most coherence)
    # Where it cannot tell them apart (its own margins: chaos within 0.01,
    # coherence within 0.02), the first of the candidate list wins.
    rank = {c: i for i, c in enumerate(candidates)}
    tied = [r for r in results if abs(r.chaos - best.chaos) < 0.01 and abs(r.coherence - best.coherence) <= 0.02]
    best = min(tied, key=lambda r: rank.get(r.encoding, len(rank)))
    text = raw.decode(best.encoding)
    others = [r.encoding for r in results if r.encoding != best.encoding and str(r) != text]
    return text, best.encoding, others


#: charset-normalizer's mess ratio at or above which text decoded with a
#: forced `--encoding` is called implausible: its own limit for a guess
#: (mojibake such as GBK read as Latin-1 scores above 1; French read as
#: Latin-1 about 0.08).
MESS_LIMIT = 0.2
#: Characters of a document looked at by `forced_problem`.
FORCED_SAMPLE = 1 << 16
_PRIVATE_USE = re.compile("[\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd]")


def forced_problem(text: str, encoding: str, raw: bytes = b"") -> str | None:
    """Why `text`, decoded from `raw` with the forced `encoding`, looks like
    the wrong encoding, or None when it looks plausible. Looked at (the first
    `FORCED_SAMPLE` characters): U+FFFD replacement characters, private-use
    characters, and charset-normalizer's mess ratio (`MESS_LIMIT`: an
    implausible mix of scripts, symbols and accents). With `raw`, the
    message also says how the bytes read without `--encoding`."""
    sample = text[:FORCED_SAMPLE]
    found = []
    n_repl = sample.count("\ufffd")
    if n_repl:
        found.append(f"{n_repl} replacement character{'s' if n_repl > 1 else ''} (U+FFFD)")
    n_private = len(_PRIVATE_USE.findall(sample))
    if n_private:
        found.append(f"{n_private} private-use character{'s' if n_private > 1 else ''}")
    try:
        from charset_normalizer.md import mess_ratio
    except ImportError:  # pragma: no cover - a declared dependency
        mess = 0.0
    else:
        mess = mess_ratio(sample, maximum_threshold=1e9) if sample.strip() else 0.0
    if mess >= MESS_LIMIT:
        found.append(f"an implausible mix of scripts and symbols (charset-normalizer mess ratio {mess:.2f} >= "
                     f"{MESS_LIMIT})")
    if not found:
        return None
    detected = ""
    if raw:
        try:
            detected = f"; without --encoding it reads as {decode_text(raw)[1]}"
        except DecodeFailed:
            detected = "; it does not decode as plausible text without --encoding either"
    shown = " ".join(sample.split())[:24]
    return (f"--encoding {encoding} gives text that looks like the wrong encoding: {', '.join(found)}, "
            f"e.g. {shown!r}{detected}")


def decode_bytes(raw: bytes) -> tuple[str, str]:
    """Decode `raw`; return `(text, encoding_name)` (`decode_text` also says
    which other encodings were plausible).

    Order: a byte-order mark (UTF-8/16/32) decides; else strict UTF-8; else
    charset-normalizer restricted (`cp_isolation`) to `TEXT_CANDIDATES`
    (GB18030 ⊇ GBK/GB2312, Big5, Shift-JIS as cp932, EUC-JP, cp1252 ⊇ Latin-1
    printable), or to UTF-16/32 LE/BE when the bytes hold NULs. A guess is
    kept only if its "chaos" (mess ratio) is at most charset-normalizer's
    default 0.2; otherwise the file is refused rather than turned into
    mojibake. Bytes with NULs that are not UTF-16/32 are binary.
    Raises `DecodeFailed` (with a reason) for binary or undecodable bytes.
    """
    text, enc, _others = decode_text(raw)
    return text, enc
