"""Hardware adaptation: one adapter per cloud behind one typed interface."""
