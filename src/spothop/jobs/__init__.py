"""Jobs: the spec, the lifecycle, the store and the controller (decide, then act)."""
