"""Request state has one owner (shared/ARCHITECTURE.md; vLLM's Scheduler.update_from_output).

Two checks over the source of minimal_engine/, by AST:

- a Sequence's fields (the names Sequence.__init__ and RequestMetrics declare) are written only by
  the Sequence itself and by its owner, the Scheduler (scheduler.py), whose BlockManager keeps the
  block table. A write is an assignment, augmented assignment or del of `x.field` (or of anything
  under it, `x.field[i]`, `x.metrics.first_token_time`), or a mutating call (`x.token_ids.append`),
  also through a local alias (`m = seq.metrics; m.num_preemptions += 1`);
- no code sets an attribute on another object (`runner.paged_decode = True`, `setattr(x, ...)`):
  an object is configured through its constructor and changed through its own methods. The few
  exceptions are listed below with the reason each is not a collaborator set from outside.

Each check is also run on planted violations, so that it is known to find them.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "minimal_engine"
MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update",
            "setdefault", "popitem", "add", "discard", "appendleft", "extendleft", "popleft"}
# file -> the Sequence fields it may write (None: all of them): the owner and its block manager
OWNERS = {"engine/scheduler.py": None, "engine/block_manager.py": {"block_table"}}
# (file, object): attributes set on an object other than self there, each with why it is allowed;
# also `object.attr` or `object.x.attr`.
ALLOWED = {
    ("bench/online.py", "m"): "fills its own RequestResult record as a request runs",
    ("serve/app.py", "app.state"): "Starlette's documented place for an app's shared objects",
    ("serve/app.py", "self.server"): "asks its own uvicorn server to exit (uvicorn's API)",
    ("features/quantization.py", "parent"): "swaps the Linears of a model no engine holds yet",
    ("model/cpu_linears.py", "parent"): "swaps the Linears of a model no engine holds yet",
    ("features/tensor_parallel/sharding.py", "attn"): "shards a model no engine holds yet",
    ("features/tensor_parallel/sharding.py", "mlp"): "shards a model no engine holds yet",
    ("features/tensor_parallel/sharding.py", "model"): "shards a model no engine holds yet",
    ("features/tensor_parallel/comm.py", "opts"): "the torch.distributed options object it builds",
    ("model/llama.py", "self.lm_head"): "ties lm_head's weight to the embedding, in __init__",
    ("hooks.py", "sampler"): "names a wrapper function after the learner's (as functools.wraps)",
    ("tools/gguf_vocab.py", "tok"): "a tool off the request path: its own GGUF vocabulary record",
    ("tools/train_data.py", "tok"): "a tool off the request path: the tokenizer it trains",
    ("tools/train.py", "rng"): "a tool off the request path: restores numpy's generator state",
}


def _allowed(rel: str, holder: str) -> bool:
    return any(rel == f and (holder == o or holder.startswith(o + ".")) for f, o in ALLOWED)


def sequence_fields() -> set[str]:
    """The attribute names Sequence.__init__ assigns and RequestMetrics (metrics.py) declares."""
    names, classes = set(), []
    for name in ("sequence.py", "metrics.py"):
        tree = ast.parse((ENGINE / "engine" / name).read_text())
        classes += [n for n in tree.body if isinstance(n, ast.ClassDef)]
    for cls in classes:
        if cls.name == "Sequence":
            init = next(f for f in cls.body
                        if isinstance(f, ast.FunctionDef) and f.name == "__init__")
            names |= {t.attr for n in ast.walk(init) if isinstance(n, (ast.Assign, ast.AnnAssign))
                      for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                      if isinstance(t, ast.Attribute)}
        elif cls.name == "RequestMetrics":
            names |= {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)}
    return names


def _chain(node) -> list:
    """x.a[i].b -> [x, "a", "b"] (subscripts dropped); the base is an AST node."""
    parts = []
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
        node = node.value
    return [node] + parts[::-1]


def _is_self(node) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _written(tree) -> list[tuple[int, ast.AST]]:
    """(line, target) for every assignment, del and mutating call in tree."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign):
            targets = [e for t in n.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign)):
            targets = [n.target]
        elif isinstance(n, ast.Delete):
            targets = n.targets
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
              and n.func.attr in MUTATORS):
            targets = [n.func.value]
        else:
            continue
        out += [(n.lineno, t) for t in targets]
    return out


def sequence_writes(source: str, allowed: set[str] | None = frozenset()) -> list[tuple]:
    """(line, object, target) of each write to a Sequence field (other than those in `allowed`;
    None allows all) in source."""
    if allowed is None:
        return []
    fields, found = sequence_fields() - set(allowed), []
    for func in [n for n in ast.walk(ast.parse(source))
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module))]:
        aliases = set()         # local names bound to a field of another object: m = seq.metrics
        for n in ast.walk(func) if not isinstance(func, ast.Module) else ():
            if isinstance(n, ast.Assign) and isinstance(n.value, (ast.Attribute, ast.Subscript)):
                chain = _chain(n.value)
                if set(chain[1:]) & fields and not (_is_self(chain[0]) and len(chain) == 2):
                    aliases |= {t.id for t in n.targets if isinstance(t, ast.Name)}
        for line, target in _written(func):
            chain = _chain(target)
            base, attrs = chain[0], chain[1:]
            via_alias = isinstance(base, ast.Name) and base.id in aliases and attrs
            on_other = set(attrs) & fields and not (_is_self(base) and len(attrs) == 1)
            if via_alias or on_other:
                found.append((line, _holder(target, fields), ast.unparse(target)))
    return sorted(set(found))


def _holder(target, fields: set[str]) -> str:
    """The object whose field target writes: seq for seq.token_ids[0], m for m.first_token_time."""
    node, holder = target, None
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute) and node.attr in fields:
            holder = node.value
        node = node.value
    return ast.unparse(holder if holder is not None else node)


def outside_sets(source: str) -> list[tuple[int, str]]:
    """(line, object) for every attribute set on an object other than self: `obj.attr = ...`
    (a Sequence's fields are the first check's)."""
    found, fields = [], sequence_fields()
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "setattr":
            if n.args and not _is_self(n.args[0]):
                found.append((n.lineno, ast.unparse(n.args[0])))
            continue
        if not isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            continue
        targets = n.targets if isinstance(n, (ast.Assign, ast.Delete)) else [n.target]
        for t in (e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])):
            if (isinstance(t, ast.Attribute) and not _is_self(t.value)
                    and not set(_chain(t)[1:]) & fields):
                found.append((n.lineno, ast.unparse(t.value)))
    return found


def _sources():
    for f in sorted(ENGINE.rglob("*.py")):
        yield f.relative_to(ENGINE).as_posix(), f.read_text()


def test_only_the_scheduler_writes_a_sequences_fields():
    wrong = [f"{rel}:{line}: {text}" for rel, src in _sources() if rel != "engine/sequence.py"
             for line, holder, text in sequence_writes(src, OWNERS.get(rel, set()))
             if not _allowed(rel, holder)]
    assert not wrong, f"Sequence fields written outside its owner (Scheduler): {wrong}"


def test_sequence_writes_only_its_own_fields():
    hits = [h for h in sequence_writes((ENGINE / "engine" / "sequence.py").read_text())]
    assert not hits, hits


def test_no_attribute_is_set_on_another_object():
    wrong = [f"{rel}:{line}: {obj}.… = …" for rel, src in _sources()
             for line, obj in outside_sets(src) if not _allowed(rel, obj)]
    assert not wrong, ("attributes set from outside (give them at construction or through a "
                       "method): " + "; ".join(wrong))


def test_the_checks_find_planted_violations():
    planted = '''
def step(engine, seq, s):
    seq.token_ids.append(5)
    s.seq.num_computed_tokens += 1
    seq.detokenizer = None
    del seq.token_ids[-2:]
    m = seq.metrics
    m.first_token_time = 0.0
    seq.prompt_logprobs[0] = None

class Engine:
    def __init__(self, runner):
        self.runner = runner
        self.runner.paged_decode = True
        setattr(runner, "graphs", None)
'''
    hits = sequence_writes(planted)
    assert [(line, holder) for line, holder, _ in hits] == [
        (3, "seq"), (4, "s.seq"), (5, "seq"), (6, "seq"), (8, "m"), (9, "seq")], hits
    assert [obj for _, obj in outside_sets(planted)] == ["self.runner", "runner"]
    clean = '''
class Sequence:
    def __init__(self):
        self.token_ids = []
        self.metrics = None

    def grow(self, t):
        self.token_ids.append(t)

def read(seq):
    return seq.token_ids[-1], len(seq.block_table)
'''
    assert sequence_writes(clean) == [] and outside_sets(clean) == []
    assert sequence_writes("def f(seq):\n    seq.block_table.append(1)\n", {"block_table"}) == []
    assert sequence_writes("def f(seq):\n    seq.status = 1\n", {"block_table"}) == [
        (2, "seq", "seq.status")]
