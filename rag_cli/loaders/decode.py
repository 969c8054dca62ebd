"""Decode raw bytes to text: UTF-8 (BOM stripped), else detect the encoding."""

from __future__ import annotations

import codecs

__all__ = ["decode_bytes", "DecodeFailed"]

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


def decode_bytes(raw: bytes) -> tuple[str, str]:
    """Decode `raw`; return `(text, encoding_name)`.

    Order: a byte-order mark (UTF-8/16/32) decides; else strict UTF-8; else
    charset-normalizer's best guess (GBK/GB18030, UTF-16 without BOM, Latin-1,
    ...). Bytes with NULs that are not UTF-16/32 are binary.
    Raises `DecodeFailed` (with a reason) for binary or undecodable bytes.
    """
    for bom, enc in _BOMS:
        if raw.startswith(bom):
            try:
                return raw.decode(enc), enc
            except UnicodeDecodeError as exc:
                raise DecodeFailed(f"starts with a {enc} byte-order mark but does not decode ({exc.reason})") from None
    has_nul = b"\x00" in raw[:8192]
    if not has_nul:
        try:
            return raw.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            pass
    try:
        from charset_normalizer import from_bytes
    except ImportError:  # pragma: no cover - a declared dependency
        raise DecodeFailed("not UTF-8 and charset-normalizer is not installed") from None
    best = from_bytes(raw).best()
    if best is None:
        raise DecodeFailed("binary file (no text encoding detected)" if has_nul else "not UTF-8 and no encoding detected")
    enc = best.encoding
    if has_nul and not enc.startswith(("utf_16", "utf_32")):
        raise DecodeFailed("binary file (contains NUL bytes)")
    # GBK-family guesses: decode with GB18030, the superset, so no byte is lost.
    if enc in ("gb2312", "gbk", "gb18030", "hz"):
        enc = "gb18030"
    try:
        return raw.decode(enc), enc
    except (UnicodeDecodeError, LookupError):
        return str(best), enc
