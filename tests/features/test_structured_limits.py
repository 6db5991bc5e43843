"""Structured outputs, offline: constraints too large for llguidance are refused with a ValueError
naming the limit (features/structured_limits.py) instead of crashing the process, and object schemas
without `additionalProperties` are closed, as vLLM's default backend reads them."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from minimal_engine import LLM
from minimal_engine.features.structured_limits import LIMITS, check_limits
from minimal_engine.sampling_params import StructuredOutputsParams as Constraint

# Each of these crashed the whole process with SIGSEGV inside llguidance (attack round 3, H1;
# measured again: 3,000 chained rules, 300 rules each in 20 parentheses, $ref chains via objects).
CRASHERS = textwrap.dedent('''
    import json
    from minimal_engine import LLM
    from minimal_engine.sampling_params import StructuredOutputsParams as C

    def nest(inner, k):
        for _ in range(k):
            inner = {"type": "object", "properties": {"x": inner}, "required": ["x"]}
        return inner

    chain = "start: r0\\n" + "\\n".join(f'r{i}: r{i+1} "x"' for i in range(3000)) + '\\nr3000: "a"'
    parens = "start: r0\\n" + "\\n".join(f"r{i}: " + "(" * 20 + f'r{i+1} "x"' + ")" * 20
                                        for i in range(300)) + '\\nr300: "a"'
    refs = {f"a{i}": nest({"$ref": f"#/$defs/a{i+1}"}, 30) for i in range(20)}
    cases = {"rule chain": C(grammar=chain), "parentheses": C(grammar=parens),
             "$ref chain": C(json={"$ref": "#/$defs/a0",
                                   "$defs": {**refs, "a20": {"type": "integer"}}})}
    backend = LLM(max_num_seqs=1).engine.grammars
    for name, c in cases.items():
        try:
            backend.matcher(c)
            print(json.dumps([name, "compiled"]), flush=True)
        except ValueError as e:
            print(json.dumps([name, str(e)]), flush=True)
''')


def test_grammars_that_crashed_llguidance_are_refused_and_the_process_lives():
    """Before: the child process died with SIGSEGV (exit -11) on the first case. After: each one
    is a ValueError naming the limit."""
    run = subprocess.run([sys.executable, "-c", CRASHERS], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, f"exit {run.returncode}: {run.stderr[-2000:]}"
    got = dict(json.loads(line) for line in run.stdout.splitlines() if line.startswith("["))
    assert got["rule chain"] == ("structured_outputs: the grammar has 3002 rules; "
                                 "at most 1000 are allowed")
    assert got["parentheses"].startswith("structured_outputs: the grammar's rules use each other "
                                         "more than 200 levels deep"), got
    assert "JSON schema is nested more than 128 levels deep" in got["$ref chain"], got


@pytest.mark.parametrize("constraint, message", [
    (Constraint(choice=[f"c{i}" for i in range(1001)]), "choice has 1001 items; at most 1000 are"),
    (Constraint(choice=["あ" * 30_000]), "choice has 90000 bytes in all; at most 65536 are allowed"),
    (Constraint(regex="a" * 20_000), "the regex has 20000 bytes; at most 16384 are allowed"),
    (Constraint(grammar="start: " + " ".join(['"x"'] * 30_000)),
     "the grammar has 120006 bytes; at most 65536"),
    (Constraint(grammar="root ::= r0\n" + "\n".join(f'r{i} ::= "x"' for i in range(1500))),
     "the grammar has 1501 rules; at most 1000 are allowed"),
    (Constraint(json={"const": "x" * 70_000}), "the JSON schema has 70013 bytes; at most 65536"),
    (Constraint(json=json.dumps({"const": "x" * 70_000})), "the JSON schema has 70013 bytes"),
    (Constraint(json={"enum": json.loads("[" * 130 + "]" * 130)}),
     "the JSON schema is nested more than 128 levels"),
])
def test_every_kind_of_constraint_has_a_size_limit(constraint, message):
    with pytest.raises(ValueError) as e:
        check_limits(constraint)
    assert str(e.value).startswith(message), str(e.value)


def test_ordinary_constraints_pass_the_limits():
    tree = {"$defs": {"node": {"type": "object", "properties": {
        "value": {"type": "integer"},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
        "$ref": "#/$defs/node"}                 # recursive: the cycle is not followed twice
    json_lark = textwrap.dedent('''
        start: value
        ?value: object | array | STRING | NUMBER | "true" | "false" | "null"
        array: "[" [value ("," value)*] "]"
        object: "{" [pair ("," pair)*] "}"
        pair: STRING ":" value
        STRING: /"[^"]*"/
        NUMBER: /-?[0-9]+/
    ''')
    chain = "start: r0\n" + "\n".join(f'r{i}: r{i + 1} "x"' for i in range(150)) + '\nr150: "a"'
    for c in (Constraint(json=tree), Constraint(grammar=json_lark), Constraint(grammar=chain),
              Constraint(choice=["はい", "いいえ"] * 500), Constraint(regex=r"[0-9]{3}-[0-9]{4}"),
              Constraint(json_object=True)):
        check_limits(c)
    assert LIMITS.max_grammar_rules == 1000 and LIMITS.max_json_schema_depth == 128


@pytest.fixture(scope="module")
def llm():
    return LLM(max_num_seqs=2)       # the shipped default model


def accepts(llm, constraint: Constraint, text: str) -> bool:
    """Does the compiled constraint take `text` (as the model's tokens), then allow the end?"""
    m = llm.engine.grammars.matcher(constraint)
    try:
        for t in llm.tokenizer.encode(text):
            m.accept(t)
        m.allowed()                  # the mask pool has taken the tokens (a refused one raises)
    except ValueError:
        return False
    return m.matcher.is_accepting()


PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}


def test_an_object_schema_without_additional_properties_allows_no_invented_keys(llm):
    """Before: '{"name":"猫","age":3,"x":1}' matched PERSON, and the model added keys until
    max_tokens (the client round's D2: LangChain's function_calling returned None). After: only
    the declared keys, as vLLM with xgrammar."""
    person = Constraint(json=PERSON)
    assert accepts(llm, person, '{"name":"猫","age":3}')
    assert not accepts(llm, person, '{"name":"猫","age":3,"x":1}')
    nested = Constraint(json={"type": "object", "properties": {"owner": PERSON},
                              "required": ["owner"]})
    assert not accepts(llm, nested, '{"owner":{"name":"猫","age":3,"x":1}}')
    in_defs = Constraint(json=json.dumps({"$defs": {"p": PERSON}, "type": "array",
                                          "items": {"$ref": "#/$defs/p"}}))
    assert not accepts(llm, in_defs, '[{"name":"猫","age":3,"x":1}]')


def test_additional_properties_given_by_the_schema_are_kept(llm):
    open_person = Constraint(json={**PERSON, "additionalProperties": True})
    assert accepts(llm, open_person, '{"name":"猫","age":3,"x":1}')
    typed = {**PERSON, "additionalProperties": {"type": "integer"}}
    assert accepts(llm, Constraint(json=typed), '{"name":"猫","age":3,"x":1}')
    assert not accepts(llm, Constraint(json=typed), '{"name":"猫","age":3,"x":"y"}')
    assert accepts(llm, Constraint(json={"type": "object"}), '{"x":1}')    # no properties: any
    assert accepts(llm, Constraint(json_object=True), '{"x":1}')
    both = {"allOf": [{"properties": {"a": {"type": "integer"}}},
                      {"properties": {"b": {"type": "integer"}}}]}
    assert accepts(llm, Constraint(json=both), '{"a":1,"b":2}')          # allOf's members stay open
