"""The slider labs of chapters 4-10, declared as data: which lab module, which experiment, which sliders.

    app = slider_app(8, k=4, text="natural")      # lab 8's panel, the slider k at 4, run with text="natural"

Each lab is a ``SliderLab``: its module in ``course.labs`` (plain functions: ``defaults()``,
``default_repeats()``, the ranges, ``add_run`` / ``readout_html`` / ``history_html`` / ``history_csv``), the
experiment it runs, the chart of one result, the sliders (keyword, label, the lab's range or (lo, hi)) and the
message while it runs. Keyword arguments of ``slider_app`` set a slider's first value, or pass an option of
the experiment (``options``, e.g. lab 8's text). Every panel is a ``course.panels.slider.SliderLabApp``: the
browser test's 「実行」, ``lab-readout``, ``lab-history`` and the slider 「プロンプト長」 hold for each.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import partial

from course.panels.slider import SliderLabApp


@dataclass(frozen=True)
class SliderLab:
    module: str                  # the lab, in course.labs
    run: str                     # its experiment function
    plot: str                    # its chart of one result
    sliders: tuple               # (keyword, label, the lab's range attribute or (lo, hi))
    busy: str                    # the status line while it runs
    options: dict = field(default_factory=dict)   # keyword arguments of run that are not sliders: their defaults


PROMPT = ("prompt_len", "プロンプト長", "PROMPT_LEN_RANGE")
SLIDER_LABS = {
    4: SliderLab("course.labs.lab04", "run_prefix_lab", "plot_prefix",
                 (("shared_len", "共有プロンプト長", "SHARED_LEN_RANGE"), ("num_requests", "リクエスト数", "NUM_REQUESTS_RANGE")),
                 "実行中…（同じ共有プロンプトのリクエストを1件ずつ送ります）"),
    5: SliderLab("course.labs.lab05", "run_batching_lab", "plot_run",
                 (PROMPT, ("concurrency", "同時リクエスト数", "CONCURRENCY_RANGE"),
                  ("num_requests", "リクエスト数", "NUM_REQUESTS_RANGE"), ("output_len", "出力長（最大）", "OUTPUT_LEN_RANGE"),
                  ("ttft_slo_ms", "TTFT の SLO [ms]", "TTFT_SLO_RANGE"), ("tpot_slo_ms", "TPOT の SLO [ms]", "TPOT_SLO_RANGE")),
                 "実行中…（3つの方式で同じリクエストを処理します）"),
    6: SliderLab("course.labs.lab06", "run_quant_lab", "plot_run",
                 (PROMPT, ("output_len", "出力長", "OUTPUT_LEN_RANGE"), ("batch", "バッチサイズ", "BATCH_RANGE")),
                 "実行中…（BF16 と INT8 を交互に、バッチ 1 とバッチ B で測ります）"),
    7: SliderLab("course.labs.lab07", "run_tp_lab", "plot_run",
                 (PROMPT, ("batch_size", "バッチサイズ（Decode）", "BATCH_RANGE"), ("tp", "TP の大きさ（並列度）", "TP_RANGE")),
                 "実行中…（TP=1 と TP=N を交互に測ります。初回はワーカーの起動に数秒かかります）"),
    8: SliderLab("course.labs.lab08", "run_spec_lab", "plot_run",
                 (PROMPT, ("k", "投機トークン数 k", "K_RANGE"), ("concurrency", "同時リクエスト数", "CONCURRENCY_RANGE"),
                  ("output_len", "出力長", "OUTPUT_LEN_RANGE")),
                 "実行中…（投機なし・n-gram・ドラフトモデルで同じリクエストを処理します）", {"text": "repetitive"}),
    9: SliderLab("course.labs.lab09", "run_interference_lab", "plot_run",   # the long prompt: at most 448 here
                 (("prompt_len", "プロンプト長", (16, 448)), ("num_decodes", "Decode 中の件数", "NUM_DECODES_RANGE"),
                  ("output_len", "出力長", "OUTPUT_LEN_RANGE"), ("num_long", "長いプロンプトの数", "NUM_LONG_RANGE")),
                 "実行中…（チャンク予算ごとの1エンジンと、Disaggregation の2プロセスで同じ流れを処理します）"),
    10: SliderLab("course.labs.lab10", "run_pareto_lab", "plot_run",
                  (PROMPT, ("output_len", "出力長", "OUTPUT_LEN_RANGE"),
                   ("max_concurrency", "最大同時リクエスト数", "MAX_CONCURRENCY_RANGE")),
                  "実行中…（同時リクエスト数のスイープを測り、シミュレーターで予測します）"),
}


def slider_app(n: int, repeats=None, csv_name=None, **values) -> SliderLabApp:
    """Lab ``n``'s panel. ``values``: a slider's first value (None or 0: the lab's default) or an option."""
    spec = SLIDER_LABS[n]
    lab = importlib.import_module(spec.module)
    keys = {k for k, _, _ in spec.sliders}
    unknown = set(values) - keys - set(spec.options)
    if unknown:
        raise TypeError(f"lab {n}'s panel has no setting {sorted(unknown)} (sliders {sorted(keys)}, "
                        f"options {sorted(spec.options)})")
    d = {**getattr(lab, "SLO", {}), **lab.defaults()}    # a lab's SLO (lab 5) is a slider too, not an experiment size
    sliders = [(k, label, values.get(k) or d[k], getattr(lab, rng) if isinstance(rng, str) else rng)
               for k, label, rng in spec.sliders]
    options = {k: values.get(k, v) for k, v in spec.options.items()}
    run = partial(getattr(lab, spec.run), **options) if options else getattr(lab, spec.run)
    return SliderLabApp(lab, run, sliders, spec.plot, lab.default_repeats() if repeats is None else repeats,
                        csv_name or f"lab{n}_history.csv", spec.busy)


__all__ = ["SLIDER_LABS", "SliderLab", "slider_app"]
