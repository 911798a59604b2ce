"""WF106: a block barrier that not every thread of the block reaches (a correctness hazard).

``__syncthreads()`` (and ``__syncthreads_count/and/or``, cooperative groups' ``this_thread_block().sync()``)
waits until *every* thread of the block arrives. CUDA allows it in conditional code only when the
condition evaluates identically across the whole block; otherwise the behaviour is undefined — in
practice a hang, or threads that silently pair with the wrong barrier and read stale shared memory. This
analyzer reports a barrier reached on a thread-dependent path:

- inside an ``if``/``switch``/``?:``/``&&``/``||`` whose condition depends on the thread;
- inside a loop whose condition depends on the thread (``for (i = threadIdx.x; i < n; i += blockDim.x)``:
  threads run different numbers of iterations), or that some threads leave early (a ``break``, ``continue``
  or ``return`` under a thread-dependent condition);
- after a ``return`` some threads take (``if (i >= n) return;`` before a later ``__syncthreads()``): the
  returned threads never arrive. Reported at the ``return``.

"Depends on the thread" is a taint analysis over the kernel body: sources are ``threadIdx``, lane ids,
values that differ per thread (atomics' results, shuffles, votes, ``clock``), macros and helpers of this
file that use them, and loads whose index depends on the thread (data loaded per thread). Taint flows
through locals (every definition, to a fixpoint) and through control: a local assigned under a
thread-dependent condition is itself thread-dependent. ``blockIdx``, ``blockDim``, ``gridDim``, kernel
parameters, constants and loads at a uniform index are uniform: a branch on them is taken by the whole
block together (``if (blockIdx.x >= rows) return;`` before a barrier is fine). Warp-level barriers
(``__syncwarp``) are out of scope.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from tree_sitter import Node

from ..context import KernelContext
from ..findings import Finding, Severity, define, make
from ..lanes import VARYING_CALLS, call_name, enclosing, inside, text_of, threads
from . import analyzer

define("WF106", "barrier in thread-dependent control flow", Severity.WARNING, "source", "sync_hazard")

BARRIERS = frozenset({"__syncthreads", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or"})
#: block-wide reductions: their result is the same in every thread of the block
_UNIFORM_RESULT = frozenset({"__syncthreads_count", "__syncthreads_and", "__syncthreads_or"})
_LOOPS = ("for_statement", "while_statement", "do_statement", "for_range_loop")
_BRANCHES = ("if_statement", "switch_statement", "conditional_expression", "binary_expression")


@dataclass
class _Taint:
    """Which locals differ between the threads of a block, and why (the first source found)."""

    ctx: KernelContext
    varying: dict[str, str] = field(default_factory=dict)
    exit_memo: dict[int, list[Node]] = field(default_factory=dict)

    def run(self) -> None:
        th = threads(self.ctx)
        self.locals = set(th.locals)
        self.varying_names = th.varying_names
        self.block_vars = self._thread_block_vars()
        # each definition depends on: its value, and the conditions that control whether it runs
        deps: list[tuple[str, list[Node]]] = []
        body = self.ctx.body
        for name, loc in th.locals.items():
            for d in loc.defs:
                if d.op == "param":
                    continue
                nodes: list[Node] = [] if d.value is None else [d.value]
                if d.op not in ("init", "=", "elem") or d.value is None:
                    nodes.append(d.node)  # x += e, x++: depends on x's other definitions too
                nodes.extend(self.controls(d.node, body))
                deps.append((name, nodes))
        # Worklist propagation: a definition becomes thread-dependent when it has a source of its own
        # (threadIdx, an atomic's result, ...) or mentions a local that is; each is examined once per cause.
        readers: dict[str, list[int]] = {}
        for i, (_, nodes) in enumerate(deps):
            for n in nodes:
                for ident in th.within(n, "identifier"):
                    nm = th.name(ident)
                    if nm in self.locals:
                        lst = readers.setdefault(nm, [])
                        if not lst or lst[-1] != i:
                            lst.append(i)
        queue: list[str] = []
        for name, nodes in deps:
            if name not in self.varying and self._mark(name, nodes):
                queue.append(name)
        while queue:
            u = queue.pop()
            for i in readers.get(u, ()):
                name, nodes = deps[i]
                if name not in self.varying and self._mark(name, nodes):
                    queue.append(name)

    def _mark(self, name: str, nodes: list[Node]) -> bool:
        for n in nodes:
            why = self.why(n)
            if why is not None:
                self.varying[name] = _root(why)
                return True
        return False

    def _thread_block_vars(self) -> set[str]:
        """Locals holding ``this_thread_block()`` (whose ``.sync()`` is a block barrier)."""
        out: set[str] = set()
        ctx = self.ctx
        for n in threads(ctx).nodes("declaration"):
            if n.type == "declaration":
                t = n.child_by_field_name("type")
                is_block = t is not None and ctx.text(t).split("::")[-1].strip() == "thread_block"
                for d in n.children_by_field_name("declarator"):
                    v = d.child_by_field_name("value") if d.type == "init_declarator" else None
                    nm = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
                    if nm is None or nm.type != "identifier":
                        continue
                    if is_block or (v is not None and v.type == "call_expression"
                                    and call_name(ctx, v) == "this_thread_block"):
                        out.add(ctx.text(nm))
        return out

    def controls(self, node: Node, stop: Node | None) -> list[Node]:
        """Conditions deciding whether ``node`` runs (enclosing branches, loops and early exits)."""
        out: list[Node] = []
        child = node
        cur = node.parent
        while cur is not None and cur != stop:
            c = _condition_for(cur, child)
            if c is not None:
                out.append(c)
            if cur.type in _LOOPS:
                out.extend(self.exits(cur))
            child, cur = cur, cur.parent
        return out

    def exits(self, loop: Node) -> list[Node]:
        """Conditions under which some threads leave ``loop`` early (break/continue/return inside it)."""
        if loop.id in self.exit_memo:
            return self.exit_memo[loop.id]
        out: list[Node] = []
        self.exit_memo[loop.id] = out
        th = threads(self.ctx)
        stmts = [n for t in ("break_statement", "continue_statement", "return_statement", "goto_statement")
                 for n in th.within(loop, t)]
        for n in stmts:
            if _owning_loop(n) == loop:
                child = n
                cur = n.parent
                while cur is not None and cur != loop:
                    c = _condition_for(cur, child)
                    if c is not None:
                        out.append(c)
                    child, cur = cur, cur.parent
        return out

    def why(self, node: Node) -> str | None:
        """Why an expression differs between threads (a short reason), or None when it is uniform.

        Looks inside ``node`` with the model's per-type index (no tree walk): thread ids first, then calls
        whose result differs per thread, loads at a per-thread index, thread-dependent locals and macros.
        The arguments of ``__syncthreads_or(pred)`` and friends do not count: their result is block-wide.
        """
        ctx = self.ctx
        th = threads(ctx)
        calls = th.within(node, "call_expression")
        skip = [c for c in calls if call_name(ctx, c) in _UNIFORM_RESULT]

        def counted(n: Node) -> bool:
            return not any(inside(n, c) or n == c for c in skip)

        for f in th.within(node, "field_expression"):
            arg = f.child_by_field_name("argument")
            if arg is not None and arg.type == "identifier" and th.name(arg) == "threadIdx" and counted(f):
                return text_of(ctx, f)
        for c in calls:
            name = call_name(ctx, c)
            if name in VARYING_CALLS and counted(c):
                return f"`{name}`, different in every thread"
        for sub in th.within(node, "subscript_expression"):
            if not counted(sub):
                continue
            idx = sub.child_by_field_name("indices") or sub.child_by_field_name("index")
            if idx is not None and self.why(idx) is not None:
                return f"data loaded per thread (`{text_of(ctx, sub)}`)"
            base = sub.child_by_field_name("argument")
            if base is not None and base.type == "identifier":
                bname = th.name(base)
                loc = th.locals.get(bname)
                if loc is not None and not loc.shared and not loc.pointer and loc.array_dims \
                        and bname in self.varying:
                    return f"`{bname}`, a per-thread array"
        for ident in th.within(node, "identifier"):
            name = th.name(ident)
            if name in self.varying and counted(ident):
                root = self.varying[name]
                return f"`{name}`" if root == f"`{name}`" else f"`{name}`, from {root}"
            if name in self.varying_names and counted(ident):
                return f"`{name}`, which uses threadIdx"
            if name in ("laneid", "__laneid") and counted(ident):
                return name
        if th.within(node, "gnu_asm_expression"):
            return "inline asm"
        return None


def _root(why: str) -> str:
    """The original source of a reason: "`i`, from threadIdx.x" -> "threadIdx.x"."""
    return why.split(", from ", 1)[1] if ", from " in why else why


def _bare(text: str) -> str:
    return text[1:-1].strip() if text.startswith("(") and text.endswith(")") else text




def _condition_for(parent: Node, child: Node) -> Node | None:
    """The condition of ``parent`` that decides whether ``child`` (one of its parts) runs, if any."""
    t = parent.type
    cond = parent.child_by_field_name("condition")
    if t in ("if_statement", "switch_statement", "while_statement"):
        return cond if cond is not None and child != cond else None
    if t == "for_statement":
        init = parent.child_by_field_name("initializer")
        if child in (init, cond):
            return None
        return cond
    if t == "do_statement":
        return cond if child != cond else None
    if t == "conditional_expression":
        return cond if child != cond else None
    if t == "binary_expression":
        op = parent.child_by_field_name("operator")
        left = parent.child_by_field_name("left")
        if op is not None and op.type in ("&&", "||") and child != left:
            return left
    return None


def _owning_loop(stmt: Node) -> Node | None:
    """The loop a break/continue leaves (a ``break`` in a ``switch`` leaves the switch); any loop for return."""
    cur = stmt.parent
    while cur is not None:
        if cur.type in _LOOPS:
            return cur
        if cur.type == "switch_statement" and stmt.type == "break_statement":
            return None
        cur = cur.parent
    return None


def _is_barrier(ctx: KernelContext, call: Node, block_vars: set[str]) -> bool:
    name = call_name(ctx, call)
    if name in BARRIERS:
        return True
    fn = call.child_by_field_name("function")
    if name == "sync" and fn is not None and fn.type == "field_expression":
        obj = fn.child_by_field_name("argument")
        if obj is None:
            return False
        if obj.type == "identifier":
            return ctx.text(obj) in block_vars
        return obj.type == "call_expression" and call_name(ctx, obj) == "this_thread_block"
    if name == "sync" and fn is not None and fn.type in ("qualified_identifier", "identifier"):
        args = call.child_by_field_name("arguments")
        first = args.named_children[0] if args is not None and args.named_children else None
        return first is not None and first.type == "identifier" and ctx.text(first) in block_vars
    return False


def _label(ctx: KernelContext, node: Node) -> str:
    """``if (tid < s)``, ``for (...; i < n; ...)``: how to name a controlling statement in a message."""
    t = node.type
    cond = node.child_by_field_name("condition")
    ctext = _bare(text_of(ctx, cond)) if cond is not None else ""
    return {"if_statement": f"`if ({ctext})`", "switch_statement": f"`switch ({ctext})`",
            "while_statement": f"the loop `while ({ctext})`", "do_statement": f"the loop `do ... while ({ctext})`",
            "for_statement": f"the loop `for (...; {ctext}; ...)`",
            "conditional_expression": f"`{ctext} ? ... : ...`"}.get(t, f"`{text_of(ctx, node)}`")


@analyzer("sync-divergence", ("WF106",))
def sync_divergence(ctx: KernelContext) -> Iterator[Finding]:
    body = ctx.body
    if body is None or threads(ctx).too_big:
        return
    taint = _Taint(ctx)
    taint.run()
    th = threads(ctx)
    barriers = [n for n in th.nodes("call_expression") if _is_barrier(ctx, n, taint.block_vars)]
    if not barriers:
        return
    exit_stmts = th.nodes("return_statement", "break_statement", "continue_statement", "goto_statement")
    reported_exits: set[int] = set()
    for bar in barriers:
        bname = text_of(ctx, bar)
        # 1. a thread-dependent branch around the barrier
        hazard = _divergent_path(ctx, taint, bar, body, loops=False)
        if hazard is not None:
            yield _inside(ctx, bar, bname, *hazard)
            continue
        # 2. early exits some threads take before this barrier (or before it in a later iteration)
        exits = list(_early_exits(ctx, taint, bar, body, exit_stmts))
        # 3. a loop around it whose trip count differs between threads (unless an early exit from that loop,
        #    reported at the exit, is what makes it differ)
        bar_loops = list(enclosing(bar, _LOOPS, body))
        if not any(any(inside(e[0], lp) for lp in bar_loops) for e in exits):
            hazard = _divergent_path(ctx, taint, bar, body, loops=True)
            if hazard is not None:
                yield _inside(ctx, bar, bname, *hazard)
                continue
        for ex in exits:
            stmt, cond, why = ex
            if stmt.id in reported_exits:
                continue
            reported_exits.add(stmt.id)
            kind = ctx.text(stmt).split()[0].rstrip(";")
            yield make(
                "WF106", ctx.file, ctx.range(stmt),
                f"some threads `{kind}` here (when `{_bare(text_of(ctx, cond))}`, which depends on {why}) "
                f"and never reach `{bname}` on line {ctx.node_line(bar)}: the remaining threads wait at a "
                f"barrier not all threads arrive at — undefined behaviour; let every thread reach the barrier "
                f"and guard only the work",
                kernel=ctx.kernel.name,
                evidence={"barrier": bname, "barrier_line": ctx.node_line(bar), "exit": kind,
                          "condition": text_of(ctx, cond), "depends_on": why},
                related=((ctx.range(bar), "the barrier the exited threads skip"),),
            )


def _inside(ctx: KernelContext, bar: Node, bname: str, stmt: Node, cond: Node, why: str) -> Finding:
    what = _label(ctx, stmt)
    fix = ("make the trip count the same for every thread (loop over a uniform range, guard the work inside)"
           if stmt.type in _LOOPS else "move the barrier out of the branch so every thread reaches it")
    return make(
        "WF106", ctx.file, ctx.range(bar),
        f"`{bname}` is inside {what}, whose condition differs between threads (it depends on {why}): threads "
        f"that skip the barrier leave the others waiting — undefined behaviour, in practice a hang or stale "
        f"shared memory; {fix}",
        kernel=ctx.kernel.name,
        evidence={"barrier": bname, "condition": text_of(ctx, cond), "condition_line": ctx.node_line(cond),
                  "depends_on": why},
        related=((ctx.range(cond), "thread-dependent condition"),),
    )


def _divergent_path(ctx: KernelContext, taint: _Taint, bar: Node, body: Node,
                    loops: bool) -> tuple[Node, Node, str] | None:
    """The innermost thread-dependent branch (or loop) around ``bar``: (statement, condition, reason)."""
    child = bar
    cur = bar.parent
    while cur is not None and cur != body:
        cond = _condition_for(cur, child) if (cur.type in _LOOPS) == loops else None
        if cond is not None:
            why = taint.why(cond)
            if why is not None:
                return cur, cond, why
        child, cur = cur, cur.parent
    return None


def _early_exits(ctx: KernelContext, taint: _Taint, bar: Node, body: Node,
                 exit_stmts: list[Node]) -> Iterator[tuple[Node, Node, str]]:
    """Thread-dependent exits that skip ``bar``: returns before it, and break/continue/return in its loops."""
    bar_loops = list(enclosing(bar, _LOOPS, body))
    for n in exit_stmts:
        if n.type == "return_statement":
            # before the barrier, or anywhere in a loop around it (later iterations)
            skips = n.start_byte < bar.start_byte or any(inside(n, lp) for lp in bar_loops)
        elif n.type == "goto_statement":
            skips = n.start_byte < bar.start_byte
        else:
            owner = _owning_loop(n)
            if owner is None or owner not in bar_loops:
                continue
            # break: the barrier's later iterations; continue: the rest of this iteration
            skips = n.type == "break_statement" or n.start_byte < bar.start_byte
        if not skips:
            continue
        child = n
        cur = n.parent
        while cur is not None and cur != body:
            cond = _condition_for(cur, child)
            if cond is not None:
                why = taint.why(cond)
                if why is not None:
                    yield n, cond, why
                    break
            child, cur = cur, cur.parent

