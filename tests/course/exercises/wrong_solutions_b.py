"""Typical wrong solutions for exercises 06-10, each paired in the tests with the message its grader must give."""
import torch

# --- 06 ---
def q_per_tensor(w):
    s = w.abs().max().clamp_min(1e-12) / 127
    return torch.round(w / s).clamp(-127, 127).to(torch.int8), s.repeat(w.shape[0])

def q_floor(w):
    s = w.abs().amax(1).clamp_min(1e-12) / 127
    return torch.floor(w / s[:, None]).clamp(-127, 127).to(torch.int8), s

def q_float(w):
    s = w.abs().amax(1).clamp_min(1e-12) / 127
    return torch.round(w / s[:, None]), s

def q_zero_scale(w):
    s = w.abs().amax(1) / 127
    return torch.round(torch.nan_to_num(w / s[:, None])).clamp(-127, 127).to(torch.int8), s

# --- 07 ---
def _cols(w, r, n):
    k = w.shape[0] // n
    if not 0 <= r < n:
        raise ValueError("rank")
    return w[r * k:(r + 1) * k]

def _sizes(t, n):
    return [t // n + (1 if r < t % n else 0) for r in range(n)]

def _good_cols(w, r, n):
    if not 0 <= r < n:
        raise ValueError("rank")
    s = _sizes(w.shape[0], n)
    return w[sum(s[:r]):sum(s[:r + 1])]

def _good_rows(w, r, n):
    if not 0 <= r < n:
        raise ValueError("rank")
    s = _sizes(w.shape[1], n)
    return w[:, sum(s[:r]):sum(s[:r + 1])]

def _good_combine(parts, split):
    return torch.cat(parts, -1) if split == "columns" else torch.stack(parts).sum(0)

tp_floor_split = {"shard_columns": _cols, "shard_rows": _good_rows, "combine": _good_combine}
tp_rows_wrong_dim = {"shard_columns": _good_cols, "shard_rows": lambda w, r, n: _good_cols(w, r, n),
                     "combine": _good_combine}
tp_concat_rows = {"shard_columns": _good_cols, "shard_rows": _good_rows,
                  "combine": lambda parts, split: torch.cat(parts, -1)}
tp_no_refusal = {"shard_columns": lambda w, r, n: w[sum(_sizes(w.shape[0], n)[:r]):sum(_sizes(w.shape[0], n)[:r + 1])],
                 "shard_rows": _good_rows, "combine": _good_combine}

# --- 08 ---
def rs_resample_p(p, q, x, g):
    if torch.rand((), generator=g) * q[x] < p[x]:
        return True, x
    return False, int(torch.multinomial(p, 1, generator=g))

def rs_accept_if_p_ge_q(p, q, x, g):
    if p[x] >= q[x]:
        return True, x
    r = (p - q).clamp_min(0)
    return False, int(torch.multinomial(r / r.sum(), 1, generator=g))

def rs_accept_with_p(p, q, x, g):
    if torch.rand((), generator=g) < p[x]:
        return True, x
    r = (p - q).clamp_min(0)
    return False, int(torch.multinomial(r / r.sum(), 1, generator=g))

# --- 09 ---
def plan_ignores_decodes(L, d, b):
    return [b] * (L // b) + ([L % b] if L % b else [])

def plan_drops_remainder(L, d, b):
    room = b - d
    if room < 1:
        raise ValueError("budget")
    return [room] * (L // room)

def plan_no_refusal(L, d, b):
    room = max(1, b - d)
    return [room] * (L // room) + ([L % room] if L % room else [])

# --- 10 ---
def pf_duplicates_dominate(points):
    return [i for i, (x, y) in enumerate(points)
            if not any(a >= x and b >= y for j, (a, b) in enumerate(points) if j != i)]

def pf_strict_only(points):
    return [i for i, (x, y) in enumerate(points) if not any(a > x and b > y for a, b in points)]

def pf_returns_points(points):
    return [p for p in points if not any(a >= p[0] and b >= p[1] and (a, b) != p for a, b in points)]

def pf_unsorted(points):
    keep = [i for i, (x, y) in enumerate(points)
            if not any(a >= x and b >= y and (a > x or b > y) for a, b in points)]
    return keep[::-1]
