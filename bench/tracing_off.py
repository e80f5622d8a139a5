"""What a consumed message's span scope costs with tracing off (rule O5, docs/operations.md "Tracing").

    .venv/bin/python -m bench.tracing_off        # microseconds per ``with tracing.span(...)``, best of 5 x 50,000

Run it in two checkouts (``bench/ab.sh``) to compare; no broker, Redis or provider is needed.
"""

from __future__ import annotations

import timeit

from conduit.runtime import tracing

CALLS = 50_000


def main() -> None:
    """Print the best per-call time in microseconds of a CONSUMER span scope as the middleware opens it."""
    tp = tracing.new_traceparent()

    def one() -> None:
        with tracing.span("conduit.questions process", tp, kind=tracing.SpanKind.CONSUMER, task_id="t1",
                          **{"messaging.system": "kafka", "messaging.destination.name": "conduit.questions"}):
            pass

    best = min(timeit.repeat(one, number=CALLS, repeat=5)) / CALLS
    on = getattr(tracing, "enabled", lambda: False)()  # main before rule O5 had no flag
    print(f"tracing {'on' if on else 'off'}: {best * 1e6:.2f} us per span scope")


if __name__ == "__main__":
    main()
