"""Lab 8's figure: output tok/s per method, and the acceptance rate and mean accepted length of each proposer
(``plot_run(res)`` for a ``lab08.run_spec_lab`` result; the orange bar is alpha, never accepted / proposed), and the Japanese labels of its methods and texts."""
from __future__ import annotations

METHODS = {"none": "投機なし", "ngram": "n-gram（プロンプト参照）", "draft_model": "ドラフトモデル（蒸留）",
           "draft_model_lm": "ドラフトモデル（蒸留なし）"}
TEXTS = {"repetitive": "繰り返しの多い文章", "ordinary": "ふつうの文章"}

COLORS = {"none": "tab:gray", "ngram": "tab:green", "draft_model": "tab:blue", "draft_model_lm": "tab:purple"}


def _wrap(label: str) -> str:
    """A method's label with its parenthesised part on a second line (the tick labels do not overlap)."""
    return label.replace("（", "\n（", 1)


def plot_run(res: dict):
    """Left: output tok/s per method. Right: the mean accepted length (left axis, the method's colour) and
    Leviathan's alpha (solved from the mean accepted length, not accepted / proposed; orange, on a 0-1 twin axis)."""
    from course.labkit.charts import figure
    fig, (a1, a2) = figure(10, 3.6, 1, 2)
    ms = list(res["methods"])
    a1.bar([_wrap(METHODS[m]) for m in ms], [res["methods"][m]["tok_s"] for m in ms], color=[COLORS[m] for m in ms])
    a1.set_ylabel("出力 tok/s")
    a1.grid(alpha=0.3, axis="y")
    spec = [m for m in ms if m != "none"]
    if spec:
        from matplotlib.patches import Patch
        x = range(len(spec))
        a2.bar([i - 0.2 for i in x], [res["methods"][m]["mean_accepted_length"] for m in spec], 0.4,
               color=[COLORS[m] for m in spec])
        a2.set_ylabel("平均受理長 [トークン/ステップ]")
        top = (res["k"] + 1) * 1.45            # headroom above k+1 for the legend
        a2.set_ylim(0, top)
        a3 = a2.twinx()                      # alpha is a probability: its own 0-1 axis on the right
        a3.bar([i + 0.2 for i in x], [res["methods"][m]["alpha"] for m in spec], 0.4, color="tab:orange")
        a3.set_ylim(0, top / (res["k"] + 1))   # alpha = 1 sits level with k+1
        a3.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
        a3.set_ylabel("受理率 α（右の軸、0〜1）")
        a2.set_xticks(list(x), [_wrap(METHODS[m]) for m in spec])
        line = a2.axhline(res["k"] + 1, color="k", linestyle="--", linewidth=1)
        a3.legend([Patch(facecolor="lightgray", edgecolor="k"), Patch(facecolor="tab:orange"), line],
                  ["平均受理長（左の軸。色は左の図の方式）", "受理率 α（右の軸。平均受理長から解いた値）",
                   f"上限 k+1 = {res['k'] + 1}（左の軸。右の軸の α = 1 と同じ高さ）"], fontsize=7, loc="upper left")
        a2.grid(alpha=0.3, axis="y")
    fig.suptitle(f"{TEXTS[res['text']]}・プロンプト {res['prompt_len']}・出力 {res['output_len']}・k = {res['k']}・"
                 f"同時リクエスト数 {res['concurrency']}", fontsize=10)
    return fig
