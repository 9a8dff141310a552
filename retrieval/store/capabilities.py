"""What the connected Postgres and its pgvector can do (halfvec, iterative index scans), read from the server."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from chunkyard.retrieval.settings.config_fields import VECTOR_STORAGES

HALFVEC_SINCE = (0, 7, 0)  # pgvector 0.7.0: the halfvec type and halfvec_cosine_ops
ITERATIVE_SCAN_SINCE = (0, 8, 0)  # pgvector 0.8.0: hnsw.iterative_scan, hnsw.max_scan_tuples
# pgvector's limit on the dimensions an HNSW index takes, per storage type.
HNSW_MAX_DIMS = {"vector": 2000, "halfvec": 4000}


class VectorFeatureError(ValueError):
    """An index asks for something the server's pgvector does not have."""


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("."):
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


@dataclass(frozen=True)
class VectorFeatures:
    """The server's versions and the pgvector features chunkyard uses when present."""

    postgres_version: str  # server_version, e.g. "18.3"
    postgres_version_num: int  # server_version_num, e.g. 180003
    pgvector_version: str  # pg_extension.extversion of `vector`, e.g. "0.8.2"

    @property
    def halfvec(self) -> bool:
        """halfvec columns, casts and HNSW indexes (pgvector >= 0.7)."""
        return _version_tuple(self.pgvector_version) >= HALFVEC_SINCE

    @property
    def iterative_scan(self) -> bool:
        """HNSW iterative index scans, so a filtered query keeps scanning until k rows match (>= 0.8)."""
        return _version_tuple(self.pgvector_version) >= ITERATIVE_SCAN_SINCE

    @property
    def postgres_major(self) -> int:
        return self.postgres_version_num // 10000

    def as_dict(self) -> dict[str, str | int | bool]:
        return {
            "postgres_version": self.postgres_version,
            "pgvector_version": self.pgvector_version,
            "halfvec": self.halfvec,
            "iterative_scan": self.iterative_scan,
        }

    def describe(self) -> str:
        """One line for people: versions, and the features an old pgvector lacks."""
        missing = [
            name
            for name, present in (("halfvec", self.halfvec), ("iterative index scans", self.iterative_scan))
            if not present
        ]
        line = f"PostgreSQL {self.postgres_version}, pgvector {self.pgvector_version}"
        return line + (f" (without {' and '.join(missing)}: pgvector 0.8 has them)" if missing else "")

    def require_storage(self, storage: str, where: str) -> None:
        """Raise VectorFeatureError when `storage` (an index's `vector_storage`) is not available here."""
        if storage not in VECTOR_STORAGES:
            raise VectorFeatureError(f"{where}: expected one of {list(VECTOR_STORAGES)}, got {storage!r}")
        if storage == "halfvec" and not self.halfvec:
            raise VectorFeatureError(
                f"{where}: halfvec needs pgvector 0.7 or later, but this server has pgvector "
                f"{self.pgvector_version} (PostgreSQL {self.postgres_version}); set `vector_storage: vector`, "
                "or install a newer pgvector on the server and run `ALTER EXTENSION vector UPDATE`"
            )


def detect_features(conn: psycopg.Connection) -> VectorFeatures:
    """The connected server's versions (the `vector` extension must exist: `retrieval.store.db.connect` creates it)."""
    row = conn.execute(
        "SELECT current_setting('server_version'), current_setting('server_version_num')::int,"
        " (SELECT extversion FROM pg_extension WHERE extname = 'vector')"
    ).fetchone()
    assert row is not None
    version, number, extversion = row
    return VectorFeatures(
        postgres_version=str(version).split()[0],
        postgres_version_num=int(number),
        pgvector_version=str(extversion or "none"),
    )
