"""PIL integration (docs/wire/code-interpreter.md, "Expected results").

``Image.show()`` displays the image in the notebook output instead of
starting an external viewer, and ``Image.save(path)`` also displays the saved
image, so both yield a result with ``png``. PIL is patched when it is first
imported (an import hook), so loading the extension does not import PIL.
"""

import importlib.abc
import os
import sys

_PATCHED = "_cubby_display_patched"


def install():
    """Patch PIL.Image now if it is imported, else when it is imported."""
    module = sys.modules.get("PIL.Image")
    if module is not None:
        patch_image_module(module)
        return
    if not any(isinstance(f, _PILFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PILFinder())


def uninstall():
    """Remove the import hook and restore PIL.Image's methods."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _PILFinder)]
    module = sys.modules.get("PIL.Image")
    if module is None or not getattr(module.Image, _PATCHED, False):
        return
    cls = module.Image
    cls.show, cls.save = cls.show._cubby_original, cls.save._cubby_original
    delattr(cls, _PATCHED)


def _display(image):
    from IPython.core.interactiveshell import InteractiveShell

    if InteractiveShell.initialized():
        from IPython.display import display

        display(image)


def patch_image_module(module):
    """Wrap module.Image.show and .save (idempotent)."""
    cls = module.Image
    if getattr(cls, _PATCHED, False):
        return
    original_show, original_save = cls.show, cls.save

    def show(self, *args, **kwargs):
        _display(self)

    def save(self, fp, *args, **kwargs):
        result = original_save(self, fp, *args, **kwargs)
        # Only saves to a path: PIL's own _repr_png_ saves into a buffer.
        if isinstance(fp, (str, bytes, os.PathLike)):
            _display(self)
        return result

    show.__doc__, save.__doc__ = original_show.__doc__, original_save.__doc__
    show._cubby_original, save._cubby_original = original_show, original_save
    cls.show, cls.save = show, save
    setattr(cls, _PATCHED, True)


class _PILFinder(importlib.abc.MetaPathFinder):
    """Finds PIL.Image through the other finders and patches it once loaded."""

    def find_spec(self, name, path, target=None):
        if name != "PIL.Image":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        patch_image_module(module)
