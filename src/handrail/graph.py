"""``agent.get_graph()``: the agent's steps and how they follow each other, for drawing.

The graph has the node names a run's ``stream_mode="updates"`` shows (``model``,
``tools``, ``"<middleware>.<hook>"``) between ``__start__`` and ``__end__``. Dotted
(conditional) edges are the choices the run makes as it goes: tools or the end after the
model, and the ``jump_to`` targets a hook declares with ``can_jump_to``.

Example::

    print(agent.get_graph().draw_mermaid())
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from handrail.runtime.plan import MODEL, TOOLS

if TYPE_CHECKING:
    from handrail.runtime.plan import HookStep
    from handrail.runtime.spec import AgentSpec

__all__ = ["Edge", "Graph", "Node", "agent_graph"]

START = "__start__"
END = "__end__"


@dataclass(frozen=True, slots=True)
class Node:
    """One step of the agent."""

    id: str
    name: str


@dataclass(frozen=True, slots=True)
class Edge:
    """``source`` may be followed by ``target``; ``conditional`` when the run decides."""

    source: str
    target: str
    conditional: bool = False


@dataclass
class Graph:
    """The agent's steps (``nodes``) and what may follow each one (``edges``)."""

    nodes: dict[str, Node] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)

    def add_node(self, name: str) -> None:
        self.nodes.setdefault(name, Node(name, name))

    def add_edge(self, source: str, target: str, conditional: bool = False) -> None:
        edge = Edge(source, target, conditional)
        if edge not in self.edges and Edge(source, target, not conditional) not in self.edges:
            self.edges.append(edge)

    def draw_mermaid(self) -> str:
        """The graph as a Mermaid flowchart (top-down)."""
        lines = ["graph TD;"]
        for node in self.nodes.values():
            if node.id == START:
                lines.append(f"\t{START}([<p>{START}</p>]):::first")
            elif node.id == END:
                lines.append(f"\t{END}([<p>{END}</p>]):::last")
            else:
                lines.append(f"\t{_mermaid_id(node.id)}({node.name})")
        for edge in self.edges:
            arrow = "-.->" if edge.conditional else "-->"
            lines.append(f"\t{_mermaid_id(edge.source)} {arrow} {_mermaid_id(edge.target)};")
        lines += [
            "\tclassDef default fill:#f2f0ff,line-height:1.2",
            "\tclassDef first fill-opacity:0",
            "\tclassDef last fill:#bfb6fc",
        ]
        return "\n".join(lines) + "\n"


def _mermaid_id(name: str) -> str:
    return name.replace(".", "_").replace(" ", "_")


def agent_graph(spec: AgentSpec) -> Graph:
    """Build the graph of ``spec``'s steps, following the run loop's plan."""
    plan = spec.plan
    graph = Graph()
    has_tools = bool(spec.tools)
    graph.add_node(START)
    for step in (*plan.before_agent, *plan.before_model):
        graph.add_node(step.name)
    graph.add_node(MODEL)
    for step in plan.after_model:
        graph.add_node(step.name)
    if has_tools:
        graph.add_node(TOOLS)
    for step in plan.after_agent:
        graph.add_node(step.name)
    graph.add_node(END)

    model_turn = plan.before_model[0].name if plan.before_model else MODEL
    finish = plan.after_agent[0].name if plan.after_agent else END
    _chain(graph, plan.before_agent, model_turn)
    graph.add_edge(START, plan.before_agent[0].name if plan.before_agent else model_turn)
    _chain(graph, plan.before_model, MODEL)
    if plan.after_model:
        graph.add_edge(MODEL, plan.after_model[0].name)
        route_from = plan.after_model[-1].name
        _chain(graph, plan.after_model, None)
    else:
        route_from = MODEL
    if has_tools:
        graph.add_edge(route_from, TOOLS, conditional=True)
        graph.add_edge(TOOLS, model_turn)
        if any(getattr(t, "return_direct", False) for t in spec.tools.values()):
            graph.add_edge(TOOLS, finish, conditional=True)
    graph.add_edge(route_from, finish, conditional=has_tools)
    _chain(graph, plan.after_agent, END)
    for step in plan.hooks.values():
        for target in _jump_targets(step):
            node = {"model": model_turn, "tools": TOOLS, "end": finish}[target]
            if node in graph.nodes and node != step.name:
                graph.add_edge(step.name, node, conditional=True)
    graph.edges = [e for e in graph.edges if e.source in graph.nodes and e.target in graph.nodes]
    return graph


def _chain(graph: Graph, steps: list[HookStep], then: str | None) -> None:
    for first, second in itertools.pairwise(steps):
        graph.add_edge(first.name, second.name)
    if steps and then is not None:
        graph.add_edge(steps[-1].name, then)


def _jump_targets(step: HookStep) -> list[str]:
    hook = getattr(type(step.middleware), step.hook, None)
    targets = getattr(hook, "__can_jump_to__", None) or getattr(step.middleware, "can_jump_to", None) or []
    return [t for t in targets if t in ("model", "tools", "end")]
