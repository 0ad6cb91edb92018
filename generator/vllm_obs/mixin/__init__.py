"""A jsonnet monitoring mixin built from the same rules and dashboards as the rest of the bundle."""

from .build import mixin_files

__all__ = ["mixin_files"]
