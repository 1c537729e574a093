"""The one SQLAlchemy ``MetaData`` every spothop table is defined on.

Constraint and index names follow one convention, so migrations can name
what they alter on every database the same way. Primary keys are named as
PostgreSQL names them by default (``<table>_pkey``), which is what the stores of
spothop 0.1.0, made before this convention, already have.
"""

from __future__ import annotations

from sqlalchemy import MetaData

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "%(table_name)s_pkey",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)
