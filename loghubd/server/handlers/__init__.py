"""The handlers of `loghubd serve`'s HTTP API, one module per kind of resource; the
route table is `loghubd.server.routes.ROUTES`."""
