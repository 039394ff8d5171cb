"""Access as a door words it: scopes parsed from text, the passphrase that unlocks a locked
source (and where the keyring keeps it), and whether a host is this machine's."""

from stratamem.access.locks import (
    PASSPHRASE_ENV,
    check_passphrase,
    keyring_place,
    passphrase_for,
    stored_passphrase,
)
from stratamem.remote import is_loopback
from stratamem.store.access import parse_scopes

__all__ = [
    "PASSPHRASE_ENV",
    "check_passphrase",
    "is_loopback",
    "keyring_place",
    "parse_scopes",
    "passphrase_for",
    "stored_passphrase",
]
