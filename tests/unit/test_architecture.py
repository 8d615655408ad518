"""The shape of the code: the packages of ``shared/`` and ``functions/`` import one
another without a cycle, so each can be read, tested and changed from the bottom up
(``tools/layers.py`` reads the graph from the source).
"""

from __future__ import annotations

import ast
import inspect
import itertools
from collections.abc import Iterator
from pathlib import Path

from tools.layers import ROOT
from tools.layers import cycle as _cycle
from tools.layers import graph as _graph
from tools.layers import modules as _modules


def test_the_graph_is_read_from_the_source() -> None:
    graph = _graph()
    known = {"shared.agent", "shared.tasks", "shared.budget", "shared.queue", "spark_http", "main"}
    assert known <= set(graph)
    # The handler drives the agent: an edge the test must see to mean anything.
    assert "shared.agent" in graph["shared.tasks"]
    assert "shared.tasks" in graph["shared.wiring"]


def test_packages_import_one_another_without_a_cycle() -> None:
    graph = _graph()
    cycle = _cycle(graph)
    if cycle is not None:
        edges = [f"  {a} -> {b}: {sorted(graph[a][b])}" for a, b in itertools.pairwise(cycle)]
        raise AssertionError("import cycle " + " -> ".join(cycle) + "\n" + "\n".join(edges))


def test_the_agent_imports_nothing_of_the_tasks_package() -> None:
    """``shared.tasks`` drives the agent (its handler claims and runs runs); the agent
    reaches task work only through ``shared.queue.port.TaskPort``."""
    assert sorted(_graph()["shared.agent"].get("shared.tasks", ())) == []


def test_a_cycle_is_found() -> None:
    graph: dict[str, dict[str, set[str]]] = {
        "a": {"b": set()},
        "b": {"c": set()},
        "c": {"a": set()},
        "d": {},
    }
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b": set()}, "b": {}}) is None


# The providers' own interfaces and adapters: whoever holds one can call a provider
# without the egress's screen, meter and bounds (DESIGN §13).
PROVIDER_NAMES = {
    "ModelProvider",
    "Transcriber",
    "Speaker",
    "SecretMinter",
    "OpenAIProvider",
    "AnthropicProvider",
    "GeminiProvider",
    "OfflineProvider",
    "ScriptedProvider",
    "OpenAITranscriber",
    "GeminiTranscriber",
    "FakeTranscriber",
    "OpenAIVoice",
    "GeminiVoice",
    "ScriptedVoice",
    "WhisperTranscriber",
    "EspeakVoice",
    "Moderator",
    "OpenAIModerator",
    "GeminiModerator",
    "OfflineModerator",
    "ScriptedModerator",
}
# The adapters and their interfaces, the egress, and the one place that builds them all
# and hands them to the egress.
MAY_HOLD_PROVIDERS = ("shared.llm", "shared.egress", "shared.wiring")
VOICE_ADAPTERS = {
    "shared.voice.openai_voice",
    "shared.voice.gemini_voice",
    "shared.voice.scripted",
    "shared.voice.whisper_local",
    "shared.voice.espeak_voice",
}


def _names(path: Path) -> set[str]:
    """Every name ``path`` imports, refers to or reads as an attribute."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
    return found


def test_only_the_egress_holds_a_provider() -> None:
    """Every provider call leaves through ``shared.egress.Egress``: nothing else in
    ``shared/`` or ``functions/`` may name a provider's interface or adapter."""
    offenders = {
        module: sorted(_names(path) & PROVIDER_NAMES)
        for module, path in _modules().items()
        if not module.startswith(MAY_HOLD_PROVIDERS)
        and module not in VOICE_ADAPTERS
        and _names(path) & PROVIDER_NAMES
    }
    assert offenders == {}


def test_the_provider_rule_sees_a_module_that_breaks_it(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text(
        "from shared.llm.base import ModelProvider\n\n"
        "def call(p: ModelProvider) -> object:\n    return p.stream\n"
    )
    assert _names(sneaky) & PROVIDER_NAMES == {"ModelProvider"}


# -- edges call only the facade ---------------------------------------------------------

# What a module under ``functions/`` (an edge) may import from ``shared/``, whole: the
# agent's face (``shared.agent`` itself, none of its rooms), and modules of values and
# helpers that hold no part of the agent (documents and bodies, the error tree,
# settings, the caller's check, prose).
EDGE_MAY_IMPORT = (
    "shared.schemas",
    "shared.errors",
    "shared.config",
    "shared.auth",
    "shared.prose",
    # Spans and metrics of requests (no part of the agent: the process's telemetry).
    "shared.observe",
)
# From a part's own module, an edge may import only these names: values the facade's
# verbs take or return, the messages an id that names nothing answers with (``routing``
# judges ids in a path before anything reads the store), and the tasks function's one
# entry, ``TaskHandler`` (it drives the agent, so the facade cannot hold it).
EDGE_VALUES = {
    "shared.attachments.service": {"Requested"},
    "shared.families.messages": {"Target", "is_shared", "NO_CONVERSATION"},
    "shared.families.membership": {"NO_INVITE", "NO_MEMBER", "NOT_YOURS"},
    "shared.store.base": {"NO_LESSON"},
    "shared.ids": {"reserved"},
    "shared.tasks.scheduler": {"NO_TASK"},
    "shared.tasks.handler": {"TaskHandler"},
    # App Check at the door: its guard (built by the wiring) and its header's name.
    "shared.appcheck.guard": {"AppCheck", "HEADER"},
    "shared.appcheck.replays": {"InMemorySpentTokens"},
}
# The composition root builds what the edges are given, and starts the process's
# telemetry before it does.
ROOT_MAY_IMPORT = {"main": ("shared.wiring", "shared.callers", "shared.observe.setup")}
# Names that stand for the facade in an edge (``edge.agent``, ``self._agent``, ``agent``).
FACADE_NAMES = {"agent", "_agent"}


def _imported(path: Path, known: dict[str, Path]) -> Iterator[tuple[int, str, str | None]]:
    """(line, module, name) for each name ``path`` imports from ``shared`` (``None``:
    the module itself)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "shared":
                    yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "shared":
            for alias in node.names:
                module = f"{node.module}.{alias.name}"
                if module in known:
                    yield node.lineno, module, None
                else:
                    yield node.lineno, str(node.module), alias.name


def _edge_import_offences(module: str, path: Path, known: dict[str, Path]) -> list[str]:
    """What ``module`` (an edge) imports from ``shared/`` beyond what an edge may."""
    allowed = (*EDGE_MAY_IMPORT, *ROOT_MAY_IMPORT.get(module, ()))
    offences = []
    for line, imported, name in _imported(path, known):
        whole = imported == AGENT or any(
            imported == a or imported.startswith(f"{a}.") for a in allowed
        )
        if not whole and name not in EDGE_VALUES.get(imported, set()):
            offences.append(f"{module}:{line} imports {name or '*'} from {imported}")
    return offences


AGENT = "shared.agent"


def _facade_verbs() -> set[str]:
    """What an edge may take off the facade: its public methods, and its properties
    that give a value, not one of the parts it was built from."""
    from shared.agent.facade import Agent

    parts = {p.annotation for p in inspect.signature(Agent.__init__).parameters.values()}
    verbs = set()
    members = {n: m for cls in reversed(Agent.__mro__) for n, m in vars(cls).items()}
    for name, member in members.items():
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            given = member.fget.__annotations__.get("return") if member.fget else None
            if given in parts:
                continue
        verbs.add(name)
    return verbs


def _names_facade(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id in FACADE_NAMES) or (
        isinstance(node, ast.Attribute) and node.attr in FACADE_NAMES
    )


def _reaches_past_facade(path: Path, verbs: set[str]) -> list[str]:
    """Each attribute ``path`` takes off the facade that is not one of its verbs (a
    part, ``agent.delivery``, or a private name)."""
    return sorted(
        f"{path.name}:{node.lineno} takes .{node.attr} off the facade"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Attribute) and _names_facade(node.value) and node.attr not in verbs
    )


def _edges() -> dict[str, Path]:
    return {m: p for m, p in _modules().items() if p.is_relative_to(ROOT / "functions")}


def test_edges_import_from_shared_only_the_facade_and_values() -> None:
    known = _modules()
    edges = _edges()
    assert {"main", "spark_http.app", "spark_http.tasks"} <= set(edges)
    offences = [o for m, p in edges.items() for o in _edge_import_offences(m, p, known)]
    assert offences == []


def test_edges_call_only_the_facade() -> None:
    """An edge asks the ``Agent`` facade, never one of its parts through it."""
    verbs = _facade_verbs()
    assert {"send", "stream", "deliver", "model"} <= verbs
    assert not {"families", "delivery", "preferences"} & verbs
    assert [o for p in _edges().values() for o in _reaches_past_facade(p, verbs)] == []
    # The tasks handler drives the agent through the same verbs.
    tasks = [p for m, p in _modules().items() if m.startswith("shared.tasks.")]
    assert [o for p in tasks for o in _reaches_past_facade(p, verbs)] == []


def test_the_edge_rules_see_a_module_that_breaks_them(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text(
        "from shared.agent import Agent\n"
        "from shared.families.service import Families\n"
        "from shared.families.messages import Target, address\n"
        "from shared.store import memory\n\n"
        "async def post(edge: object, agent: Agent) -> None:\n"
        "    await edge.agent.delivery.deliver('u', 'hi', Target(family=True))\n"
        "    await agent.families.current('u')\n"
        "    await agent._runs.stop('u', 'c')\n"
        "    await agent.send('u', 'hi', None)\n"
    )
    offences = _edge_import_offences("spark_http.sneaky", sneaky, _modules())
    assert offences == [
        "spark_http.sneaky:2 imports Families from shared.families.service",
        "spark_http.sneaky:3 imports address from shared.families.messages",
        "spark_http.sneaky:4 imports * from shared.store.memory",
    ]
    assert _reaches_past_facade(sneaky, _facade_verbs()) == [
        "sneaky.py:7 takes .delivery off the facade",
        "sneaky.py:8 takes .families off the facade",
        "sneaky.py:9 takes ._runs off the facade",
    ]


# -- one way into the agent ----------------------------------------------------------

# The one module beside the agent that may build it from its rooms' parts.
BUILDS_THE_AGENT = {"shared.wiring"}


def _reaching_into_rooms(known: dict[str, Path]) -> list[str]:
    """Each import, outside ``shared/agent/`` and the wiring, of one of the agent's
    rooms rather than its face (``shared.agent``)."""
    return [
        f"{module}:{line} imports {imported}"
        for module, path in known.items()
        if not (module == AGENT or module.startswith(f"{AGENT}."))
        and module not in BUILDS_THE_AGENT
        for line, imported, _ in _imported(path, known)
        if imported.startswith(f"{AGENT}.")
    ]


def test_everyone_but_the_wiring_reaches_the_agent_through_its_face() -> None:
    """The edges, the tasks handler, the policies and the audit import ``shared.agent``
    (``Agent`` and the values its verbs take and give), never one of its rooms."""
    assert _reaching_into_rooms(_modules()) == []
    graph = _graph()
    # The handler drives the agent, through its face (and nothing else of the tasks
    # package uses the agent).
    assert graph["shared.tasks"]["shared.agent"] == {"shared.tasks.handler -> shared.agent"}


def test_the_face_rule_sees_a_module_that_reaches_into_a_room(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("from shared.agent import Agent\nfrom shared.agent.run.loop import Run\n")
    known = {**_modules(), "shared.tasks.sneaky": sneaky}
    assert _reaching_into_rooms(known) == ["shared.tasks.sneaky:2 imports shared.agent.run.loop"]


# What a person's export may read: the stores (through their Protocols), the families'
# service (the caller's family, to check a parent), settings, and values. Never the agent
# (the facade holds the export; the export holds nothing of it).
EXPORT_MAY_IMPORT = {
    "shared.store",
    "shared.families",
    "shared.schemas",
    "shared.errors",
    "shared.clock",
    "shared.attachment_rules",
}


def test_the_export_reads_the_stores_and_holds_nothing_of_the_agent() -> None:
    graph = _graph()
    imported = set(graph["shared.export"])
    assert imported <= EXPORT_MAY_IMPORT, sorted(imported - EXPORT_MAY_IMPORT)
    assert "shared.export" in graph["shared.agent"]


# What the user's budget may import: values, the clock, and the ``Meter`` it gives. It
# sits below the store (whose run slots apply its rules) and below every package that
# spends from it (the egress, uploads, voice, tasks), which are handed one by the wiring.
BUDGET_MAY_IMPORT = {"shared.schemas", "shared.errors", "shared.clock", "shared.llm"}


def test_the_budget_sits_below_the_store_that_keeps_its_ledger() -> None:
    graph = _graph()
    imported = set(graph["shared.budget"])
    assert imported <= BUDGET_MAY_IMPORT, sorted(imported - BUDGET_MAY_IMPORT)
    assert "shared.budget" in graph["shared.store"]  # the run slots' rules are its


def _calls_of(name: str) -> list[str]:
    """Where ``shared/`` and ``functions/`` call a function or method named ``name``."""
    found = []
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                called = node.func
                if (isinstance(called, ast.Attribute) and called.attr == name) or (
                    isinstance(called, ast.Name) and called.id == name
                ):
                    found.append(f"{module}:{node.lineno}")
    return found


def test_a_run_slot_is_freed_in_one_place() -> None:
    """``RunSlot`` is the one caller of ``RunSlots.release_run`` and of its
    ``close_and_release`` (the final write and the release in one commit); the ledger's
    pure change ``release_run`` is called by their implementation alone
    (``shared.store.slots``)."""
    calls = [c for c in _calls_of("release_run") if not c.startswith("shared.store.slots:")]
    assert calls and all(c.startswith("shared.agent.run.slot:") for c in calls), calls
    closes = _calls_of("close_and_release")
    assert closes and all(c.startswith("shared.agent.run.slot:") for c in closes), closes


def test_only_the_egress_screen_asks_who_opted_out() -> None:
    """The AI opt-out is decided in one place, where every request leaves
    (``shared/egress/screen.py``, docs/egress.md): no other module asks who opted out;
    the family tools only mark whose words a message is."""
    askers = {m for m, path in _modules().items() if "opted_out" in _names(path)}
    assert askers == {"shared.egress.screen"}
