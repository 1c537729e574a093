"""spothop's Alembic history: one file per revision in ``versions/``, run by :mod:`spothop.state.migrate`.

Each revision spells its tables out in full rather than importing the table
modules: a migration is a record of what the schema was at that step, and must
not change when the current definitions do.
"""
