"""The gang ungater (DESIGN.md §9): ``decision`` is pure (no kubernetes import); ``runner`` is the
cluster glue (informers, leader election, patches, Events, metrics); ``commands`` the CLI."""
