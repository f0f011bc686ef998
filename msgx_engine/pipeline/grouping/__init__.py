"""Speed machinery of the message path: consecutive messages share one transaction (group
commit), the next heads and their flights are read at once (read-ahead), and a group's writes go
in three round trips at its commit (write-behind). The pump's unit of work ``Grouped`` puts them
together; with ``group_messages=1`` none of it runs and every row is the same (tests/integration/
test_uow_modes.py)."""
