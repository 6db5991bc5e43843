"""第6章の演習の解答例：重みを出力チャネルごとに対称な INT8 へ量子化します。"""
import torch


def quantize_int8_per_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [out, in] -> (q int8 [out, in], scale [out])。w[n, k] ≈ q[n, k] * scale[n] です。"""
    w = w.detach().float()
    # 行（出力チャネル）ごとに、絶対値の最大が 127 に来るようにスケールを決めます。
    # 全部 0 の行で 0 で割らないよう、ごく小さい値で下から押さえます。
    scale = w.abs().amax(dim=1).clamp_min(1e-12) / 127.0
    # 格子に丸めます。対称なので範囲は [-127, 127]（-128 は使いません）。
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale
