"""`python -m minimal_engine.serve`: start the OpenAI-compatible server (see app.py for the options)."""
from minimal_engine.serve.app import main

raise SystemExit(main())
