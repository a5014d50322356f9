"""The storage seam: the role contracts (:mod:`.contracts`; their union in
:mod:`.base`), the PostgreSQL and in-memory implementations cut the same
way (:mod:`.postgres`, :mod:`.postgres_cron`, :mod:`.memory`,
:mod:`.memory_cron`), migrations and the named SQL (:mod:`.sql`)."""
