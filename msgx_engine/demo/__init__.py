"""The demo: a generated airport day (``day``), the Dagster instance it runs in (``instance``),
the ``msgx demo`` orchestration (``run``) and what it prints (``summary``)."""
