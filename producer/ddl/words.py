"""Words of MySQL/MariaDB DDL for the interpreter: its token cursor, string values, charsets.

The cursor is `rowbus.protocol.ddl.TokenCursor` (the one cursor, shared with the DDL parser)
with readers that raise `DdlApplyError`. Shared by the type, default and column readers
(`types`, `defaults`, `columns`) and by
`rowbus.producer.ddl.apply`. Pure text work; `DdlApplyError` for anything not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rowbus.protocol.ddl import Token, TokenCursor


class DdlApplyError(ValueError):
    """A part of a statement this interpreter does not model (the caller falls back)."""


@dataclass(frozen=True)
class Charsets:
    """Server facts: each charset's default collation (``utf8mb4`` -> ``utf8mb4_general_ci``),
    and whether JSON is a type of its own (MySQL) or LONGTEXT with utf8mb4_bin (MariaDB)."""

    default_collation: Mapping[str, str]
    native_json: bool = False

    def collation_of(self, charset: str) -> str:
        found = self.default_collation.get(charset)
        if found is None:
            raise DdlApplyError(f"unknown charset {charset}")
        return found


MARIADB_CHARSETS = Charsets(
    {
        "utf8mb4": "utf8mb4_general_ci",
        "utf8mb3": "utf8mb3_general_ci",
        "latin1": "latin1_swedish_ci",
        "ascii": "ascii_general_ci",
        "binary": "binary",
        "utf16": "utf16_general_ci",
        "utf32": "utf32_general_ci",
        "ucs2": "ucs2_general_ci",
        "latin2": "latin2_general_ci",
        "cp1250": "cp1250_general_ci",
        "cp1251": "cp1251_general_ci",
        "greek": "greek_general_ci",
    }
)
"""MariaDB 10.11's defaults, for tests and for a tracker without a server at hand."""


def charset_of_collation(collation: str) -> str:
    return "binary" if collation == "binary" else collation.split("_", 1)[0]


def canon_charset(name: str) -> str:
    low = name.lower()
    return "utf8mb3" if low == "utf8" else low


# ---- tokens -----------------------------------------------------------------------------------


class Words(TokenCursor):
    """The interpreter's cursor: `TokenCursor` with readers that raise `DdlApplyError`."""

    def tok(self) -> Token:
        tok = self.peek()
        if tok is None:
            raise DdlApplyError("statement ends early")
        return tok

    def take(self) -> Token:
        tok = self.tok()
        self.k += 1
        return tok

    def expect(self, word: str) -> None:
        if not self.accept(word):
            raise DdlApplyError(f"expected {word} at {self.at() or 'the end'}")

    def name(self) -> str:
        tok = self.take()
        if tok.kind not in ("ident", "word"):
            raise DdlApplyError(f"expected a name at {tok.text}")
        return tok.name

    def int_arg(self) -> int:
        tok = self.take()
        if not tok.text.isdigit():
            raise DdlApplyError(f"expected a number at {tok.text}")
        return int(tok.text)

    def skip_group(self) -> None:
        """Skip a parenthesized group starting at the cursor."""
        self.expect("(")
        depth = 1
        while depth:
            word = self.take().text
            depth += {"(": 1, ")": -1}.get(word, 0)

    def skip_to_spec_end(self) -> None:
        """Skip to the next ``,`` or closing ``)`` at depth 0 (not consuming it)."""
        depth = 0
        while not self.ended:
            word = self.at()
            if depth == 0 and word in (",", ")"):
                return
            depth += {"(": 1, ")": -1}.get(word, 0)
            self.k += 1

    @property
    def done(self) -> bool:
        return self.ended or (self.at() == ";" and self.k == len(self.sig) - 1)


def string_value(tok: Token) -> str:
    """The value of a quoted string literal (MySQL escapes)."""
    body, quote = tok.text[1:-1], tok.text[0]
    out: list[str] = []
    i = 0
    escapes = {"0": "\0", "n": "\n", "r": "\r", "t": "\t", "b": "\b", "Z": "\x1a"}
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            out.append(escapes.get(nxt, nxt))
            i += 2
            continue
        if ch == quote and i + 1 < len(body) and body[i + 1] == quote:
            out.append(quote)
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)
