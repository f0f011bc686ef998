"""The operator's actions, each audited: replay, skip, acknowledge, outbox revive, recover and
adopt, archive, shadow start. The CLI, the Dagster jobs and the cut-over commands call them; the message path
never does (an import contract keeps ``pipeline`` from importing this package)."""
