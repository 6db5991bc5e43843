"""The size limits a structured-outputs constraint must pass before llguidance compiles it.

One place for them. llguidance compiles a grammar recursively, on the caller's thread stack. A chain
of 3,000 Lark rules, a few hundred rules nested in parentheses, or a JSON schema whose `$ref`s lead
through a thousand nested objects overflow that stack, and the whole process dies with SIGSEGV (no
Python exception can catch it); a 100,000-item choice makes it panic. So every constraint is
measured here first, in plain Python that never recurses deeper than the limit, and one that is too
large is refused with a ValueError naming the limit:

    check_limits(StructuredOutputsParams(grammar=g))   # ValueError: the grammar has 3002 rules; ...

The server calls it while parsing a request (its 400 names the request's field);
GrammarBackend.matcher calls it again before compiling, so LLM.generate is protected too.
PARSER_LIMITS are llguidance's own budgets (LLParserLimits), given to every matcher.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GrammarLimits:
    """What one constraint may be.

    Depths count nesting the way llguidance recurses: a Lark rule used inside another goes one level
    deeper (plus the parentheses around it), and a JSON `$ref` counts as the schema it points to.
    llguidance's stack gave out near 2,000 such levels (chains of 3,000 rules, of 1,000 `$ref`ed
    objects, and of 300 rules in 20 parentheses crashed; a chain of 1,000 rules did not), so the
    depth limits keep a margin of about 10."""

    max_grammar_bytes: int = 64 << 10       # guided_grammar / structured_outputs.grammar, UTF-8
    max_grammar_rules: int = 1000           # rule and terminal definitions (Lark or GBNF)
    max_grammar_depth: int = 200            # the longest chain of rules in rules, with parentheses
    max_regex_bytes: int = 16 << 10         # guided_regex
    max_choices: int = 1000                 # guided_choice: items
    max_choice_bytes: int = 64 << 10        # guided_choice: all items together, UTF-8
    max_json_schema_bytes: int = 64 << 10   # guided_json, response_format's schema, tools, as JSON
    max_json_schema_depth: int = 128        # objects and arrays inside each other, `$ref`s followed
    # properties of one object not listed in `required`: llguidance's parser gives each about four
    # items in one row, and refuses a row past 2,000 items (its max_items_in_row) at the first `{`
    # (measured with llguidance 1.9.1: 500 optional properties compile and parse, 520 do not)
    max_optional_properties: int = 400


LIMITS = GrammarLimits()

# llguidance's budgets for each matcher (llguidance 1.9.1's defaults in brackets): the grammar's
# size in symbols (500,000), and errors without the parser's state and the grammar in them (verbose:
# on), which a client must not get back. The lexer's fuel per token (200,000, about 14 ms) and at
# the start (1,000,000) stay at their defaults.
PARSER_LIMITS = dict(max_grammar_size=200_000, verbose_errors=False)


class _TooDeep(Exception):
    pass


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


# ---- Lark (GBNF is measured as the Lark that llguidance converts it to) ------------------------
_DEFINITION = re.compile(r"^[ \t]*[?!]?([A-Za-z_]\w*)(?:\{[^}\n]*\})?(?:\.[+-]?\d+)?[ \t]*:(?!:)",
                         re.M)
_GBNF_DEFINITION = re.compile(r"^[ \t]*[A-Za-z_][\w-]*[ \t]*::=", re.M)
_LARK_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"i?|/(?![/*])(?:[^/\\\n]|\\.)+/[imslux]*|//[^\n]*'
                         r"|[A-Za-z_]\w*|[(\[{]|[)\]}]")


def _lark_rules(text: str) -> dict[str, tuple[int, list[tuple[str, int]]]]:
    """rule name -> (its body's deepest bracket nesting, [(a name it uses, the nesting there)])."""
    heads = list(_DEFINITION.finditer(text))
    bodies = {}
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        level = deepest = 0
        used = []
        for token in _LARK_TOKEN.findall(text, head.end(), end):
            if token in "([{":
                level += 1
                deepest = max(deepest, level)
            elif token in ")]}":
                level = max(level - 1, 0)
            elif token[0].isalpha() or token[0] == "_":
                used.append((token, level))
        old = bodies.get(head.group(1), (0, []))
        bodies[head.group(1)] = (max(old[0], deepest), old[1] + used)
    return bodies


def _lark_depth(bodies: dict, limit: int) -> int:
    """The deepest chain of rules (each use one level, plus the brackets around it). A rule that
    uses itself, directly or not, is not followed again (llguidance compiles a recursion once).
    Raises _TooDeep past limit, so this never recurses more than `limit` calls deep."""
    memo: dict[str, int] = {}
    on_path: set[str] = set()

    def depth(name: str, base: int) -> int:
        if name not in memo:
            if base > limit:
                raise _TooDeep
            on_path.add(name)
            deepest, used = bodies[name]
            for other, level in used:
                if other in bodies and other not in on_path:
                    deepest = max(deepest, level + 1 + depth(other, base + level + 1))
            on_path.discard(name)
            memo[name] = deepest
        if base + memo[name] > limit:
            raise _TooDeep
        return memo[name]

    return max((depth(name, 0) for name in bodies), default=0)


def check_grammar(text: str, limits: GrammarLimits = LIMITS) -> None:
    """A Lark grammar (for GBNF, convert it with llguidance's any_to_lark first)."""
    rules = _lark_rules(text)
    if len(rules) > limits.max_grammar_rules:
        raise ValueError(f"the grammar has {len(rules)} rules; at most {limits.max_grammar_rules} "
                         "are allowed")
    try:
        _lark_depth(rules, limits.max_grammar_depth)
    except _TooDeep:
        raise ValueError(f"the grammar's rules use each other more than {limits.max_grammar_depth} "
                         "levels deep (each rule used inside another, and each parenthesis, is one "
                         f"level); at most {limits.max_grammar_depth} are allowed") from None


# ---- JSON schema ---------------------------------------------------------------------------------
def _pointer(root, ref: str):
    """'#/$defs/a' -> that part of root, or None."""
    node = root
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def json_depth(schema, limit: int) -> int:
    """Objects and lists inside each other, a `$ref` counting as the schema it points to (a `$ref`
    back into its own chain is not followed again). Raises _TooDeep past limit, long before
    Python's own recursion limit."""
    memo: dict[str, int] = {}
    on_path: set[str] = set()

    def walk(node, base: int) -> int:
        if base > limit:
            raise _TooDeep
        deepest = 0
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#") and ref not in on_path:
                if ref not in memo:
                    on_path.add(ref)
                    memo[ref] = walk(_pointer(schema, ref), base + 1)
                    on_path.discard(ref)
                if base + 1 + memo[ref] > limit:
                    raise _TooDeep
                deepest = 1 + memo[ref]
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            return 0
        for child in children:
            if isinstance(child, (dict, list)):
                deepest = max(deepest, 1 + walk(child, base + 1))
        return deepest

    return walk(schema, 0)


def check_json_schema(schema, limits: GrammarLimits = LIMITS):
    """A schema (a dict or its JSON text) -> the schema as a dict, if small and shallow enough."""
    depth = limits.max_json_schema_depth
    too_deep = ValueError(f"the JSON schema is nested more than {depth} levels deep (objects and "
                          "arrays, each $ref counting as what it points to); at most "
                          f"{depth} are allowed")
    try:
        text = schema if isinstance(schema, str) else json.dumps(schema, ensure_ascii=False)
    except RecursionError:
        raise too_deep from None
    except (TypeError, ValueError) as e:     # a set, an object, a dict that contains itself
        raise ValueError(f"the JSON schema is not JSON: {e}") from None
    if _utf8_len(text) > limits.max_json_schema_bytes:
        raise ValueError(f"the JSON schema has {_utf8_len(text)} bytes; at most "
                         f"{limits.max_json_schema_bytes} are allowed")
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except RecursionError:
            raise too_deep from None
        except ValueError as e:
            raise ValueError(f"the JSON schema is not valid JSON: {e}") from None
    try:
        json_depth(schema, depth)
    except _TooDeep:
        raise too_deep from None
    _check_optional_properties(schema, limits.max_optional_properties)
    return schema


def _check_optional_properties(schema, most: int) -> None:
    """Every object schema in `schema` (depth already bounded) lists at most `most` properties
    that are not `required`."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            props, required = node.get("properties"), node.get("required")
            if isinstance(props, dict):
                needed = set(required) & set(props) if isinstance(required, list) and all(
                    isinstance(r, str) for r in required) else set()
                optional = len(props) - len(needed)
                if optional > most:
                    raise ValueError(f"a JSON schema object has {optional} optional properties "
                                     f"(not in `required`); at most {most} are allowed "
                                     "(llguidance's parser refuses larger choices of keys)")
            stack.extend(node.values())


def check_limits(so, limits: GrammarLimits = LIMITS) -> None:
    """so: a StructuredOutputsParams. Raises ValueError naming the limit the constraint breaks."""
    if so.json is not None:
        check_json_schema(so.json, limits)
    elif so.regex is not None and _utf8_len(so.regex) > limits.max_regex_bytes:
        raise ValueError(f"the regex has {_utf8_len(so.regex)} bytes; at most "
                         f"{limits.max_regex_bytes} are allowed")
    elif so.choice is not None:
        if len(so.choice) > limits.max_choices:
            raise ValueError(f"choice has {len(so.choice)} items; at most {limits.max_choices} "
                             "are allowed")
        size = sum(_utf8_len(c) for c in so.choice)
        if size > limits.max_choice_bytes:
            raise ValueError(f"choice has {size} bytes in all; at most {limits.max_choice_bytes} "
                             "are allowed")
    elif so.grammar is not None:
        if _utf8_len(so.grammar) > limits.max_grammar_bytes:
            raise ValueError(f"the grammar has {_utf8_len(so.grammar)} bytes; at most "
                             f"{limits.max_grammar_bytes} are allowed")
        gbnf_rules = len(_GBNF_DEFINITION.findall(so.grammar))   # before the (slow) conversion
        if gbnf_rules > limits.max_grammar_rules:
            raise ValueError(f"the grammar has {gbnf_rules} rules; at most "
                             f"{limits.max_grammar_rules} are allowed")
        check_grammar(_as_lark(so.grammar), limits)


def _as_lark(grammar: str) -> str:
    """GBNF converted to Lark by llguidance's converter (as it will be compiled); Lark as it is."""
    try:
        from llguidance.gbnf_to_lark import any_to_lark
    except ImportError:      # no llguidance: GrammarBackend says so; measure the text as Lark
        return grammar
    try:
        return any_to_lark(grammar)
    except Exception as e:   # noqa: BLE001  the converter's own errors (and RecursionError)
        raise ValueError(f"the grammar does not compile: {type(e).__name__}: "
                         f"{str(e)[:200]}") from None
