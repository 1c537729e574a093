"""Catalog file formats spothop imports, one module each (today SkyPilot's ``vms.csv``).

What is specific to one cloud inside a format — SkyPilot prices a GCP GPU as a
host VM row plus a separate accelerator row — lives in that format's module,
never in the generic catalog code (the same rule as ``market/sources/``).
"""
