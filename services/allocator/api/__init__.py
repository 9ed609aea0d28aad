"""The allocator's operator HTTP API (aiohttp): reads of the projection, live explanations,
writes published as intents, OpenAPI document, bearer-token authentication and input bounds.

Modules: ``app`` (routes, middlewares, start), ``guard`` (errors, body and query bounds),
``paging`` (``limit``/``continue``), ``documents`` (JSON shapes of pools, nodes, queue, quotas),
``reads``/``writes`` (handlers), ``outcomes`` (waiting for the decision of a published intent),
``openapi`` (the served document), ``keeper`` (current reasons in the read model),
``gauges`` (scrape-time metrics).
"""
