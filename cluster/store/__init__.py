"""The storage seam: the contracts (:mod:`.base`), PostgreSQL and in-memory
implementations, migrations and the named SQL."""
