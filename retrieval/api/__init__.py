"""The query service's parts: request models, the one set of request limits, and its routes by topic.

`retrieval.service.create_app` composes them: `status_routes` (`/healthz`, `/readyz`,
`/v1/indexes`), `search_routes` (`/v1/search`), `alias_routes` (`/v1/aliases`) and `docs_routes`
(offline `/docs`, `/redoc`), each given one `ServiceContext`; `admission` holds searches to the
stated latency, `key_check` tells whether a request carries the key (what `/readyz` shows).
"""
