"""Reading a learner's numeric answer: full-width input, thousands separators, Japanese unit words, units.

``parse_numeric("１６．７ミリ秒")`` -> ``(16.7, "ミリ秒")``; :func:`find_unit` knows what ``ミリ秒`` is
(time, 10^-3 s), and :func:`convert` turns ``0.0167 秒`` into ``16.7`` for a question asked in ``ms``.

What is accepted (after Unicode NFKC normalisation, so ``１６．７`` is ``16.7`` and ``ＧＢ`` is ``GB``):

- a number: ``16.7``, ``-3``, ``.5``, ``131,072`` (commas only as thousands separators),
  ``1.69e13``, ``1.69×10^13``, ``1.69×10¹³``; Japanese multipliers ``万`` ``億`` ``兆`` (``360万``);
- before it: ``約`` ``およそ`` ``≒`` ``~`` and a currency sign ``$``; after it: a unit from :data:`UNITS`
  (``ms`` ``ミリ秒`` ``秒`` ``バイト`` ``GB`` ``ギガバイト`` ``トークン`` ``人`` ``ドル`` ``J/token`` ...),
  and a trailing ``です`` or ``。``.

What cannot be read raises :class:`NotUnderstood`, whose message (Japanese) says what was not
understood and what is expected; the quiz does not grade such an answer.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass


class NotUnderstood(ValueError):
    """A response that is not graded: not a number, or a unit the question cannot use. The message says why."""


@dataclass(frozen=True)
class Unit:
    symbol: str        # how the course writes it: "ms"
    dimension: str     # what it measures, in Japanese: "時間"
    factor: float      # in the dimension's base unit (s, B, J, ...)
    name: str = ""     # Japanese reading, for messages: "ミリ秒"


def _units(dimension: str, rows) -> dict[str, Unit]:
    table = {}
    for symbol, factor, name, aliases in rows:
        unit = Unit(symbol, dimension, factor, name)
        for key in (symbol, name, *aliases):
            if key:
                table[_key(key)] = unit
    return table


def _key(text: str) -> str:
    return unicodedata.normalize("NFKC", text).replace(" ", "").lower().replace("µ", "μ")


_PER_TOKEN = ("/token", "/tokens", "/tok", "/トークン", "毎トークン")
UNITS: dict[str, Unit] = {
    **_units("時間", [("s", 1, "秒", ("sec", "second", "seconds")),
                    ("ms", 1e-3, "ミリ秒", ("msec", "millisecond", "milliseconds")),
                    ("μs", 1e-6, "マイクロ秒", ("us",))]),
    **_units("データ量", [("B", 1, "バイト", ("byte", "bytes")),
                      ("KB", 1e3, "キロバイト", ()), ("MB", 1e6, "メガバイト", ()),
                      ("GB", 1e9, "ギガバイト", ()), ("TB", 1e12, "テラバイト", ()),
                      ("KiB", 2**10, "キビバイト", ()), ("MiB", 2**20, "メビバイト", ()),
                      ("GiB", 2**30, "ギビバイト", ()), ("TiB", 2**40, "テビバイト", ())]),
    # Energy per token: the "/token" is implied ("16.9 J" answers a J/token question).
    **_units("1トークンあたりのエネルギー", [
        ("J/token", 1, "ジュール", ("j",)), ("mJ/token", 1e-3, "ミリジュール", ("mj",)),
        ("nJ/token", 1e-9, "ナノジュール", ("nj",)), ("pJ/token", 1e-12, "ピコジュール", ("pj",))]),
    **_units("電力", [("W", 1, "ワット", ()), ("kW", 1e3, "キロワット", ())]),
    **_units("100万トークンあたりのコスト", [
        ("$/M tokens", 1, "ドル/100万トークン", ("$", "ドル", "$/mtok", "$/mtokens", "$/m", "usd",
                                               "$/100万トークン", "ドル/mtokens"))]),
    **_units("トークン数", [("トークン", 1, "", ("token", "tokens", "tok"))]),
    # Users and requests are counted alike (one user = one request): "116人" answers a request count.
    **_units("リクエスト数", [("リクエスト", 1, "", ("本", "件", "requests", "request", "req")),
                          ("人", 1, "", ("人分", "ユーザー", "users", "user"))]),
    **_units("スループット", [("tok/s", 1, "トークン/秒", ("tokens/s", "token/s", "トークン毎秒"))]),
    **_units("1人あたりの速度", [("tok/s/user", 1, "トークン/秒/人", ("tok/s/人", "tokens/s/user"))]),
    **_units("演算強度", [("FLOP/B", 1, "FLOP/バイト", ("flops/b", "flop/byte", "flops/byte", "flop/バイト"))]),
    **_units("演算量", [("FLOPs", 1, "", ("flop",)), ("MFLOPs", 1e6, "", ("mflop",)),
                      ("GFLOPs", 1e9, "", ("gflop",)), ("TFLOPs", 1e12, "", ("tflop",))]),
    # A ratio below 1 is often written as a percentage: "51%" answers a 倍 question as 0.51.
    **_units("倍率", [("倍", 1, "", ("x", "×", "times")), ("%", 0.01, "パーセント", ("percent",))]),
    **_units("ステップ数", [("ステップ", 1, "", ("step", "steps", "回"))]),
}

_MULTIPLIERS = {"万": 1e4, "億": 1e8, "兆": 1e12}
_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
_PREFIXES = ("約", "およそ", "≒", "≈", "~", "〜", "ほぼ")
_NUMBER = re.compile(
    r"(?P<num>[-+]?(?:\d+(?:,\d+)*)?(?:\.\d+)?)"
    r"(?P<exp>e[-+]?\d+|\s*[x×*]\s*10\s*\^\s*[-+]?\d+)?"
    r"\s*(?P<mult>[万億兆])?"
    r"\s*(?P<rest>.*)", re.IGNORECASE | re.DOTALL)
_GROUPED = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def normalise(text: str) -> str:
    """NFKC (full-width -> ASCII), superscript exponents (10¹³ -> 10^13), minus signs, spaces."""
    text = re.sub(r"[⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺]+", lambda m: "^" + m.group(0).translate(_SUPERSCRIPT), str(text))
    text = unicodedata.normalize("NFKC", text)
    return re.sub(r"\s+", " ", text.replace("−", "-").replace("–", "-")).strip()


def parse_numeric(response, unit: str = "", example: str = "12.5") -> tuple[float, str]:
    """``"１６．７ミリ秒"`` -> ``(16.7, "ミリ秒")``; ``"131,072 バイト"`` -> ``(131072.0, "バイト")``.

    Returns the value and the unit as written (normalised, possibly ""). Raises :class:`NotUnderstood`
    with a Japanese message (``example`` and the question's ``unit`` make its example) when no number
    can be read.
    """
    if isinstance(response, (int, float)) and not isinstance(response, bool):
        return float(response), ""
    raw = "" if response is None else str(response)
    text = normalise(raw)
    for _ in range(3):
        text = text.removesuffix("。").removesuffix("です").strip()
    for prefix in _PREFIXES:
        text = text.removeprefix(prefix).strip()
    currency = text.startswith("$")
    text = text.lstrip("$").strip()
    hint = f"数値で入力してください（例: {example}" + (f" または {example} {unit}" if unit else "") + "）。"
    if not text:
        raise NotUnderstood(f"回答が空です。{hint}")
    m = _NUMBER.fullmatch(text)
    num = m.group("num") if m else ""
    if not re.search(r"\d", num):
        raise NotUnderstood(f"数値として読めませんでした：『{raw.strip()}』。{hint}")
    if "," in num and not _GROUPED.fullmatch(num):
        raise NotUnderstood(f"『{num}』のカンマを3桁区切りとして読めませんでした（小数点は「.」です）。{hint}")
    rest = m.group("rest").strip()
    if rest and (rest[0].isdigit() or rest[0] in ".,"):
        raise NotUnderstood(f"数値として読めませんでした：『{raw.strip()}』（数字の途中に空白や記号があります）。{hint}")
    value = float(num.replace(",", ""))
    if m.group("exp"):
        value *= 10.0 ** int(re.sub(r"^.*?(?:e|\^)\s*", "", m.group("exp"), flags=re.I))
    if m.group("mult"):
        value *= _MULTIPLIERS[m.group("mult")]
    unit = ("$" + rest) if currency else rest
    return value, unit


def find_unit(text: str) -> Unit | None:
    """The :class:`Unit` a unit text names (``"ミリ秒"``, ``"ms"``, ``"GB"``, ``"J/トークン"``), or None."""
    key = _key(text)
    if key in UNITS:
        return UNITS[key]
    for suffix in _PER_TOKEN:                                       # "ms/token", "J/トークン"
        if key.endswith(suffix) and key[: -len(suffix)] in UNITS:
            return UNITS[key[: -len(suffix)]]
    return None


def describe(unit: Unit) -> str:
    """``"ms（ミリ秒）"`` for messages."""
    return f"{unit.symbol}（{unit.name}）" if unit.name and unit.name != unit.symbol else unit.symbol


def alternatives(unit: Unit) -> list[str]:
    """Other units a question in ``unit`` accepts (same dimension), as the course writes them."""
    seen = []
    for u in UNITS.values():
        if u.dimension == unit.dimension and u.symbol != unit.symbol and u.symbol not in seen:
            seen.append(u.symbol)
    return seen


def convert(value: float, written: str, expected: Unit) -> float:
    """``value`` in the unit ``written`` (may be "") expressed in ``expected``; :class:`NotUnderstood` if impossible."""
    if not written:
        return value
    unit = find_unit(written)
    others = alternatives(expected)
    also = f"（{', '.join(others)} でも答えられます）" if others else ""
    if unit is None:
        raise NotUnderstood(f"単位『{written}』が読めませんでした。この問題は {describe(expected)}で答えます{also}。")
    if unit.dimension != expected.dimension:
        raise NotUnderstood(f"単位が合いません：『{written}』は{unit.dimension}の単位ですが、この問題は"
                            f"{expected.dimension}を {describe(expected)}で答えます{also}。")
    return value * unit.factor / expected.factor
