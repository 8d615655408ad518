"""What tracing costs the api: the same streams through an api process with tracing on
and one with it off, side by side in one run.

Run with ``make bench`` (it starts the emulators). Two api processes (one uvicorn worker
each) on the same emulators and the same lean model server (``fake_provider.py``): one
with ``SPARK_TELEMETRY=off``, one with ``SPARK_TELEMETRY=otlp`` exporting every span, as
``make dev`` does, over OTLP/HTTP to a receiver in this process that reads and drops
them (so the exporter's own work, encoding and sending its batches, is counted). Prints:

(a) time to first token, p50, on against off, the two sides' requests in pairs,
    added the median of the pairs' differences;
(b) the api's CPU per stream-second under concurrent paced streams, the rounds'
    median, on against off, with the spans made per
    stream-second, by name, and what each costs, and the streaming writes counted on
    their runs' spans instead (``shared/observe/tracing.py`` says why);
(c) the same added time to first token, measured where it is spent: the spans a
    message makes on its way to the first token, made in this process by our own code
    with the api's tracer and exporter (to the same receiver), against the same calls
    with tracing off. A plain message's model request leaves before its opening
    commits (the head start): with a model slower than that commit, as every real one
    is, only the request's span and the model call's are made before the request
    leaves, and the first token's time marked on the call when it comes; the opening
    commit's span, the watchdog's enqueue and the run's span are made while the model
    thinks (``tests/e2e/test_traces.py`` checks that order). The same with a model
    that answers at once (all five spans on the way) is printed beside it, for scale.
    On a shared 2-core machine (a)'s control moves by more than tracing adds, so (a)
    shows the order of things and (c) the figure;
(d) (b)'s cost, measured where it is spent: tracing's whole CPU per span, made by the
    same calls as (c) and exported as the api exports them, counted on every thread of
    this process (the exporter's encoding and sending too), to a receiver in a process
    of its own (its decoding not counted), against the same calls with tracing off;
    times (b)'s spans per stream-second, as a share of the api's CPU per stream-second
    with tracing off: the target, at most 5 % (``bench.results.target``). (b)'s control
    moves by about as much as 5 % on this machine, so (b) shows the order of things
    (and what (d) leaves out: the exporter's thread contending with the requests'),
    and (d) resolves the target.

A reduced ``stream_overhead.py``: the same client, streams and CPU reading.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "functions")]

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)

from bench import results  # noqa: E402
from bench.stream_overhead import TEXT_MARK, Target, concurrent  # noqa: E402
from shared.observe.setup import Telemetry  # noqa: E402
from shared.observe.tracing import STREAMING_COMMITS  # noqa: E402
from tools.otlp import OtlpReceiver  # noqa: E402
from tools.stack import Stack, cpu_seconds, free_port, sign_up, start_functions  # noqa: E402

CPU_TARGET = 0.05  # at most 5 % more api CPU per stream-second with tracing on


class Sink:
    """An OTLP/HTTP receiver that reads every export and drops it, counting its bytes
    and the api's spans by name."""

    def __init__(self) -> None:
        self.bytes = 0
        self.names: Counter[str] = Counter()
        self.counted = 0  # streaming writes counted on the runs' spans, not spans of their own
        self._receiver = OtlpReceiver(self._take)
        self.port = self._receiver.port

    def _take(self, request: ExportTraceServiceRequest, size: int) -> None:
        self.bytes += size
        for resource in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource.resource.attributes}
            if service.get("service.name") != "spark-api":
                continue  # the tasks function's (its watchdogs'): not the api's CPU
            for scope in resource.scope_spans:
                self.names.update(s.name for s in scope.spans)
                self.counted += sum(
                    a.value.int_value
                    for s in scope.spans
                    for a in s.attributes
                    if a.key == STREAMING_COMMITS
                )

    def close(self) -> None:
        self._receiver.close()


def _turns(sides: list[Target], n: int) -> list[Target]:
    """``sides`` in the ``n``th order of a rotation: none is always first."""
    k = n % len(sides)
    return sides[k:] + sides[:k]


def _added(base: list[float], side: list[float]) -> float:
    """The median of each round's difference of ``side`` from ``base``."""
    return statistics.median(b - a for a, b in zip(base, side, strict=True))


async def ttft(off: Target, control: Target, on: Target, samples: int) -> None:
    print(
        f"(a) time to first token, p50 of {samples} rounds (one request to each process, "
        "in rotating order); added: the median of each round's difference from off:"
    )
    sides = [off, control, on]
    for model_ttft in (0, 50):
        times: dict[str, list[float]] = {s.name: [] for s in sides}
        for n in range(samples):
            for side in _turns(sides, n):
                times[side.name].append((await side.run(1, 0, model_ttft))[0])
        p50_off, p50_on = (statistics.median(times[s.name]) for s in (off, on))
        added = _added(times[off.name], times[on.name])
        print(
            f"    model TTFT {model_ttft:2d} ms: tracing off {p50_off * 1e3:7.2f} ms "
            f"| on {p50_on * 1e3:7.2f} ms | added {added * 1e3:6.3f} ms "
            f"| control, off again: {_added(times[off.name], times[control.name]) * 1e3:6.3f} ms"
        )


async def cpu(
    sides: list[Target], pids: dict[str, int], streams: int, rate: int, rounds: int, sink: Sink
) -> tuple[float, float]:
    """(b); returns the api's CPU per stream-second with tracing off, and the spans it
    made per stream-second with tracing on."""
    tokens = rate * 3
    stream_seconds = streams * tokens / rate
    print(
        f"(b) api CPU per stream-second, {streams} concurrent streams at {rate} tokens/s "
        f"({tokens} tokens each), median of {rounds} rounds:"
    )
    costs: dict[str, list[float]] = {s.name: [] for s in sides}
    await asyncio.sleep(1)  # (a)'s last spans exported
    sink.names.clear()
    sink.counted = 0
    for n in range(rounds):
        for side in _turns(sides, n):
            before = cpu_seconds(pids[side.name])
            _, failed = await concurrent(side, streams, tokens, rate)
            await asyncio.sleep(0.5)  # each run's release, after its last byte
            costs[side.name].append((cpu_seconds(pids[side.name]) - before) / stream_seconds)
            if failed:
                print(f"    {side.name}: {failed}/{streams} streams failed")
    cost_off, cost_control, cost_on = (statistics.median(costs[s.name]) for s in sides)
    more = cost_on / cost_off - 1
    print(
        f"    tracing off {cost_off * 1e6:6.0f} us | on {cost_on * 1e6:6.0f} us "
        f"| {more * 100:+5.1f} % "
        f"| control, off again: {(cost_control / cost_off - 1) * 100:+5.1f} %"
    )
    await asyncio.sleep(1)  # the last batch exported
    seconds = stream_seconds * rounds
    spans = sink.names.total() / seconds
    made = ", ".join(f"{name} {n / seconds:.1f}" for name, n in sink.names.most_common(6))
    print(f"    spans per stream-second {spans:.1f}: {made}")
    print(
        f"    streaming writes per stream-second {sink.counted / seconds:.1f}, "
        "counted on their runs' spans instead of spans of their own"
    )
    print(f"    -> each span costs the api {(cost_on - cost_off) / spans * 1e6:.0f} us of CPU")
    return cost_off, spans


PATH = "/api/spark/agent/messages"


def _to_first_token(slow_model: bool) -> float:
    """What tracing does on a plain message's way to its first token, this thread's CPU
    (the spans that end after the first token, the request's, the run's and the model
    call's, are ended after it, untimed).

    Its model request is sent before its opening commits (the head start,
    ``shared/agent/sending/head_start.py``): before it leaves, the request's span and the model
    call's are made; the opening's commit, its watchdog's enqueue (with its
    ``traceparent``) and the run's span follow while the model thinks, and then the
    first token is seen. With ``slow_model`` (a model slower than the opening's commit,
    as any real one is), those three are made untimed, inside the model's wait; without
    it (a model that answers at once) they are on the way too and timed."""
    from shared import telemetry
    from shared.egress.spans import started
    from shared.observe import propagation, setup, tracing

    began = time.thread_time()
    request = tracing.request("POST", PATH)
    with tracing.current(request):
        tracing.routed("POST", PATH)
        tracer = setup.process_tracer()
        call = started(tracer, "chat", "openai", "bench", "chat") if tracer else None
        if call is not None:
            call.set_attribute(telemetry.WITHHELD, False)
        asked = time.thread_time()
        with tracing.commit("Firestore transaction"):
            pass
        with tracing.enqueue("spark-tasks", "watchdog-run"):
            propagation.carried()
        with tracing.run("conversation", "run"):
            answered = time.thread_time()
            if call is not None:
                call.set_attribute(telemetry.TIME_TO_FIRST_TOKEN, 1.0)
            first = time.thread_time()
            if call is not None:
                call.end()
    tracing.answered(request, 200)
    if slow_model:
        return (asked - began) + (first - answered)
    return first - began


@contextmanager
def _traced(port: int) -> Iterator[tuple[Telemetry, Callable[[bool], None]]]:
    """This process's telemetry as the api's (``SPARK_TELEMETRY=otlp``: OTLP/HTTP to a
    receiver on ``port``, batched), and the switch that makes it current (``True``) or
    not (``False``) by setting ``setup._process``, as ``setup.start`` does; off and shut
    down after the block."""
    from shared.config import Settings
    from shared.observe import setup

    traced = setup.build(
        Settings.from_env(
            {
                "SPARK_MODEL": "bench",
                "SPARK_TELEMETRY": "otlp",
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            }
        )
    )

    def tracing(on: bool) -> None:
        setup._process = traced if on else None

    try:
        yield traced, tracing
    finally:
        setup._process = None
        traced.shutdown()


def in_process(sink: Sink, reps: int = 300, rounds: int = 21) -> None:
    """(c): ``_to_first_token`` timed with this process's tracing on (as the api's:
    OTLP/HTTP to ``sink``, batched) and off, in alternating rounds, at a model slower
    than the opening's commit and at one that answers at once; the rounds' median.
    Timed as this thread's CPU (``time.thread_time``): what the request's own thread
    spends; the exporter's thread, which encodes and sends the batches, is (b)'s. A
    round makes fewer spans than the batch queue holds, and the queue is drained
    between rounds, so no span is dropped."""
    sides = [(slow, side) for slow in (True, False) for side in ("off", "on")]
    took: dict[tuple[bool, str], list[float]] = {key: [] for key in sides}
    with _traced(sink.port) as (traced, tracing):
        for _ in range(rounds):
            for slow, side in sides:
                tracing(side == "on")
                took[slow, side].append(sum(_to_first_token(slow) for _ in range(reps)) / reps)
                if traced.tracer_provider is not None:
                    traced.tracer_provider.force_flush()
    print(
        f"(c) tracing on a message's way to its first token, made in this process ({reps} "
        f"times, this thread's CPU, median of {rounds} rounds):"
    )
    for slow, model in ((True, "slower than the opening's commit"), (False, "answering at once")):
        off, on = (statistics.median(took[slow, side]) for side in ("off", "on"))
        added = on - off
        print(
            f"    a model {model:32s} off {off * 1e6:6.1f} us | on {on * 1e6:6.1f} us "
            f"| added {added * 1e3:.3f} ms" + ("" if slow else " (for scale)")
        )


# A receiver that reads each export and drops it, in a process of its own: its work is
# not this process's CPU, which (d) counts.
_DROPPING = (
    "import time; from tools.otlp import OtlpReceiver; "
    "r = OtlpReceiver(lambda request, size: None); print(r.port, flush=True); time.sleep(1e9)"
)
SPANS_PER_MESSAGE = 5  # _to_first_token's: the request's, the model call's, the commit's,
# the enqueue's and the run's


def per_span(cost_off: float, spans: float, reps: int = 400, rounds: int = 7) -> None:
    """(d): ``_to_first_token`` (five spans) made with this process's tracing on (OTLP/HTTP
    to a receiver in another process, batched) and off, in alternating rounds, each
    round's spans flushed within it, timed as this process's CPU (every thread); the
    rounds' median difference per span, then its share of ``cost_off`` at ``spans`` per
    stream-second."""
    import subprocess

    receiver = subprocess.Popen(
        [sys.executable, "-c", _DROPPING], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert receiver.stdout is not None
        took: dict[str, list[float]] = {"off": [], "on": []}
        with _traced(int(receiver.stdout.readline())) as (traced, tracing):
            for _ in range(rounds):
                for side in ("off", "on"):
                    tracing(side == "on")
                    began = time.process_time()
                    for _ in range(reps):
                        _to_first_token(False)
                    if traced.tracer_provider is not None:
                        traced.tracer_provider.force_flush()
                    took[side].append((time.process_time() - began) / reps)
    finally:
        receiver.kill()
        receiver.wait()
    span = _added(took["off"], took["on"]) / SPANS_PER_MESSAGE
    share = span * spans / cost_off
    print(
        f"(d) tracing's whole CPU per span, made and exported in this process ({reps} "
        f"messages of {SPANS_PER_MESSAGE} spans, every thread's CPU, median of {rounds} "
        f"rounds): {span * 1e6:.0f} us; at (b)'s {spans:.1f} spans per stream-second, "
        f"{span * spans * 1e6:.0f} us of the api's {cost_off * 1e6:.0f} us per stream-second: "
        f"{share * 100:+.1f} %"
    )
    results.target(
        "tracing's CPU per stream-second, with tracing on",
        f"{share * 100:+.1f} %",
        f"<= {CPU_TARGET * 100:.0f} %",
        share <= CPU_TARGET,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=150)
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--rate", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not os.environ.get("FIRESTORE_EMULATOR_HOST"):
        raise SystemExit("run through `make bench` (it starts the emulators)")
    logs = Path(os.environ.get("SPARK_STACK_LOGS") or tempfile.mkdtemp(prefix="bench-"))
    sink = Sink()
    provider_port = free_port()
    env = {
        "OPENAI_BASE_URL": f"http://127.0.0.1:{provider_port}/v1",
        "OPENAI_API_KEY": "bench",
        "SPARK_MODEL": "bench",
        "SPARK_DAILY_TOKENS_PER_USER": "1000000000",
    }
    traced = {
        "SPARK_TELEMETRY": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink.port}",
    }
    stacks = {side: Stack(logs / f"tracing-{side}") for side in ("off", "control", "on")}
    for stack in stacks.values():
        stack.log_dir.mkdir(parents=True, exist_ok=True)
    fake = [sys.executable, str(ROOT / "bench" / "fake_provider.py"), f"--port={provider_port}"]
    try:
        stacks["off"].spawn("bench-provider", fake)
        targets: dict[str, Target] = {}
        pids: dict[str, int] = {}
        auth_host = os.environ["FIREBASE_AUTH_EMULATOR_HOST"]
        tokens = [
            sign_up(auth_host, f"bench-{n}@example.com", "bench-pass").token
            for n in range(args.streams)
        ]
        headers = [f"Accept: text/event-stream\r\nAuthorization: Bearer {t}\r\n" for t in tokens]
        for side, stack in stacks.items():
            port = free_port()
            start_functions(
                stack, port, free_port(), {**env, **(traced if side == "on" else {})}, instances=1
            )
            name = f"tracing {side}"
            targets[name] = Target(name, port, "/api/spark/agent/messages", headers, TEXT_MARK)
            pids[name] = dict(stack.processes)["api"].pid
        sides = [targets[f"tracing {side}"] for side in ("off", "control", "on")]
        print(
            f"tracing: {os.cpu_count()} cores, three api processes (one uvicorn worker each): "
            "tracing off, off again (the control: what two untraced processes differ by, "
            "measured the same way) and on (OTLP/HTTP to a receiver that drops the spans), "
            "Firestore + Auth + Cloud Tasks emulators on this machine"
        )
        started = time.perf_counter()
        asyncio.run(ttft(sides[0], sides[1], sides[2], args.samples))
        cost_off, spans = asyncio.run(cpu(sides, pids, args.streams, args.rate, args.rounds, sink))
        in_process(sink)
        per_span(cost_off, spans)
        print(
            f"    ({sink.bytes / 1024:.0f} KiB of spans exported in "
            f"{time.perf_counter() - started:.0f} s)"
        )
    finally:
        for stack in stacks.values():
            stack.stop()
        sink.close()


if __name__ == "__main__":
    from bench.results import recorded

    with recorded("tracing"):
        main()
