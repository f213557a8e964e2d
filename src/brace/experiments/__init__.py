"""Experiment pipelines that reproduce the paper's anchors (``docs/spec.md`` §7).

Modules here may need the optional extras (``experiments``: tqdm, matplotlib;
``mnist``: torch); the core :mod:`brace` package never imports them.
"""
