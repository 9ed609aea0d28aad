"""The allocator's operator HTTP API (aiohttp): reads of the projection, live explanations,
writes published as intents, OpenAPI document, bearer-token authentication and input bounds.

The application itself (routes, authentication, error middleware, start-up) is
:mod:`services.allocator.http`. Modules here: ``guard`` (errors, body bounds), ``paging`` (query
parameters, ``limit``/``continue``), ``values`` (checked write values), ``documents`` (JSON shapes
of pools, nodes, allocations, queue, quotas), ``context`` (what handlers share), ``probes``
(health, readiness, metrics), ``reads``/``writes`` (handlers), ``outcomes`` (waiting for the
decision of a published intent), ``openapi`` (the served document), ``keeper`` (current reasons in
the read model), ``gauges`` (per-pool metrics read at scrape time).
"""
