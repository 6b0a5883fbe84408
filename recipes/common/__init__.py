"""Helpers shared by the recipes (synthetic corpora, manifest discovery, feature specs).

The recipe scripts put ``recipes/`` on ``sys.path`` and import ``common`` from there.
"""
