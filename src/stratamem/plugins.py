"""Name → factory registries with third-party plugins (embedders, summarizers).

Built-in names come first. Plugins register through an entry-point group: the entry point's
name is the plugin's name and its object a factory called with the options given to
:meth:`Registry.create`. A plugin is imported only when its name is asked for, and never
replaces a built-in name; one that fails to import is a :class:`RegistryError` naming it,
never a missing name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

from stratamem.errors import RegistryError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, group: str, builtins: Mapping[str, Callable[..., T]]) -> None:
        self.kind = kind
        self.group = group
        self._factories: dict[str, Callable[..., T]] = dict(builtins)
        self._loaded = False

    def copy(self) -> Registry[T]:
        """A registry with the same factories that looks up the plugins again."""
        return Registry(self.kind, self.group, self._factories)

    def register(self, name: str, factory: Callable[..., T]) -> None:
        """Make ``factory(**options)`` available as ``create(name, **options)``."""
        self._factories[name] = factory

    def known(self) -> list[str]:
        """The names :meth:`create` accepts, sorted."""
        self._load()
        return sorted(self._factories)

    def create(self, name: str, **options: Any) -> T:
        self._load()
        try:
            factory = self._factories[name]
        except KeyError:
            raise RegistryError(
                f"unknown {self.kind} {name!r}; known: {', '.join(sorted(self._factories))}"
            ) from None
        return factory(**options)

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for entry_point in entry_points(group=self.group):
            self._factories.setdefault(entry_point.name, self._plugin(entry_point))

    def _plugin(self, entry_point: EntryPoint) -> Callable[..., T]:
        def factory(**options: Any) -> T:
            try:
                loaded = entry_point.load()
            except Exception as exc:  # a broken plugin must not look like a missing name
                raise RegistryError(
                    f"{self.kind} plugin {entry_point.name!r} ({entry_point.value}) failed to "
                    f"load: {exc}"
                ) from exc
            made: T = loaded(**options)
            return made

        return factory
