"""The grammar compiler's own process: compiles each constraint once, so that a crash costs this
process, never the server.

llguidance compiles grammars in native code; an input it cannot handle can end the whole process
(SIGSEGV, abort) where no Python exception can catch it. structured_compile.CompileWorker starts
this file as a script in a child process (it imports llguidance and the standard library only, no
torch, so it starts in a fraction of a second) and talks to it in JSON lines:

    stdin:  {"tokenizer": <tokenizer.json text>, "n_vocab": 8192, "eos_token": 2, "limits": {...}}
            then one grammar (llguidance's grammar text, as a JSON string) per line
    stdout: {"error": ""} (it compiles and admits some output) or {"error": "<why not>"} per grammar

The parent compiles the grammar itself only after this process said it compiles, so what reaches the
server's own llguidance has already compiled once. A test can run main() with another compile
function (one that calls os.abort(), or sleeps) to check what the parent does when the child dies or
hangs."""
from __future__ import annotations

import json
import sys


def first_mask_error(matcher, mask: bytes) -> str:
    """After the first mask is computed (`mask`: its bytes): "" when generation can start, else why
    not. llguidance reports some errors only when it computes the first mask: too many alternatives
    in one grammar row (e.g. a JSON object with ~500 optional properties), and constraints that
    admit no output at all (NoExtensionBias)."""
    if not matcher.is_error():
        return "" if any(mask) else "the constraint admits no output (no token is allowed first)"
    error = matcher.get_error().replace("\n<non-verbose/>", "").strip()
    if "NoExtensionBias" in error:
        return "the constraint admits no output (no text satisfies it)"
    if "max is" in error and "items" in error:          # llguidance's max_items_in_row
        return (f"the constraint is too large for the grammar parser: {error.split(';')[0]} "
                "(llguidance's max_items_in_row; a JSON object with more than about 500 optional "
                "properties reaches it)")
    return "the constraint does not compile: " + (error.splitlines()[0][:300] if error else "?")


def compile_error(matcher) -> str:
    """The error of a grammar that did not compile, in one line (no parser state for clients)."""
    error = matcher.get_error().replace("\n<non-verbose/>", "").strip()
    return "the constraint does not compile: " + (error.splitlines()[0][:300] if error else "?")


def compile_check(tokenizer, grammar: str, limits) -> str:
    """Compile one grammar and compute its first mask; "" if generation can start, else why not."""
    import llguidance
    matcher = llguidance.LLMatcher(tokenizer, grammar, limits=limits, log_level=0)
    if matcher.is_error():
        return compile_error(matcher)
    return first_mask_error(matcher, matcher.compute_bitmask())


def main(compile_fn=compile_check) -> None:
    """Serve compile requests on stdin/stdout until stdin closes."""
    import llguidance
    setup = json.loads(sys.stdin.readline())
    tokenizer = llguidance.LLTokenizer(setup["tokenizer"], n_vocab=setup["n_vocab"],
                                       eos_token=setup["eos_token"])
    limits = llguidance.LLParserLimits(**setup["limits"])
    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        try:
            error = compile_fn(tokenizer, json.loads(line), limits)
        except Exception as e:   # noqa: BLE001  a Python-level failure is this grammar's error
            error = f"the constraint does not compile: {type(e).__name__}: {str(e)[:300]}"
        sys.stdout.write(json.dumps({"error": error}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
