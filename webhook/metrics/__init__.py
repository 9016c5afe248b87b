"""Every metric family and the views they read (the cards as HAMi and `cards` show them),
below the front-ends that serve them; docs/architecture.md."""
