"""Each chapter's lab as plain experiment functions that return data (no widgets): ``lab01`` ... ``lab10``.

    from course.labs import lab01
    res = lab01.run_timeline(prompt_len=64, output_len=32, concurrency=4)

Tests and notebooks call them directly; the panels in ``course.panels`` only wire widgets to them. Plots of
one result live beside the experiment (``plot_*``; chapter 2's in ``lab02_plots``). A lab imports the lab kit
(``course.labkit``), ``course.runtime`` and the engine, never a panel and never another lab.
"""
