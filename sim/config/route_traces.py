"""A scenario's route trace, read when the scenario's routing is resolved: the engine is handed the trace
(:class:`sim.formats.route_trace.RouteTrace`), never its file."""

from __future__ import annotations

from sim.formats.route_trace import RouteTrace, cached_route_trace


def routing_trace(routing) -> RouteTrace | None:
    """The route trace a ``routing`` section (:class:`sim.config.models.Routing`) names in ``trace``, read once per
    process per file content (:func:`sim.formats.route_trace.cached_route_trace`), or None when it names none."""
    path = getattr(routing, "trace", None)
    return cached_route_trace(path, "routing.trace") if path else None
