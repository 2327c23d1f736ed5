"""Many problems: scheduling (local pool or Ray), records, tables, plots (`kcoder suite`)."""
