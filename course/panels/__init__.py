"""The labs' control panels (ipywidgets only; each calls its lab's plain functions in ``course.labs``).

    from course.panels import build
    build(1)                     # chapter 1's panel (display it as a cell's last expression)
    build(8, k=4)                # keyword arguments: first values of the controls

- ``lab01``, ``lab02``, ``lab03``: the panels of chapters 1-3 (their own controls).
- ``slider``: ``SliderLabApp``, the panel of chapters 4-10; ``slider_labs``: those labs declared as data.
- ``controls``: the controls every panel shares (repeats, threads, server, history and CSV export).

Panels import labs; labs never import panels.
"""
from __future__ import annotations


def build(n: int, **kwargs):
    """The panel of chapter ``n``'s lab (1-10); ``kwargs``: first values of its controls."""
    if n == 1:
        from course.panels.lab01 import Lab1App
        return Lab1App(**kwargs)
    if n == 2:
        from course.panels.lab02 import Lab2App
        return Lab2App(**kwargs)
    if n == 3:
        from course.panels.lab03 import Lab3App
        return Lab3App(**kwargs)
    from course.panels.slider_labs import SLIDER_LABS, slider_app
    if n not in SLIDER_LABS:
        raise ValueError(f"ラボ {n} はありません（1〜10）。 / no lab {n}: use 1-10")
    return slider_app(n, **kwargs)


__all__ = ["build"]
