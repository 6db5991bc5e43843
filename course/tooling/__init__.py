"""The course's own tools: the learner's working copies (``workspace``: ``python -m course.tooling.workspace``),
executing and saving notebooks with placeholders (``notebooks``), and the layout lints (``lints``)."""
