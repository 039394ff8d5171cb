"""Stores by location: whether a location is a URL, how it is shown (without a password),
and copying one store into another."""

from stratamem.store.copy import CopyProgress, copy_store
from stratamem.store.urls import shown_location, url_scheme

__all__ = ["CopyProgress", "copy_store", "shown_location", "url_scheme"]
