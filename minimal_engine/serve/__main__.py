"""`python -m minimal_engine.serve`: start the OpenAI-compatible server (options: cli.py)."""
from minimal_engine.serve.cli import main

raise SystemExit(main())
