"""Loop-private scalars: a local declared at the top of the kernel (C89 style) but used only as a per-iteration
temporary is declared inside the loop instead.

Why: the remaps (``remap``, ``remap_items``, ``remap_columns``) read every scalar a loop writes and that is
declared outside it as a value carried from one iteration to the next, and decline unless it is a sum or a
min/max. Benchmark suites written in C89 style declare all locals first (``int j, nb; float3 normal;`` and then
``for (j = 0; ...) { nb = ...; normal.x = ...; }``): nothing flows between their iterations, but the scope says
otherwise. Declaring the local inside the loop says what the code does, and the rules then see a loop-local.

The decision is a dataflow question on the kernel's tree, answered for one variable ``x`` and one loop ``L``:

* every mention of ``x`` (after its declaration) lies in the bodies of loops that each privatize it: a mention
  anywhere else (before or after them, in a loop's header) keeps the declaration where it is;
* in ``L``'s body, ``x`` is *definitely written before it is read on every path* through one iteration: a read
  needs a write before it on every path (both arms of an ``if``, or before it; a nested loop's body may run zero
  times, so what it writes does not count after it; a ``continue``/``break``/``return`` ends the path). A struct
  is followed member by member: ``x.m`` needs ``x`` or ``x.m`` written, a read of the whole ``x`` needs ``x``
  written or each member of a known vector type (``float3``: ``x``, ``y``, ``z``);
* ``x`` is not address-taken, bound to a reference, written inside a larger expression, declared twice, an
  array, ``static``/``__shared__``/``const``, and the loop holds no ``goto``, label or ``switch`` (paths the
  walk does not follow).

The declaration then moves: the first write ``x = e;`` becomes ``T x = e;`` when every mention of ``x`` follows
it in the block that holds it; otherwise ``T x;`` opens the loop's body (a struct first written member-wise).
The outer declarator goes (a literal or name as its value is read by nobody). All eligible locals move in one
step, each edit in the user's own text.
"""

from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from ...cuda.tree import misparsed_assignment, unparen, walk
from .passes import Changed, Kernel, PassEnv, Result, Skipped, declared_names, idents, register, splice, statements

_LOOPS = ("for_statement", "while_statement", "do_statement", "for_range_loop")

#: the members of CUDA's vector types (``float3``: x, y, z), by the count in the type's name
_VECTOR_BASES = ("char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "longlong", "ulonglong",
                 "float", "double", "half", "bfloat16")
_MEMBERS = ("x", "y", "z", "w")

#: the state of "which parts of x are written" where the path cannot get (after a ``continue``): the merge's unit
_UNREACHABLE = frozenset({"<unreachable>"})
_WHOLE = "*"


class _Fail(Exception):
    """``x`` is not private to the loop: why, and the 1-based line."""

    def __init__(self, reason: str, line: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.line = line


def vector_members(type_: str, typedefs: dict[str, str]) -> tuple[str, ...]:
    """The members of a CUDA vector type (``float3`` -> x, y, z; a typedef of one resolved), else ()."""
    t = " ".join(type_.replace("const", "").split())
    for _ in range(4):
        if t in typedefs and typedefs[t] != t:
            t = typedefs[t]
    for base in _VECTOR_BASES:
        rest = t[len(base):] if t.startswith(base) else ""
        if rest in ("1", "2", "3", "4"):
            return _MEMBERS[:int(rest)]
    return ()


@dataclass
class _Flow:
    """The walk over one iteration of a loop: which parts of ``x`` are definitely written at each point."""

    k: Kernel
    name: str
    members: tuple[str, ...]

    def whole(self, state: frozenset[str]) -> bool:
        return state is _UNREACHABLE or _WHOLE in state or (bool(self.members) and set(self.members) <= state)

    def has(self, state: frozenset[str], member: str | None) -> bool:
        if member is None:
            return self.whole(state)
        return self.whole(state) or member in state

    @staticmethod
    def merge(a: frozenset[str], b: frozenset[str]) -> frozenset[str]:
        if a is _UNREACHABLE:
            return b
        if b is _UNREACHABLE:
            return a
        return a & b

    def target(self, left: Node) -> str | None:
        """What an assignment's left side writes of ``x``: ``*`` (all of it), a member, or None (not x)."""
        t = unparen(left)
        if t.type == "identifier" and self.k.t(t) == self.name:
            return _WHOLE
        if t.type == "field_expression":
            obj, op, field = (t.child_by_field_name(f) for f in ("argument", "operator", "field"))
            if obj is not None and op is not None and field is not None and self.k.t(op) == "." \
                    and unparen(obj).type == "identifier" and self.k.t(unparen(obj)) == self.name:
                return self.k.t(field)
        return None

    def reads(self, node: Node, state: frozenset[str]) -> None:
        """Every mention of ``x`` in the expression ``node`` is a read (no write of ``x`` may hide in it)."""
        for n in walk(node, ("assignment_expression",)):
            left = n.child_by_field_name("left")
            if left is not None and not misparsed_assignment(n, self.k.data) and self.target(left) is not None:
                raise _Fail(f"`{self.name}` is written inside an expression (line {self.k.line(n)})", self.k.line(n))
        for u in idents(node, self.k.data, self.name):
            p = u.parent
            member = None
            if p is not None and p.type == "field_expression" and p.child_by_field_name("argument") == u:
                op, field = p.child_by_field_name("operator"), p.child_by_field_name("field")
                if op is not None and field is not None and self.k.t(op) == ".":
                    member = self.k.t(field)
            if not self.has(state, member):
                what = f"`{self.name}.{member}`" if member else f"`{self.name}`"
                raise _Fail(f"{what} is read (line {self.k.line(u)}) before the iteration writes it", self.k.line(u))

    def expression(self, e: Node, state: frozenset[str]) -> frozenset[str]:
        e = unparen(e)
        if e.type == "comma_expression":
            for c in e.named_children:
                state = self.expression(c, state)
            return state
        if e.type == "assignment_expression" and not misparsed_assignment(e, self.k.data):
            left, op, right = (e.child_by_field_name(f) for f in ("left", "operator", "right"))
            assert left is not None and op is not None and right is not None
            part = self.target(left)
            if part is not None:
                self.reads(right, state)
                if self.k.t(op) == "=":
                    return state if state is _UNREACHABLE else state | {part}
                if not self.has(state, None if part == _WHOLE else part):  # ``x += e`` reads x first
                    raise _Fail(f"`{self.k.t(unparen(left))}` is updated (line {self.k.line(e)}) before the "
                                "iteration writes it", self.k.line(e))
                return state
        self.reads(e, state)
        return state

    def statement(self, s: Node, state: frozenset[str]) -> frozenset[str]:
        t = s.type
        if t in ("comment", "preproc_call", ";") or (not idents(s, self.k.data, self.name) and t not in (
                "continue_statement", "break_statement", "return_statement", "compound_statement",
                "if_statement", "goto_statement", "labeled_statement", "switch_statement")):
            return state
        if t == "compound_statement":
            for c in statements(s):
                state = self.statement(c, state)
            return state
        if t == "expression_statement":
            return self.expression(s.named_children[0], state) if s.named_child_count else state
        if t == "declaration":
            self.reads(s, state)
            return state
        if t in ("continue_statement", "break_statement"):
            return _UNREACHABLE
        if t == "return_statement":
            self.reads(s, state)
            return _UNREACHABLE
        if t == "if_statement":
            cond, then, alt = (s.child_by_field_name(f) for f in ("condition", "consequence", "alternative"))
            if cond is not None:
                self.reads(cond, state)
            a = self.statement(then, state) if then is not None else state
            b = state
            if alt is not None:
                for c in alt.named_children:
                    b = self.statement(c, b)
            return self.merge(a, b)
        if t in ("for_statement", "while_statement", "for_range_loop"):
            body = s.child_by_field_name("body")
            init = s.child_by_field_name("initializer")
            head = state
            if init is not None:
                head = self.statement(init, head) if init.type == "declaration" else self.expression(init, head)
            for f in ("condition", "right"):
                part = s.child_by_field_name(f)
                if part is not None:
                    self.reads(part, head)
            inner = self.statement(body, head) if body is not None else head
            upd = s.child_by_field_name("update")
            if upd is not None:
                # a ``continue`` reaches the update with what was written before it: read it as the head's
                self.reads(upd, head if _jumps(body, ("continue_statement",)) or inner is _UNREACHABLE else inner)
            return head  # the body may run zero times: what it writes is not written after the loop
        if t == "do_statement":
            body, cond = s.child_by_field_name("body"), s.child_by_field_name("condition")
            inner = self.statement(body, state) if body is not None else state
            # a ``continue`` jumps to the condition with less written than the body's end: read it as unknown
            if cond is not None and idents(cond, self.k.data, self.name):
                raise _Fail(f"`{self.name}` is read in the condition of a `do` loop (line {self.k.line(s)})",
                            self.k.line(s))
            return state if _jumps(body, ("break_statement", "continue_statement")) else inner
        if t == "attributed_statement":
            for c in s.named_children:
                if c.type != "attribute_declaration":
                    state = self.statement(c, state)
            return state
        raise _Fail(f"the walk does not follow a `{t}` that names `{self.name}` or may jump (line {self.k.line(s)})",
                    self.k.line(s))


def _jumps(body: Node | None, kinds: tuple[str, ...]) -> bool:
    """A ``break``/``continue`` (of ``kinds``) that belongs to ``body``'s loop (not to a loop nested in it)."""
    if body is None:
        return False
    cut = ("for_statement", "while_statement", "do_statement", "for_range_loop", "switch_statement")
    return next(walk(body, kinds, cut=lambda n: n is not body and n.type in cut), None) is not None


@dataclass(frozen=True)
class _Move:
    """One local made private to one loop: the edit at the loop's body (the declaration moved there)."""

    loop: Node
    #: the statement ``x = e;`` that becomes ``T x = e;`` (None: ``T x;`` opens the body)
    first: Node | None


def _declarator_type(decl: Node, d: Node, k: Kernel) -> tuple[str, Node] | None:
    """The type a declarator gives its name (``float *p`` -> ``float *``) and the name's node, for a plain
    variable or a pointer to one (no array, reference or function)."""
    tnode = decl.child_by_field_name("type")
    if tnode is None:
        return None
    base = k.data[decl.start_byte:tnode.end_byte].decode("utf-8").strip()
    cur = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
    stars = ""
    while cur is not None and cur.type == "pointer_declarator":
        stars += "*"
        cur = cur.child_by_field_name("declarator")
    if cur is None or cur.type != "identifier":
        return None
    return (f"{base} {stars}" if stars else base), cur


def _outermost_loop(n: Node, scope: Node) -> Node | None:
    found = None
    cur = n.parent
    while cur is not None and cur != scope:
        if cur.type in _LOOPS:
            found = cur
        cur = cur.parent
    return found


def _inside(n: Node, outer: Node) -> bool:
    return outer.start_byte <= n.start_byte and n.end_byte <= outer.end_byte


def _plan(k: Kernel, env: PassEnv, decl: Node, d: Node, name: str, type_: str
          ) -> list[_Move] | _Fail | None:
    """The loops that privatize ``name`` (every mention in one of their bodies), or why not (None: no loop)."""
    scope = decl.parent
    assert scope is not None
    # from the declarator on: ``int a, b = a;`` names ``a`` in its own declaration (outside any loop)
    uses = [u for u in idents(scope, k.data, name) if u.start_byte >= d.end_byte]
    if not uses:
        return None
    groups: dict[int, tuple[Node, list[Node]]] = {}
    for u in uses:
        top = _outermost_loop(u, scope)
        if top is None:
            return _Fail(f"`{name}` is used outside a loop (line {k.line(u)})", k.line(u))
        groups.setdefault(top.id, (top, []))[1].append(u)
    members = vector_members(type_, {**env.aliases, **env.typedefs})
    moves: list[_Move] = []
    for top, group in groups.values():
        # the innermost loop holding every mention first, then the loops around it
        chain: list[Node] = []
        cur: Node | None = group[0].parent
        while cur is not None and cur != scope:
            if cur.type in _LOOPS and all(_inside(u, cur) for u in group):
                chain.append(cur)
            cur = cur.parent
        why: _Fail | None = None
        for loop in chain:
            body = loop.child_by_field_name("body")
            if body is None or body.type != "compound_statement" or not all(_inside(u, body) for u in group):
                why = why or _Fail(f"`{name}` is named in the header of the loop at line {k.line(loop)}",
                                   k.line(loop))
                continue
            jump = next(walk(body, ("goto_statement", "labeled_statement", "switch_statement")), None)
            if jump is not None:
                why = why or _Fail(f"a `{k.t(jump).split()[0]}` in the loop at line {k.line(loop)}", k.line(jump))
                continue
            try:
                _Flow(k, name, members).statement(body, frozenset())
            except _Fail as e:
                why = why or e
                continue
            moves.append(_Move(loop, _first_write(k, name, body, group)))
            break
        else:
            return why or _Fail(f"`{name}` is not private to a loop", k.line(top))
    return moves


def _first_write(k: Kernel, name: str, body: Node, group: list[Node]) -> Node | None:
    """The statement ``name = e;`` that may become the declaration: every mention of ``name`` follows it in the
    block that holds it (so each pass through the block writes it first)."""
    first = min(group, key=lambda u: u.start_byte)
    a = first.parent
    st = a.parent if a is not None else None
    if a is None or st is None or a.type != "assignment_expression" or a.child_by_field_name("left") != first \
            or st.type != "expression_statement" or st.parent is None or st.parent.type != "compound_statement":
        return None
    op = a.child_by_field_name("operator")
    right = a.child_by_field_name("right")
    if op is None or right is None or k.t(op) != "=" or idents(right, k.data, name):
        return None
    block = st.parent
    if not _inside(block, body) or not all(_inside(u, block) for u in group):
        return None
    return st


def _declarations(k: Kernel) -> list[tuple[Node, Node, str, str]]:
    """(declaration, declarator, name, type) of every plain local a pass may move."""
    out: list[tuple[Node, Node, str, str]] = []
    for decl in walk(k.body, ("declaration",)):
        if decl.parent is None or decl.parent.type != "compound_statement":
            continue
        if any(c.type in ("storage_class_specifier", "type_qualifier", "attribute_specifier", "ms_declspec_modifier")
               for c in decl.children) or "__shared__" in k.t(decl).split("(")[0].split():
            continue
        for d in decl.children_by_field_name("declarator"):
            got = _declarator_type(decl, d, k)
            if got is None:
                continue
            type_, nm = got
            if d.type == "init_declarator":
                value = d.child_by_field_name("value")
                if value is None or unparen(value).type not in ("number_literal", "identifier", "true", "false"):
                    continue
            out.append((decl, d, k.t(nm), type_))
    return out


@register("loop_private_scalars",
          "`T x;` declared outside a loop, every mention of x in loop bodies where each iteration writes it before "
          "reading it on every path; not address-taken, not used outside those loops")
def loop_private_scalars(k: Kernel, env: PassEnv) -> Result:
    counts: dict[str, int] = {}
    for n in walk(k.fn, ("declaration", "parameter_declaration")):
        for nm in declared_names(n, k.data):
            counts[nm] = counts.get(nm, 0) + 1
    taken = {k.t(unparen(a)) for p in walk(k.fn, ("pointer_expression",)) if k.t(p).lstrip().startswith("&")
             and (a := p.child_by_field_name("argument")) is not None}
    taken |= {k.t(unparen(v)) for d in walk(k.fn, ("init_declarator",))
              if (rd := d.child_by_field_name("declarator")) is not None and rd.type == "reference_declarator"
              and (v := d.child_by_field_name("value")) is not None}
    moved: dict[int, list[Node]] = {}  # declaration -> declarators that go
    inserts: dict[int, list[str]] = {}  # body's ``{`` -> declarations opening it
    edits: list[tuple[int, int, str]] = []
    names: list[str] = []
    skipped: Skipped | None = None
    decls: dict[int, Node] = {}
    for decl, d, name, type_ in _declarations(k):
        if counts.get(name, 0) != 1:
            continue
        if any(name == t or t.startswith(name + ".") for t in taken):
            continue
        plan = _plan(k, env, decl, d, name, type_)
        if plan is None:
            continue
        if isinstance(plan, _Fail):
            if any(u.type in _LOOPS for u in walk(decl.parent or decl)) and skipped is None \
                    and "used outside a loop" not in plan.reason:
                skipped = Skipped(f"`{name}` stays outside the loop: {plan.reason}", plan.line)
            continue
        decls[decl.id] = decl
        moved.setdefault(decl.id, []).append(d)
        names.append(name)
        for m in plan:
            if m.first is not None:
                edits.append((m.first.start_byte, m.first.start_byte, type_ if type_.endswith("*") else type_ + " "))
            else:
                body = m.loop.child_by_field_name("body")
                assert body is not None
                inserts.setdefault(body.start_byte + 1, []).append(f"{type_} {name};")
    if not names:
        return skipped
    for at, texts in inserts.items():
        pad = _indent_after(k, at)
        edits.append((at, at, "".join(f"\n{pad}{t}" for t in texts)))
    gone_statements: list[Node] = []
    for did, gone in moved.items():
        decl = decls[did]
        rest = [x for x in decl.children_by_field_name("declarator") if all(x != g for g in gone)]
        if rest:
            tnode = decl.child_by_field_name("type")
            assert tnode is not None
            head = k.data[decl.start_byte:tnode.end_byte].decode("utf-8")
            edits.append((decl.start_byte, decl.end_byte, f"{head} {', '.join(k.t(x) for x in rest)};"))
        else:
            gone_statements.append(decl)
    edits += _removals(k, gone_statements)
    shown = ", ".join(f"`{n}`" for n in names)
    return Changed(splice(k.data, edits), f"{shown} declared in the loop that writes it before reading it")


def _indent_after(k: Kernel, at: int) -> str:
    """The indentation of the first line after byte ``at`` that holds code (a body's first statement)."""
    for line in k.data[at:].decode("utf-8").split("\n")[1:]:
        if line.strip():
            return line[:len(line) - len(line.lstrip())]
    return "    "


def _removals(k: Kernel, gone: list[Node]) -> list[tuple[int, int, str]]:
    """The edits that remove whole statements; a line left with nothing but blanks goes with them."""
    out: list[tuple[int, int, str]] = []
    by_line: dict[int, list[Node]] = {}
    for st in gone:
        by_line.setdefault(k.data.rfind(b"\n", 0, st.start_byte) + 1, []).append(st)
    for start, sts in by_line.items():
        end = k.data.find(b"\n", start)
        end = len(k.data) if end < 0 else end
        rest = bytearray(k.data[start:end])
        for st in sts:
            rest[st.start_byte - start:st.end_byte - start] = b" " * (st.end_byte - st.start_byte)
        if all(st.end_byte <= end for st in sts) and not bytes(rest).strip():
            out.append((start, min(end + 1, len(k.data)), ""))
        else:
            out += [(st.start_byte, st.end_byte, "") for st in sts]
    return out
