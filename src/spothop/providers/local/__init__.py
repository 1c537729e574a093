"""The embedded local cloud: instances as local processes, a replayed spot market, real metadata protocols."""
