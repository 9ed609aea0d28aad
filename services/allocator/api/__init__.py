"""The read side: what a reader (``gpuledger api``) serves from its own projection of the log.

The applications themselves (routes, authentication, error middleware, start-up) are in
:mod:`services.allocator.http`; the reader's composition root is :mod:`services.allocator.reader`.
Modules here: ``follower`` (the reader's projection, following the log by position), ``bounds``
(errors, body bounds, the body parser process) and ``parse_worker`` (that process), ``paging``
(query parameters, ``limit``/``continue``), ``bodies`` (checked write values), ``documents`` (JSON
shapes of pools, nodes, allocations, queue, quotas), ``context`` (what handlers share), ``probes``
(health, readiness, metrics of the writer and of a reader), ``reads``/``writes`` (handlers),
``outcomes`` (waiting for the decision of a published intent), ``openapi`` (the served document),
``keeper`` (current reasons, written to the read model), ``ended``/``lives`` (an allocation's life,
through the History port), ``gauges``/``quota_gauges`` (metrics read at scrape time), ``verify``
(``replay --verify``).
"""
