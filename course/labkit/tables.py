"""HTML readouts of the lab kit: spaced tables, values right-aligned, each meaning in its own column."""
from __future__ import annotations

import html

from course.labkit.arrivals import describe

TABLE = "<table style='border-collapse:collapse;margin:0.3em 0'>"
TD = "padding:0.2em 0.9em;border-bottom:1px solid #eee"
# A header wraps only at spaces and punctuation, never inside a word (「プリエンプション」 stayed on three lines)
TH_EXTRA = ";word-break:keep-all;overflow-wrap:normal;vertical-align:bottom"


def table_html(rows: list[tuple], head: tuple | None = None, right: set[int] = frozenset({1}),
               whole_words: bool = False) -> str:
    """Rows of cells as an HTML table with padding; columns in ``right`` are right-aligned; ``whole_words``:
    headers wrap only at spaces and punctuation (for long headers such as lab 5's)."""
    def cells(row, tag):
        style = TD + (TH_EXTRA if tag == "th" and whole_words else "")
        return "".join(f"<{tag} style='{style};text-align:{'right' if i in right else 'left'}'>{html.escape(str(c))}</{tag}>"
                       for i, c in enumerate(row))
    body = "".join(f"<tr>{cells(r, 'td')}</tr>" for r in rows)
    return f"{TABLE}{'<tr>' + cells(head, 'th') + '</tr>' if head else ''}{body}</table>"


def spread(m: dict, key: str, fmt: str = "{:.1f}", unit: str = "") -> str:
    """"median (min〜max) unit" when there were repeats, else the one value."""
    v = fmt.format(m[key]) + unit
    if m.get("repeats", 1) > 1 and f"{key}_min" in m:
        v += f"（{fmt.format(m[key + '_min'])}〜{fmt.format(m[key + '_max'])}）"
    return v


def readout_rows(m: dict) -> list[tuple[str, str, str]]:
    """(name, value, meaning) of a measurement (``measure``'s dict, or one run's result)."""
    n = m.get("concurrency", len(m.get("requests", [])))
    rows = [("TTFT（中央値）", spread(m, "ttft_ms", unit=" ms"), "最初のトークンまでの待ち時間"),
            ("TPOT（中央値）", spread(m, "tpot_ms", unit=" ms"), "2トークン目以降の1トークンあたり時間"),
            ("ITL p99", spread(m, "p99_itl_ms", unit=" ms"), "トークン間隔の上位1%（たまに止まる長さ）"),
            ("ITL 最大", spread(m, "max_itl_ms", unit=" ms"), "いちばん長く止まったトークン間隔"),
            ("tok/s（出力）", spread(m, "tok_s"), "全リクエストの出力トークン数 / 所要時間"),
            ("合計 tok/s（入力＋出力）", spread(m, "total_tok_s"), "入力と出力のトークン数の合計 / 所要時間"),
            ("tok/s/user", spread(m, "tok_s_per_user"), "1人が体感する速さ = 1000 / TPOT[ms]"),
            ("所要時間", spread(m, "duration_s", "{:.2f}", " s"), f"{n} リクエストすべてが終わるまで")]
    if m.get("num_preemptions"):
        rows.append(("プリエンプション", f"{m['num_preemptions']} 回", "KV ブロック不足で追い出された回数"))
    return rows


def readout_html(m: dict) -> str:
    note = ""
    if m.get("repeats", 1) > 1:
        note = f"<div style='color:#555'>繰り返し {m['repeats']} 回の中央値（最小〜最大）</div>"
    return note + table_html(readout_rows(m), ("指標", "値", "意味"))


def cost_rows(c: dict) -> list[tuple[str, str, str]]:
    return [("$ / 100万出力トークン", f"{c['usd_per_m_output_tokens']:.4g}", "出力トークンだけで割った料金"),
            ("$ / 100万トークン（入力＋出力）", f"{c['usd_per_m_total_tokens']:.4g}", "入力と出力の合計で割った料金"),
            ("J / 出力トークン", f"{c['j_per_output_token']:.4g}", "全込み電力（all-in）÷ tok/s（出力）"),
            ("J / トークン（入力＋出力）", f"{c['j_per_total_token']:.4g}", "全込み電力（all-in）÷ 合計 tok/s")]


def cost_html(c: dict) -> str:
    return table_html(cost_rows(c), ("コスト", "値", "計算"))


def warnings_html(warnings: list[str]) -> str:
    return "".join(f"<div style='color:#b35900;margin:0.2em 0'>{html.escape(w)}</div>" for w in warnings if w)


HISTORY_HEAD = ("#", "種類", "到着", "プロンプト", "出力", "同時", "繰り返し", "スレッド", "TTFT [ms]", "TPOT [ms]",
                "ITL p99 [ms]", "ITL 最大 [ms]", "tok/s（出力）", "合計 tok/s", "tok/s/user")


def history_rows(history: list[dict], last: int = 15) -> list[tuple]:
    out = []
    for r in history[-last:]:
        arrivals = describe(r["arrivals"], r.get("rate"), r.get("late_prompt_len"))
        out.append((r["run"], "スイープ" if r["kind"] == "sweep" else "実行", arrivals, r["prompt_len"], r["output_len"],
                    r["concurrency"], r["repeats"], r["threads"] or "-", f"{r['ttft_ms']:.1f}", f"{r['tpot_ms']:.1f}",
                    f"{r['p99_itl_ms']:.1f}", f"{r['max_itl_ms']:.1f}", f"{r['tok_s']:.1f}", f"{r['total_tok_s']:.1f}",
                    f"{r['tok_s_per_user']:.1f}"))
    return out


def history_table(rows: list[tuple], head: tuple, right: set[int], grows: str = "実行するとここに1行ずつ増えます",
                  more: str = "", whole_words: bool = False) -> str:
    """A lab's run history: the table under its heading, or, before the first run, a line saying how it grows
    (``grows``: "実行するとここに設定ごとに1行ずつ増えます" and the like)."""
    if not rows:
        return f"<div style='color:#555'>実行の履歴: まだありません（{grows}）</div>"
    return f"<div><b>実行の履歴</b>{more}</div>" + table_html(rows, head, right=right, whole_words=whole_words)


def history_html(history: list[dict], last: int = 15) -> str:
    """The last ``last`` rows of the history (newest at the bottom)."""
    more = f"（最新 {last} 行を表示、全 {len(history)} 行）" if len(history) > last else ""
    return history_table(history_rows(history, last), HISTORY_HEAD, set(range(3, len(HISTORY_HEAD))), more=more)


__all__ = ["cost_html", "cost_rows", "history_html", "history_rows", "history_table", "readout_html", "readout_rows",
           "spread", "table_html", "warnings_html"]
