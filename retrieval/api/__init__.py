"""The query service's parts: request models, the one set of request limits, and its routes by topic.

`retrieval.api.service.create_app` composes them: `status_routes` (`/healthz`, `/readyz`,
`/v1/indexes`), `search_routes` (`/v1/search`), `alias_routes` (`/v1/aliases`), `key_routes`
(`/v1/keys`, `/v1/audit`), `metrics` (`/metrics` and its middleware) and `docs_routes` (offline
`/docs`, `/redoc`), each given one `ServiceContext`; `auth` says who calls (a `Caller`) and
`rate_limits` how often they may;
`admission` holds searches to the stated latency, `key_check` tells whether a request carries the
key (what `/readyz` shows).
"""
