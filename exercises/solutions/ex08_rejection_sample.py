"""第8章の演習の解答例：投機的デコードの棄却サンプリング（下書き1トークン分）です。"""
import torch


def rejection_sample(p_target: torch.Tensor, q_draft: torch.Tensor, draft_token: int,
                     generator: torch.Generator) -> tuple[bool, int]:
    """下書き draft_token（q_draft から引いたもの）を確率 min(1, p/q) で受理し、棄却したら
    max(0, p - q) を正規化した分布から引き直します。返り値は (受理したか, 出すトークン)。"""
    p, q = p_target.float(), q_draft.float()
    u = torch.rand((), generator=generator)
    # u < p/q を、q で割らずに u * q < p と書きます（q が 0 でも安全）。
    if u * q[draft_token] < p[draft_token]:
        return True, int(draft_token)
    residual = (p - q).clamp_min(0)
    if residual.sum() <= 0:          # p == q のときは棄却されないはずですが、念のため p から引きます
        residual = p
    token = torch.multinomial(residual / residual.sum(), 1, generator=generator)
    return False, int(token)
